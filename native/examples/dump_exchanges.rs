//! Differential-test driver: TCP events dumped by the Python reassembler -> `Session::event`
//! -> exchanges as JSON lines, then one line with the counters and TLS streams.
//!
//! Usage: dump_exchanges MODEL.json EVENTS.jsonl
//!
//! MODEL.json holds the exported spec model (`dissector.protocol.export`, as the core gets
//! it: which (api_key, version) exist, header versions, where Produce's acks sits) under
//! "model", and the session options. EVENTS.jsonl has one event a line:
//! `{"open": [stream, [ip, port], [ip, port], syn_seen]}`,
//! `{"chunk": [stream, src, dst, hex, ts_ns, frame, resync, lost]}`,
//! `{"close": [stream, reason]}`.
//! Payloads are printed as their length and CRC-32, which Python's zlib computes alike.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::IpAddr;
use std::sync::Arc;

use _core::kafka::model::Model;
use _core::kafka::session::{Session, SessionConfig};
use _core::types::{
    Chunk, CloseReason, Counters, Endpoint, Event, Exchange, ExchangeKind, KafkaFrame, StreamClose,
    StreamOpen,
};
use serde_json::{json, Value};

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
    // The exported spec model itself, as the core gets it: versions, header versions and
    // where Produce's acks sits all come from it.
    let spec = Model::from_json(m["model"].as_str().expect("model text")).expect("spec model");
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
        sasl_handshake_key: spec.sasl_handshake_key,
        produce_key: spec.produce_key,
    };
    let mut session = Session::new(cfg, Arc::new(spec));
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
        .map(|(k, v)| (k.name().to_owned(), json!(v)))
        .collect();
    writeln!(
        w,
        "{}",
        json!({"counters": counts, "tls_streams": session.tls_streams(), "session_ns": busy.as_nanos() as u64})
    )
    .expect("write");
}
