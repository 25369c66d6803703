//! Print every TCP packet of a capture, then its counters, one TSV line each: the Rust
//! side of the differential test against `tests/oracle/capture.py`'s `read_packets`
//! (tests/test_native_capture.py).
//!
//! Usage: dump_packets CAPTURE...   (one "#file" line starts each capture's output)
//!        dump_packets --bench CAPTURE   (walk only, print packets/s to stderr)

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use _core::capture::open_path;
use _core::counter::Counter;
use _core::types::Counters;

fn hex(bytes: &[u8], out: &mut String) {
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
}

fn dump(path: &str, out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "#file\t{path}")?;
    let mut reader = match open_path(path) {
        Ok(r) => r,
        Err(e) => return writeln!(out, "#error\t{e}"),
    };
    let mut counters = Counters::default();
    let mut line = String::new();
    while let Some(p) = reader.next_packet(&mut counters) {
        line.clear();
        let _ = write!(
            line,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t",
            p.frame, p.ts_ns, p.src, p.dst, p.sport, p.dport, p.seq, p.ack, p.flags, p.missing
        );
        hex(p.payload, &mut line);
        writeln!(out, "{line}")?;
    }
    let mut names: Vec<(&str, u64)> = counters.iter().map(|(c, n)| (c.name(), n)).collect();
    names.sort();
    for (name, value) in names {
        writeln!(out, "#counter\t{name}\t{value}")?;
    }
    writeln!(out, "#source_bytes\t{}", reader.bytes_read())
}

fn bench(path: &str) {
    let start = Instant::now();
    let mut reader = open_path(path).unwrap_or_else(|e| panic!("{e}"));
    let mut counters = Counters::default();
    let (mut n, mut bytes) = (0u64, 0u64);
    while let Some(p) = reader.next_packet(&mut counters) {
        n += 1;
        bytes += p.payload.len() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{n} packets, {bytes} payload bytes, {} frames in {secs:.3}s: {:.2}M packets/s",
        counters.get(Counter::Frames),
        n as f64 / secs / 1e6
    );
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--bench") {
        for path in &args[1..] {
            bench(path);
        }
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for path in &args {
        dump(path, &mut out)?;
    }
    out.flush()
}
