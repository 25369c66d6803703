//! Runs the native TCP reassembler over a packet dump and prints its events as JSON
//! lines, for the differential test against the oracle `tests/oracle/tcp.py`
//! (tests/test_native_tcp.py).
//!
//! Usage: `dump_chunks PACKETS [option=value ...]`, options being `TcpConfig` fields.
//!
//! PACKETS holds records, little-endian: frame u64, ts_ns i64, IP version u8 (4 or 6),
//! src and dst addresses (4 or 16 bytes each), sport u16, dport u16, seq u32, ack u32,
//! flags u8, missing u32, payload length u32, payload.
//!
//! Output: one line per event (`{"open": ...}`, `{"chunk": ...}`, `{"close": ...}`),
//! then `{"streams": [...]}` (the stream index after each packet, -1 for none) and
//! `{"counters": {...}}`.

use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;

use _core::cursor::{Cursor, Fault};
use _core::tcp::{Reassembler, TcpConfig};
use _core::types::{Counters, Endpoint, Event, Packet};
use serde_json::{json, Value};

fn addr(cur: &mut Cursor<'_>, version: u8) -> Result<IpAddr, Fault> {
    match version {
        4 => Ok(IpAddr::V4(Ipv4Addr::from(cur.array::<4>()?))),
        6 => Ok(IpAddr::V6(Ipv6Addr::from(cur.array::<16>()?))),
        _ => Err(Fault::Short), // not a record this dump writes: read as cut off
    }
}

/// One packet record of the dump (little-endian, as the module doc lays it out).
fn packet<'a>(cur: &mut Cursor<'a>) -> Result<Packet<'a>, Fault> {
    let frame = cur.u64_le()?;
    let ts_ns = cur.i64_le()?;
    let version = cur.u8()?;
    let src = addr(cur, version)?;
    let dst = addr(cur, version)?;
    let sport = cur.u16_le()?;
    let dport = cur.u16_le()?;
    let seq = cur.u32_le()?;
    let ack = cur.u32_le()?;
    let flags = cur.u8()?;
    let missing = cur.u32_le()?;
    let len = cur.u32_le()? as usize;
    let payload = cur.take(len)?;
    Ok(Packet {
        frame,
        ts_ns,
        src,
        dst,
        sport,
        dport,
        seq,
        ack,
        flags,
        payload,
        missing,
    })
}

fn configure(cfg: &mut TcpConfig, option: &str) -> Result<(), String> {
    let (name, value) = option
        .split_once('=')
        .ok_or(format!("not name=value: {option}"))?;
    let bad = |e: std::num::ParseIntError| format!("{name}: {e}");
    let optional = |v: &str| -> Result<Option<i64>, String> {
        if v == "none" {
            Ok(None)
        } else {
            v.parse().map(Some).map_err(bad)
        }
    };
    match name {
        "idle_timeout_ns" => cfg.idle_timeout_ns = optional(value)?,
        "file_idle_timeout_ns" => cfg.file_idle_timeout_ns = optional(value)?,
        "max_buffered_bytes" => cfg.max_buffered_bytes = value.parse().map_err(bad)?,
        "max_total_buffered_bytes" => cfg.max_total_buffered_bytes = value.parse().map_err(bad)?,
        "ack_gap_packets" => cfg.ack_gap_packets = value.parse().map_err(bad)?,
        "ack_gap_ns" => cfg.ack_gap_ns = value.parse().map_err(bad)?,
        "close_grace_ns" => cfg.close_grace_ns = value.parse().map_err(bad)?,
        "rst_grace_ns" => cfg.rst_grace_ns = value.parse().map_err(bad)?,
        "closed_memory" => cfg.closed_memory = value.parse().map_err(bad)?,
        "max_connections" => cfg.max_connections = value.parse().map_err(bad)?,
        "max_buffered_segments" => cfg.max_buffered_segments = value.parse().map_err(bad)?,
        "max_total_buffered_segments" => {
            cfg.max_total_buffered_segments = value.parse().map_err(bad)?
        }
        "suspect_syn_window_ns" => cfg.suspect_syn_window_ns = value.parse().map_err(bad)?,
        _ => return Err(format!("unknown option {name}")),
    }
    Ok(())
}

fn endpoint((ip, port): Endpoint) -> Value {
    json!([ip.to_string(), port])
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn event_json(event: &Event) -> Value {
    match event {
        Event::Open(o) => {
            json!({"open": [o.stream, endpoint(o.initiator), endpoint(o.responder), o.syn_seen]})
        }
        Event::Chunk(c) => json!({"chunk": [
            c.stream, endpoint(c.src), endpoint(c.dst), hex(&c.data), c.ts_ns, c.frame,
            c.resync, c.lost
        ]}),
        Event::Close(c) => json!({"close": [c.stream, c.reason.as_str()]}),
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: dump_chunks PACKETS [option=value ...]")?;
    let mut cfg = TcpConfig::default();
    for option in &args[1..] {
        configure(&mut cfg, option)?;
    }
    let data = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let mut cursor = Cursor::new(&data, 0);
    let mut reassembler = Reassembler::new(cfg);
    let mut counters = Counters::default();
    let mut events = Vec::new();
    let mut streams = Vec::new();
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    let mut write = |events: &mut Vec<Event>| -> Result<(), String> {
        for e in events.drain(..) {
            writeln!(w, "{}", event_json(&e)).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    while cursor.left() > 0 {
        let at = cursor.pos();
        let pkt = packet(&mut cursor).map_err(|_| format!("bad record at byte {at}"))?;
        reassembler.feed(&pkt, &mut counters, &mut events);
        streams.push(reassembler.last_stream().map_or(-1, i64::from));
        write(&mut events)?;
    }
    reassembler.flush(&mut counters, &mut events);
    write(&mut events)?;
    let counts: serde_json::Map<String, Value> = counters
        .iter()
        .map(|(k, v)| (k.name().to_owned(), json!(v)))
        .collect();
    writeln!(w, "{}", json!({"streams": streams})).map_err(|e| e.to_string())?;
    writeln!(w, "{}", json!({"counters": counts})).map_err(|e| e.to_string())?;
    w.flush().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dump_chunks: {e}");
            ExitCode::FAILURE
        }
    }
}
