//! Session: TCP events -> framers per direction -> correlator, through `Session::event`.

mod corr_common;

use _core::counter::Counter;
use _core::kafka::correlate::DEFAULT_BROKER_PORTS;
use _core::kafka::framing::DEFAULT_MAX_FRAME;
use _core::kafka::session::{Session, SessionConfig};
use _core::types::{
    CloseReason, Counters, Endpoint, Event, Exchange, ExchangeKind, StreamClose, StreamOpen,
};
use corr_common::*;

fn session(heuristic: bool) -> Session {
    Session::new(
        SessionConfig {
            broker_ports: DEFAULT_BROKER_PORTS.to_vec(),
            heuristic,
            max_frame: DEFAULT_MAX_FRAME,
            idle_timeout_ns: None,
            sasl_handshake_key: SASL_HANDSHAKE,
            produce_key: PRODUCE,
        },
        versions(),
    )
}

struct Run {
    s: Session,
    c: Counters,
    out: Vec<Exchange>,
    broker: Endpoint,
}

impl Run {
    fn new(heuristic: bool, broker: Endpoint) -> Self {
        let mut run = Run {
            s: session(heuristic),
            c: Counters::default(),
            out: Vec::new(),
            broker,
        };
        let open = StreamOpen {
            stream: 0,
            initiator: client(),
            responder: broker,
            syn_seen: true,
        };
        run.s.event(Event::Open(open), &mut run.c, &mut run.out);
        run
    }

    fn up(&mut self, data: &[u8], n: u64, resync: bool, lost: u64) {
        let ch = chunk(client(), self.broker, data, n, resync, lost);
        self.s.event(Event::Chunk(ch), &mut self.c, &mut self.out);
    }

    fn down(&mut self, data: &[u8], n: u64) {
        let ch = chunk(self.broker, client(), data, n, false, 0);
        self.s.event(Event::Chunk(ch), &mut self.c, &mut self.out);
    }

    fn end(mut self) -> (Vec<Exchange>, Counters, Vec<u32>) {
        let close = StreamClose {
            stream: 0,
            reason: CloseReason::Fin,
        };
        self.s
            .event(Event::Close(close), &mut self.c, &mut self.out);
        self.s.finish(&mut self.c, &mut self.out);
        let tls = self.s.tls_streams().to_vec();
        (self.out, self.c, tls)
    }
}

fn count(out: &[Exchange], kind: ExchangeKind) -> usize {
    out.iter().filter(|e| e.kind == kind).count()
}

#[test]
fn requests_released_after_a_hole_pair_with_responses_that_came_first() {
    let mut run = Run::new(true, broker());
    run.up(&wire_req(1), 1, false, 0);
    run.down(&wire(&resp(1, b"\x00\x00")), 2);
    // Requests 2-4 (frames 3, 5, 7) wait behind a hole in the request direction while
    // their responses are released.
    run.down(&wire(&resp(2, b"\x00\x00")), 4);
    run.down(&wire(&resp(3, b"\x00\x00")), 6);
    run.down(&wire(&resp(4, b"\x00\x00")), 8);
    assert_eq!(
        run.out.len(),
        1,
        "responses to requests not seen yet are held"
    );
    // The reassembler gives up on the hole: the requests come in one resync chunk.
    let late = [wire_req(2), wire_req(3), wire_req(4)].concat();
    run.up(&late, 7, true, 120);
    let (out, c, _) = run.end();
    let after_hole: Vec<_> = out.iter().skip(1).collect();
    assert_eq!(after_hole.len(), 3);
    assert!(after_hole.iter().all(|e| e.kind == ExchangeKind::Pair));
    assert_eq!(
        after_hole
            .iter()
            .map(|e| e.correlation_id)
            .collect::<Vec<_>>(),
        vec![Some(2), Some(3), Some(4)]
    );
    assert!(after_hole[0].request.as_ref().is_some_and(|f| f.after_gap));
    assert_eq!(
        (
            count(&out, ExchangeKind::OrphanResponse),
            count(&out, ExchangeKind::Unanswered)
        ),
        (0, 0)
    );
    assert_eq!(
        (
            c.get(Counter::OrphanResponses),
            c.get(Counter::LateRequestPairs),
            c.get(Counter::Resyncs)
        ),
        (0, 3, 1)
    );
}

#[test]
fn tls_lookalike_between_frames_does_not_end_kafka_on_the_connection() {
    let mut run = Run::new(true, broker());
    run.up(&wire_req(1), 1, false, 0);
    run.down(&wire(&resp(1, b"\x00\x00")), 2);
    run.up(&[0x16, 0x03, 0x02, 0x00, 0x01, 0x00], 3, true, 40);
    run.up(&wire_req(2), 4, false, 0);
    run.down(&wire(&resp(2, b"\x00\x00")), 5);
    let (out, c, tls) = run.end();
    assert_eq!(
        out.iter()
            .map(|e| (e.kind, e.correlation_id))
            .collect::<Vec<_>>(),
        vec![(ExchangeKind::Pair, Some(1)), (ExchangeKind::Pair, Some(2))]
    );
    assert!(tls.is_empty());
    assert_eq!(
        (
            c.get(Counter::TlsFalseAlarm),
            c.get(Counter::TlsConnectionsDirections)
        ),
        (1, 0)
    );
}

#[test]
fn real_tls_on_a_kafka_port_is_reported_not_framed() {
    let record = |kind: u8, len: usize| {
        let mut r = vec![kind, 0x03, 0x03];
        r.extend_from_slice(&(len as u16).to_be_bytes());
        r.extend(vec![0x5au8; len]);
        r
    };
    let mut run = Run::new(true, broker());
    run.up(&record(0x16, 300), 1, false, 0);
    run.down(&[record(0x16, 90), record(0x16, 2000)].concat(), 2);
    run.up(&[record(0x14, 1), record(0x16, 40)].concat(), 3, false, 0);
    run.down(&record(0x17, 500), 4);
    let (out, c, tls) = run.end();
    assert!(out.is_empty());
    assert_eq!(tls, vec![0]);
    assert_eq!(c.get(Counter::TlsConnectionsDirections), 2);
    assert_eq!(
        c.get(Counter::TlsBytes),
        (305 + 95 + 2005 + 6 + 45 + 505) as u64
    );
    assert_eq!(c.get(Counter::KafkaFrames), 0);
}

#[test]
fn connection_that_is_no_kafka_candidate_is_counted_in_bytes() {
    let mut run = Run::new(false, ep(2, 36333));
    run.up(&wire_req(1), 1, false, 0);
    let (out, c, _) = run.end();
    assert!(out.is_empty());
    assert_eq!(c.get(Counter::NonKafkaBytes), wire_req(1).len() as u64);
}

#[test]
fn open_requests_count_waiting_requests_by_api_key() {
    let mut run = Run::new(true, broker());
    run.up(&wire_req(1), 1, false, 0);
    run.up(&wire(&req(2, 3, 1, b"")), 2, false, 0);
    run.up(&wire(&req(3, 3, 1, b"")), 3, false, 0);
    assert_eq!(run.s.open_requests(), vec![(3, 2), (18, 1)]);
    run.down(&wire(&resp(2, b"")), 4);
    assert_eq!(run.s.open_requests(), vec![(3, 1), (18, 1)]);
    let (out, _, _) = run.end();
    assert_eq!(count(&out, ExchangeKind::Unanswered), 2);
}

#[test]
fn junk_events_never_panic() {
    let mut rng = Lcg(11);
    let mut run = Run::new(true, ep(2, 40000));
    for n in 0..2000u64 {
        let len = (rng.next() % 600) as usize;
        let mut data = rng.bytes(len);
        if data.len() >= 4 && rng.one_in(3) {
            let size = (data.len() - 4) as i32;
            data[..4].copy_from_slice(&size.to_be_bytes());
        }
        if rng.one_in(2) {
            run.up(&data, n, rng.one_in(13), 0);
        } else {
            run.down(&data, n);
        }
    }
    let (_, c, _) = run.end();
    assert!(c.get(Counter::KafkaFrames) > 0);
}
