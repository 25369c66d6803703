//! Test driver: the native summary of every pair in a dump, one JSON line each.
//!
//! Usage: `summarize_dump MODEL.json DUMP.bin`. The model is `export_model()`'s JSON;
//! the dump (written by `tests/test_native_summary.py`) is a sequence of records:
//! `C` (a new capture: forget the topic ids learnt) or `P` followed by api_key i16,
//! api_version i16, then the request and the response payload, each as a length i32
//! (-1: absent) and its bytes. Big-endian throughout.

use std::io::{BufWriter, Write};

use _core::cursor::Cursor;
use _core::kafka::model::Model;
use _core::kafka::records::Budget;
use _core::kafka::summary::{summarize, Summary, TopicNames};
use _core::types::Counters;
use serde_json::{json, Value};

const MAX_DECOMPRESSED: u64 = 64 * 1024 * 1024; // records.py's default per field

/// A length i32 (-1: absent) and that many bytes.
fn payload<'a>(cur: &mut Cursor<'a>) -> Result<Option<&'a [u8]>, String> {
    let at = cur.pos();
    let cut = |_| format!("dump: cut at offset {at}");
    let n = cur.i32().map_err(cut)?;
    if n < 0 {
        return Ok(None);
    }
    cur.take(n as usize).map(Some).map_err(cut)
}

fn to_json(model: &Model, s: &Summary) -> Value {
    let extracts: serde_json::Map<String, Value> = model
        .extract_columns()
        .zip(&s.extracts)
        .map(|(c, v)| (c.to_owned(), json!(v)))
        .collect();
    json!({
        "error_code": s.error_code,
        "error_name": s.error_name.as_deref(),
        "error_count": s.error_count,
        "topics": s.topics,
        "partitions": s.partitions,
        "records": s.records,
        "record_bytes": s.record_bytes,
        "compression": s.compression,
        "throttle_ms": s.throttle_ms,
        "decode_error": s.decode_error,
        "record_errors": s.record_errors,
        "fatal": s.fatal,
        "defer": s.defer,
        "defer_reason": s.defer_reason,
        "assumed_version": s.assumed_version,
        "extracts": extracts,
    })
}

enum Entry<'a> {
    Capture,
    Pair(i16, i16, Option<&'a [u8]>, Option<&'a [u8]>),
}

fn parse(dump: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    let mut entries = Vec::new();
    let mut cur = Cursor::new(dump, 0);
    while let Ok(kind) = cur.u8() {
        match kind {
            b'C' => entries.push(Entry::Capture),
            b'P' => {
                let at = cur.pos();
                let (Ok(api_key), Ok(version)) = (cur.i16(), cur.i16()) else {
                    return Err(format!("dump: cut at offset {at}"));
                };
                let request = payload(&mut cur)?;
                let response = payload(&mut cur)?;
                entries.push(Entry::Pair(api_key, version, request, response));
            }
            other => {
                let at = cur.pos() - 1;
                return Err(format!("dump: unknown record {other} at offset {at}"));
            }
        }
    }
    Ok(entries)
}

/// Summaries of every pair, each handed to `emit`.
fn summarize_all(
    model: &Model,
    entries: &[Entry<'_>],
    mut emit: impl FnMut(&Summary) -> Result<(), String>,
) -> Result<(), String> {
    let mut topics = TopicNames::new();
    let mut counters = Counters::default();
    for e in entries {
        match *e {
            Entry::Capture => topics = TopicNames::new(),
            Entry::Pair(api_key, version, request, response) => {
                let mut budget = Budget::per_frame(MAX_DECOMPRESSED);
                let s = summarize(
                    model,
                    &mut topics,
                    api_key,
                    version,
                    request,
                    response,
                    &mut budget,
                    &mut counters,
                );
                emit(&s)?;
            }
        }
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model_path, dump_path] = args.as_slice() else {
        return Err("usage: summarize_dump MODEL.json DUMP.bin".to_owned());
    };
    let text = std::fs::read_to_string(model_path).map_err(|e| format!("{model_path}: {e}"))?;
    let model = Model::from_json(&text)?;
    let dump = std::fs::read(dump_path).map_err(|e| format!("{dump_path}: {e}"))?;
    let entries = parse(&dump)?;
    // SUMMARY_REPEAT=N: time N passes instead of printing (a rough speed check)
    if let Some(repeat) = std::env::var("SUMMARY_REPEAT")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        let pairs = entries
            .iter()
            .filter(|e| matches!(e, Entry::Pair(..)))
            .count()
            .max(1);
        let started = std::time::Instant::now();
        let mut deferred = 0usize;
        for _ in 0..repeat {
            summarize_all(&model, &entries, |s| {
                deferred += usize::from(s.defer);
                Ok(())
            })?;
        }
        let per_pair = started.elapsed().as_secs_f64() / f64::from(repeat.max(1)) / pairs as f64;
        eprintln!(
            "{pairs} pairs, {:.2} us per pair, {deferred} deferred in all passes",
            per_pair * 1e6
        );
        return Ok(());
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    summarize_all(&model, &entries, |s| {
        writeln!(out, "{}", to_json(&model, s)).map_err(|e| e.to_string())
    })?;
    out.flush().map_err(|e| e.to_string())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("summarize_dump: {e}");
        std::process::exit(2);
    }
}
