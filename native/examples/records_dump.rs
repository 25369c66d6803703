//! Differential-test driver: read a file of blobs, each `u32 big-endian length` then
//! that many bytes of a `records` field, and print one JSON line per blob with what
//! `summarize_records` found. Used by tests/test_native_records.py against records.py.
//!
//! usage: records_dump FILE [--budget BYTES] [--shared]
//!   --budget  per-frame decompression budget (default: records.py's 64 MiB)
//!   --shared  all blobs share one budget, as the `records` fields of one frame do

use std::process::ExitCode;

use _core::cursor::Cursor;
use _core::kafka::records::{summarize_records, Budget, DEFAULT_MAX_DECOMPRESSED};
use _core::types::Counters;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: records_dump FILE [--budget BYTES] [--shared]");
        return ExitCode::from(2);
    };
    let mut budget = DEFAULT_MAX_DECOMPRESSED;
    let mut shared = false;
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--budget" => match rest.next().and_then(|v| v.parse().ok()) {
                Some(v) => budget = v,
                None => {
                    eprintln!("--budget needs a number");
                    return ExitCode::from(2);
                }
            },
            "--shared" => shared = true,
            other => {
                eprintln!("unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut frame = Budget::per_frame(budget);
    let mut cur = Cursor::new(&data, 0);
    while cur.left() > 0 {
        let at = cur.pos();
        let Ok(blob) = cur.u32().and_then(|len| cur.take(len as usize)) else {
            eprintln!("blob at {at} cut off");
            return ExitCode::FAILURE;
        };
        if !shared {
            frame = Budget::per_frame(budget);
        }
        let mut counters = Counters::default();
        let s = summarize_records(blob, &mut frame, &mut counters);
        let mut counts: Vec<(String, u64)> = counters
            .iter()
            .map(|(k, v)| (k.name().to_owned(), v))
            .collect();
        counts.sort();
        let line = serde_json::json!({
            "records": s.records,
            "bytes": s.bytes,
            "batches": s.batches,
            "partial_batches": s.partial_batches,
            "codecs": s.codec_names(),
            "errors": s.errors,
            "counters": counts.into_iter().map(|(k, v)| (k, serde_json::Value::from(v))).collect::<serde_json::Map<String, serde_json::Value>>(),
            "budget_left": frame.remaining,
        });
        println!("{line}");
    }
    ExitCode::SUCCESS
}
