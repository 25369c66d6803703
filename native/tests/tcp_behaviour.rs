//! The TCP stage's policies on hand-built segment sequences whose byte streams are
//! known by construction (the cases of tests/test_tcp.py; tests/test_native_tcp.py
//! compares the two stages event by event on real and mangled captures).

mod tcp_common;

use _core::counter::Counter;
use _core::tcp::TcpConfig;
use _core::types::{CloseReason, Event, StreamOpen, ACK, FIN, RST, SYN};
use tcp_common::*;

fn summary(events: &[Event], src: _core::types::Endpoint) -> Vec<(Vec<u8>, u64, bool)> {
    chunks(events, src)
        .iter()
        .map(|c| (c.data.clone(), c.lost, c.resync))
        .collect()
}

fn open0(events: &[Event]) -> StreamOpen {
    match &events[0] {
        Event::Open(o) => o.clone(),
        other => panic!("first event {other:?}"),
    }
}

#[test]
fn in_order_stream_and_fin_close() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"hello "));
    pkts.push(c.pkt(true, PSH | ACK, 6, b"world"));
    pkts.push(c.pkt(false, PSH | ACK, 0, b"ok"));
    pkts.push(c.pkt(true, FIN | ACK, 11, b""));
    pkts.push(c.pkt(false, FIN | ACK, 2, b""));
    let run = run(&pkts);
    let open = open0(&run.events);
    assert_eq!(
        (open.stream, open.initiator, open.responder, open.syn_seen),
        (0, c.a, c.b, true)
    );
    assert_eq!(data_of(&run.events, c.a), b"hello world");
    assert_eq!(data_of(&run.events, c.b), b"ok");
    assert!(chunks(&run.events, c.a).iter().all(|ch| !ch.resync));
    assert_eq!(closes(&run.events), vec![(0, CloseReason::Fin)]);
    // Closed at the second FIN, not by the flush.
    assert!(matches!(run.events.last(), Some(Event::Close(_))));
    assert_eq!(run.reassembler.open_connections(), 0);
}

#[test]
fn syn_ack_first_makes_its_receiver_the_initiator() {
    let mut c = Conn::new(40000, 100, 500);
    let pkts = vec![c.pkt(false, SYN | ACK, 0, b""), c.pkt(true, ACK, 0, b"")];
    let open = open0(&run(&pkts).events);
    assert_eq!(
        (open.initiator, open.responder, open.syn_seen),
        (c.a, c.b, true)
    );
}

#[test]
fn out_of_order_is_buffered_and_released_with_each_packets_time() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    let mut last = c.pkt(true, PSH | ACK, 6, b"ccc");
    let mut mid = c.pkt(true, PSH | ACK, 3, b"bbb");
    let mut first = c.pkt(true, PSH | ACK, 0, b"aaa");
    (last.ts_ns, mid.ts_ns, first.ts_ns) = (10, 20, 30);
    let frames = (first.frame, mid.frame, last.frame);
    pkts.extend([last, mid, first]);
    let run = run(&pkts);
    let got = chunks(&run.events, c.a);
    // Released in order, each packet's bytes with its own time (framing takes the
    // latest-arriving packet among a frame's bytes).
    let seen: Vec<(&[u8], u64, i64)> = got
        .iter()
        .map(|g| (g.data.as_slice(), g.frame, g.ts_ns))
        .collect();
    assert_eq!(
        seen,
        vec![
            (&b"aaa"[..], frames.0, 30),
            (&b"bbb"[..], frames.1, 20),
            (&b"ccc"[..], frames.2, 10)
        ]
    );
    assert_eq!(run.counters.get(Counter::TcpOutOfOrder), 2);
}

#[test]
fn retransmission_dropped_and_counted() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abcdef"));
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abcdef"));
    pkts.push(c.pkt(true, PSH | ACK, 6, b"g"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdefg");
    assert_eq!(run.counters.get(Counter::TcpRetransmission), 1);
    assert_eq!(run.counters.get(Counter::TcpOverlapConflict), 0);
}

#[test]
fn overlap_first_data_wins_and_conflicts_are_counted() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abcd"));
    pkts.push(c.pkt(true, PSH | ACK, 2, b"XYef")); // overlaps "cd" with other bytes
    pkts.push(c.pkt(true, PSH | ACK, 8, b"ij")); // buffered
    pkts.push(c.pkt(true, PSH | ACK, 7, b"QRSk")); // overlaps buffered "ij", other bytes
    pkts.push(c.pkt(true, PSH | ACK, 6, b"g"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdefgQijk");
    assert_eq!(run.counters.get(Counter::TcpOverlapConflict), 2);
    assert_eq!(run.counters.get(Counter::TcpOverlap), 1);
}

#[test]
fn keepalive_and_zero_window_probe_are_not_duplicated() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, ACK, 2, b"\0")); // keep-alive: one filler byte at next-1
    pkts.push(c.pkt(true, ACK, 2, b"")); // keep-alive without data
    pkts.push(c.pkt(true, ACK, 3, b"d")); // zero-window probe: one new byte ...
    pkts.push(c.pkt(true, PSH | ACK, 3, b"defg")); // ... then sent again in full
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdefg");
    assert_eq!(run.counters.get(Counter::TcpKeepalive), 1);
    assert_eq!(run.counters.get(Counter::TcpOverlapConflict), 0);
}

#[test]
fn sequence_numbers_wrap_around() {
    let mut c = Conn::new(40000, u32::MAX - 3, 500);
    let mut pkts = c.handshake();
    pkts.extend((0..5u8).map(|i| c.pkt(true, PSH | ACK, u32::from(i) * 2, &[b'A' + i; 2])));
    pkts.swap(3, 5); // out of order across the wrap
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"AABBCCDDEE");
    assert_eq!(run.counters.get(Counter::TcpGapBytes), 0);
}

#[test]
fn snaplen_truncation_becomes_a_gap() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    let mut cut = c.pkt(true, PSH | ACK, 0, b"head");
    cut.missing = 96;
    pkts.push(cut);
    pkts.push(c.pkt(true, PSH | ACK, 100, b"next"));
    let run = run(&pkts);
    assert_eq!(
        summary(&run.events, c.a),
        vec![
            (b"head".to_vec(), 0, false),
            (Vec::new(), 96, true), // at once, with the packet it was cut from
            (b"next".to_vec(), 0, false)
        ]
    );
    assert_eq!(run.counters.get(Counter::TcpGapBytes), 96);
}

#[test]
fn buffer_bound_skips_the_hole() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, &[b'a'; 10]));
    // Bytes 10..19 never arrive; 20.. arrive until the bound (50) is passed.
    pkts.extend((0..6u8).map(|i| c.pkt(true, PSH | ACK, 20 + 10 * u32::from(i), &[b'B' + i; 10])));
    let cfg = TcpConfig {
        max_buffered_bytes: 50,
        ..TcpConfig::default()
    };
    let run = run_with(cfg, &pkts);
    let got = summary(&run.events, c.a);
    assert_eq!(got[0], (vec![b'a'; 10], 0, false));
    // Each held packet's bytes come out as a chunk of their own.
    let expected: Vec<_> = (0..6u8)
        .map(|i| (vec![b'B' + i; 10], if i == 0 { 10 } else { 0 }, i == 0))
        .collect();
    assert_eq!(got[1..], expected[..]);
    assert_eq!(run.counters.get(Counter::TcpBufferLimit), 1);
}

#[test]
fn global_bound_skips_the_biggest_backlog() {
    let mut c1 = Conn::new(40000, 100, 500);
    let mut c2 = Conn::new(40001, 7, 500);
    let mut pkts = c1.handshake();
    pkts.extend(c2.handshake());
    pkts.push(c2.pkt(true, PSH | ACK, 10, b"y")); // a smaller backlog elsewhere
    pkts.extend((0..4u32).map(|i| c1.pkt(true, PSH | ACK, 10 + 10 * i, &[b'x'; 10])));
    let cfg = TcpConfig {
        max_total_buffered_bytes: 31,
        ..TcpConfig::default()
    };
    let run = run_with(cfg, &pkts);
    assert_eq!(
        chunks(&run.events, c1.a)
            .iter()
            .map(|c| (c.lost, c.data.len()))
            .collect::<Vec<_>>(),
        vec![(10, 10), (0, 10), (0, 10), (0, 10)]
    );
    assert_eq!(run.counters.get(Counter::TcpGlobalBufferLimit), 1);
    // The other connection kept its backlog until the end of the capture.
    assert_eq!(summary(&run.events, c2.a), vec![(b"y".to_vec(), 10, true)]);
}

#[test]
fn acknowledged_hole_is_skipped() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, &[b'x'; 10]));
    pkts.push(c.pkt(true, PSH | ACK, 20, &[b'z'; 10]));
    // The receiver acknowledges all 30 bytes: the capture lost bytes 10..19.
    for _ in 0..3 {
        let mut ack = c.pkt(false, ACK, 0, b"");
        ack.ack = c.ack_of(true, 30);
        pkts.push(ack);
    }
    let cfg = TcpConfig {
        ack_gap_packets: 3,
        ..TcpConfig::default()
    };
    let run = run_with(cfg.clone(), &pkts);
    assert_eq!(
        summary(&run.events, c.a),
        vec![(vec![b'x'; 10], 0, false), (vec![b'z'; 10], 10, true)]
    );
    assert_eq!(run.counters.get(Counter::TcpAckedGap), 1);
    // Before the third ACK the hole waits for a late copy (released by the flush).
    let early = run_with(cfg, &pkts[..pkts.len() - 1]);
    assert_eq!(early.counters.get(Counter::TcpAckedGap), 0);
    assert_eq!(early.counters.get(Counter::TcpGapBytes), 10);
}

#[test]
fn fin_before_the_last_data_waits_for_it() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, FIN | ACK, 6, b""));
    pkts.push(c.pkt(false, FIN | ACK, 0, b""));
    pkts.push(c.pkt(true, PSH | ACK, 3, b"def"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdef");
    assert_eq!(closes(&run.events), vec![(0, CloseReason::Fin)]);
    assert_eq!(run.counters.get(Counter::TcpGapBytes), 0);
}

#[test]
fn rst_far_outside_the_window_is_ignored() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    let mut bogus = c.pkt(false, RST, 0, b"");
    bogus.seq = bogus.seq.wrapping_add(1 << 30);
    pkts.push(bogus);
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abc");
    assert_eq!(run.counters.get(Counter::TcpRstIgnored), 1);
    assert_eq!(closes(&run.events), vec![(0, CloseReason::EndOfCapture)]);
}

#[test]
fn flush_turns_holes_into_gaps_and_keeps_a_closing_reason() {
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, PSH | ACK, 5, b"fg"));
    let run1 = run(&pkts);
    assert_eq!(
        summary(&run1.events, c.a),
        vec![(b"abc".to_vec(), 0, false), (b"fg".to_vec(), 2, true)]
    );
    assert_eq!(closes(&run1.events), vec![(0, CloseReason::EndOfCapture)]);
    pkts.push(c.pkt(false, RST | ACK, 0, b"")); // still in its grace at the end
    assert_eq!(closes(&run(&pkts).events), vec![(0, CloseReason::Rst)]);
}

#[test]
fn mid_connection_start_is_flagged() {
    let mut c = Conn::new(40000, 100, 500);
    let pkts = vec![
        c.pkt(false, PSH | ACK, 50, b"resp"),
        c.pkt(true, PSH | ACK, 9, b"req"),
    ];
    let run = run(&pkts);
    let open = open0(&run.events);
    assert_eq!(
        (open.initiator, open.responder, open.syn_seen),
        (c.b, c.a, false)
    );
    assert_eq!(summary(&run.events, c.b), vec![(b"resp".to_vec(), 0, true)]);
    assert_eq!(summary(&run.events, c.a), vec![(b"req".to_vec(), 0, true)]);
}

#[test]
fn port_reuse_after_fin_gets_a_new_stream() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"req-1"));
    pkts.push(c.pkt(true, FIN | ACK, 5, b""));
    pkts.push(c.pkt(false, FIN | ACK, 0, b""));
    pkts.push(c.pkt(true, ACK, 6, b""));
    let mut again = Conn::new(40000, 900_000, 7000);
    again.frame = c.frame;
    again.ts = c.ts + 1_000_000_000;
    pkts.extend(again.handshake());
    pkts.push(again.pkt(true, PSH | ACK, 0, b"req-2"));
    let run = run(&pkts);
    assert_eq!(
        closes(&run.events),
        vec![(0, CloseReason::Fin), (1, CloseReason::EndOfCapture)]
    );
    let streams: Vec<u32> = run.streams.iter().map(|s| s.expect("indexed")).collect();
    assert_eq!(streams, vec![0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
    assert_eq!(run.counters.get(Counter::TcpPortReuse), 1);
}

#[test]
fn live_idle_timeout_closes_silent_connections() {
    let cfg = TcpConfig {
        idle_timeout_ns: Some(4_000),
        ..TcpConfig::default()
    };
    let mut c = Conn::new(40000, 100, 500);
    let mut pkts = c.handshake();
    let mut data = c.pkt(true, PSH | ACK, 0, b"abc");
    data.ts_ns = 100;
    pkts.push(data);
    let mut other = Conn::new(40001, 100, 500);
    other.ts = 10_000;
    pkts.extend(other.handshake());
    let mut r = _core::tcp::Reassembler::new(cfg);
    let mut counters = _core::types::Counters::default();
    let mut events = Vec::new();
    for p in &pkts {
        r.feed(&p.packet(), &mut counters, &mut events);
    }
    assert_eq!(closes(&events), vec![(0, CloseReason::Idle)]);
    assert_eq!(r.open_connections(), 1);
    assert_eq!(counters.get(Counter::TcpIdleClose), 1);
}

#[test]
fn closed_connections_are_freed_and_forgotten_within_bounds() {
    let cfg = TcpConfig {
        closed_memory: 100,
        ..TcpConfig::default()
    };
    let mut r = _core::tcp::Reassembler::new(cfg);
    let mut counters = _core::types::Counters::default();
    let mut events = Vec::new();
    for i in 0..2000u32 {
        let mut c = Conn::new(
            1024 + i as u16,
            i.wrapping_mul(7919),
            i.wrapping_mul(104_729),
        );
        let mut pkts = c.handshake();
        pkts.push(c.pkt(true, PSH | ACK, 0, b"q"));
        pkts.push(c.pkt(false, PSH | ACK, 0, b"r"));
        pkts.push(c.pkt(true, FIN | ACK, 1, b""));
        pkts.push(c.pkt(false, FIN | ACK, 1, b""));
        for p in &pkts {
            r.feed(&p.packet(), &mut counters, &mut events);
        }
        assert_eq!(r.open_connections(), 0);
    }
    assert_eq!(counters.get(Counter::TcpStreams), 2000);
    assert_eq!(events.len(), 2000 * 4);
    // A late packet of a recent connection keeps its index; an old one is forgotten
    // and starts a new connection, as in the Python stage.
    let mut late = Conn::new(1024 + 1999, 1999u32.wrapping_mul(7919), 0);
    r.feed(
        &late.pkt(true, ACK, 2, b"").packet(),
        &mut counters,
        &mut events,
    );
    assert_eq!(r.last_stream(), Some(1999));
    let mut old = Conn::new(1024, 0, 0);
    r.feed(
        &old.pkt(true, ACK, 2, b"").packet(),
        &mut counters,
        &mut events,
    );
    assert_eq!(r.last_stream(), Some(2000));
}
