//! Differential-test driver: TCP events dumped by the Python reassembler -> `Session::event`
//! -> exchanges as JSON lines, then one line with the counters and TLS streams.
//!
//! Usage: dump_exchanges MODEL.json EVENTS.jsonl
//!
//! MODEL.json is dumped from the Python spec model (which (api_key, version) exist, which
//! requests are flexible or use header v0, the keys of Produce and SaslHandshake, and the
//! session options). EVENTS.jsonl has one event a line:
//! `{"open": [stream, [ip, port], [ip, port], syn_seen]}`,
//! `{"chunk": [stream, src, dst, hex, ts_ns, frame, resync, lost]}`,
//! `{"close": [stream, reason]}`.
//! Payloads are printed as their length and CRC-32, which Python's zlib computes alike.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::sync::Arc;

use _core::session::{Session, SessionConfig};
use _core::types::{
    Chunk, CloseReason, Counters, Endpoint, Event, Exchange, ExchangeKind, KafkaFrame, StreamClose,
    StreamOpen, Versions,
};
use serde_json::{json, Value};

/// `Versions` from tables dumped by the Python model. Produce's acks is read with the
/// rule of `kafka_header.produce_acks`, re-expressed here for the test only.
struct TableVersions {
    known: HashSet<(i16, i16)>,
    flexible: HashSet<(i16, i16)>,
    header_v0: HashSet<(i16, i16)>,
    produce_key: i16,
}

fn pairs(v: &Value) -> HashSet<(i16, i16)> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get(0)?.as_i64()? as i16, p.get(1)?.as_i64()? as i16)))
        .collect()
}

impl Versions for TableVersions {
    fn known(&self, api_key: i16, version: i16) -> bool {
        self.known.contains(&(api_key, version))
    }
    fn request_flexible(&self, api_key: i16, version: i16) -> bool {
        self.flexible.contains(&(api_key, version))
    }
    fn request_header_v0(&self, api_key: i16, version: i16) -> bool {
        self.header_v0.contains(&(api_key, version))
    }
    fn request_int_field(
        &self,
        api_key: i16,
        version: i16,
        body: &[u8],
        field: &str,
    ) -> Option<i64> {
        if api_key != self.produce_key || field != "acks" {
            return None;
        }
        let flexible = self.known(api_key, version) && self.request_flexible(api_key, version);
        let mut pos = 0usize;
        if version >= 3 {
            // transactional_id precedes acks from v3 on.
            if flexible {
                let (len, p) = uvarint(body, pos)?;
                pos = p.checked_add(len.saturating_sub(1) as usize)?;
            } else {
                let len = i16::from_be_bytes([*body.get(pos)?, *body.get(pos + 1)?]);
                pos += 2 + len.max(0) as usize;
            }
        }
        Some(i64::from(i16::from_be_bytes([
            *body.get(pos)?,
            *body.get(pos + 1)?,
        ])))
    }
}

fn uvarint(buf: &[u8], mut pos: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        if shift > 28 {
            return None;
        }
        let b = *buf.get(pos)?;
        pos += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((value, pos));
        }
        shift += 7;
    }
}

fn endpoint(v: &Value) -> Endpoint {
    let ip: IpAddr = v[0].as_str().and_then(|s| s.parse().ok()).expect("ip");
    (ip, v[1].as_u64().expect("port") as u16)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

fn reason(s: &str) -> CloseReason {
    match s {
        "fin" => CloseReason::Fin,
        "rst" => CloseReason::Rst,
        "reused" => CloseReason::Reused,
        "idle" => CloseReason::Idle,
        _ => CloseReason::EndOfCapture,
    }
}

fn event(line: &str) -> Event {
    let v: Value = serde_json::from_str(line).expect("event json");
    if let Some(o) = v.get("open") {
        Event::Open(StreamOpen {
            stream: o[0].as_u64().expect("stream") as u32,
            initiator: endpoint(&o[1]),
            responder: endpoint(&o[2]),
            syn_seen: o[3].as_bool().expect("syn"),
        })
    } else if let Some(c) = v.get("chunk") {
        Event::Chunk(Chunk {
            stream: c[0].as_u64().expect("stream") as u32,
            src: endpoint(&c[1]),
            dst: endpoint(&c[2]),
            data: unhex(c[3].as_str().expect("data")),
            ts_ns: c[4].as_i64().expect("ts"),
            frame: c[5].as_u64().expect("frame"),
            resync: c[6].as_bool().expect("resync"),
            lost: c[7].as_u64().expect("lost"),
            snapped: false,
        })
    } else {
        let c = &v["close"];
        Event::Close(StreamClose {
            stream: c[0].as_u64().expect("stream") as u32,
            reason: reason(c[1].as_str().unwrap_or("")),
        })
    }
}

fn kind(k: ExchangeKind) -> &'static str {
    match k {
        ExchangeKind::Pair => "pair",
        ExchangeKind::NoResponse => "no_response",
        ExchangeKind::Unanswered => "unanswered",
        ExchangeKind::OrphanResponse => "orphan_response",
        ExchangeKind::SaslToken => "sasl_token",
        ExchangeKind::Malformed => "malformed",
    }
}

fn frame_json(f: &Option<KafkaFrame>) -> Value {
    match f {
        None => Value::Null,
        Some(f) => json!({
            "first_ts": f.first_ts_ns, "last_ts": f.last_ts_ns,
            "first_frame": f.first_frame, "last_frame": f.last_frame,
            "wire_size": f.wire_size(), "after_gap": f.after_gap,
            "crc": crc32fast::hash(&f.payload),
        }),
    }
}

fn exchange_json(e: &Exchange) -> Value {
    json!({
        "stream": e.stream,
        "client": [e.client.0.to_string(), e.client.1],
        "broker": [e.broker.0.to_string(), e.broker.1],
        "kind": kind(e.kind),
        "api_key": e.api_key, "api_version": e.api_version,
        "correlation_id": e.correlation_id, "client_id": e.client_id, "note": e.note,
        "request": frame_json(&e.request), "response": frame_json(&e.response),
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, events] = &args[..] else {
        eprintln!("usage: dump_exchanges MODEL.json EVENTS.jsonl");
        std::process::exit(2);
    };
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(model).expect("model")).expect("model json");
    let key = |name: &str| m[name].as_i64().expect(name) as i16;
    let versions = TableVersions {
        known: pairs(&m["known"]),
        flexible: pairs(&m["flexible"]),
        header_v0: pairs(&m["header_v0"]),
        produce_key: key("produce_key"),
    };
    let cfg = SessionConfig {
        broker_ports: m["broker_ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p.as_u64())
            .map(|p| p as u16)
            .collect(),
        heuristic: m["heuristic"].as_bool().expect("heuristic"),
        max_frame: m["max_frame"].as_u64().expect("max_frame") as u32,
        idle_timeout_ns: None,
        sasl_handshake_key: key("sasl_handshake_key"),
        produce_key: key("produce_key"),
    };
    let mut session = Session::new(cfg, Arc::new(versions));
    let mut counters = Counters::default();
    let mut out = Vec::new();
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    let file = std::fs::File::open(events).expect("events");
    // Time spent in the session alone (not in reading the events), for a rough speed.
    let mut busy = std::time::Duration::ZERO;
    for line in BufReader::new(file).lines() {
        let line = line.expect("read");
        if line.is_empty() {
            continue;
        }
        let ev = event(&line);
        let t0 = std::time::Instant::now();
        session.event(ev, &mut counters, &mut out);
        busy += t0.elapsed();
        for e in out.drain(..) {
            writeln!(w, "{}", exchange_json(&e)).expect("write");
        }
    }
    session.finish(&mut counters, &mut out);
    for e in out.drain(..) {
        writeln!(w, "{}", exchange_json(&e)).expect("write");
    }
    let counts: serde_json::Map<String, Value> = counters
        .iter()
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    writeln!(
        w,
        "{}",
        json!({"counters": counts, "tls_streams": session.tls_streams(), "session_ns": busy.as_nanos() as u64})
    )
    .expect("write");
}
