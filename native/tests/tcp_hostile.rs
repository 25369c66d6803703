//! Issue #11 (hostile captures) for the TCP stage: each test builds the hostile input.
//! Time limits are generous for debug builds; release runs are far below them.

mod tcp_common;

use std::time::{Duration, Instant};

use _core::counter::Counter;
use _core::tcp::{Reassembler, TcpConfig};
use _core::types::{CloseReason, Counters, Event, Packet, ACK, FIN, RST, SYN};
use tcp_common::*;

const N_BYTES: u32 = 800_000;

/// Time allowed for work a release build does in `release` on a busy shared machine
/// (the limits catch super-linear behaviour, which is orders of magnitude off): debug
/// builds run the same code many times slower.
fn limit(release: Duration) -> Duration {
    if cfg!(debug_assertions) {
        release * 20
    } else {
        release
    }
}

fn one_byte_segments(reverse: bool) -> (Conn, Vec<Pkt>) {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"head"));
    // Byte 4 is the hole; bytes 5.. come one per segment.
    let mut body: Vec<Pkt> = (0..N_BYTES)
        .map(|i| c.pkt(true, ACK, 5 + i, &[(i % 251) as u8]))
        .collect();
    if reverse {
        body.reverse();
    }
    pkts.extend(body);
    pkts.push(c.pkt(true, PSH | ACK, 4, b"H"));
    (c, pkts)
}

fn check_one_byte_segments(reverse: bool) {
    let (c, pkts) = one_byte_segments(reverse);
    let started = Instant::now();
    let mut r = Reassembler::new(TcpConfig::default());
    let mut counters = Counters::default();
    let mut events = Vec::new();
    let hole_filler = pkts.len() - 1;
    for p in &pkts[..hole_filler] {
        r.feed(&p.packet(), &mut counters, &mut events);
    }
    // Each packet keeps its mark (its own time) in a coalesced run, so the segment
    // bound (`max_buffered_segments` packets a direction) caps them: past it the hole
    // is skipped, and memory stays flat however many one-byte segments come.
    let bound = TcpConfig::default().max_buffered_segments as u64;
    assert!(r.buffered_segments() <= bound);
    assert!(counters.get(Counter::TcpBufferLimit) >= 1);
    r.feed(&pkts[hole_filler].packet(), &mut counters, &mut events);
    r.flush(&mut counters, &mut events);
    let elapsed = started.elapsed();
    eprintln!(
        "{} one-byte segments, reverse={reverse}: {elapsed:?}",
        N_BYTES
    );
    assert!(elapsed < limit(Duration::from_secs(3)), "{elapsed:?}");
    let got = chunks(&events, c.a);
    assert_eq!(got[0].data, b"head");
    // Every byte after the hole is released or counted as a gap, none twice.
    let released: u64 = got[1..].iter().map(|g| g.data.len() as u64).sum();
    assert!(released + counters.get(Counter::TcpGapBytes) >= u64::from(N_BYTES));
    assert!(released <= u64::from(N_BYTES) + 1);
    assert_eq!(r.buffered_bytes(), 0);
}

#[test]
fn one_byte_segments_after_a_hole_forward_order_are_linear() {
    check_one_byte_segments(false);
}

#[test]
fn one_byte_segments_after_a_hole_reverse_order_are_linear() {
    check_one_byte_segments(true);
}

#[test]
fn interleaved_one_byte_segments_are_capped_in_number() {
    // Every other byte: nothing coalesces, so the segment count bound must act.
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.extend((0..200_000u32).map(|i| c.pkt(true, ACK, 1 + 2 * i, b"x")));
    let cfg = TcpConfig {
        max_buffered_segments: 10_000,
        ..TcpConfig::default()
    };
    let mut r = Reassembler::new(cfg);
    let mut counters = Counters::default();
    let mut events = Vec::new();
    for p in &pkts {
        r.feed(&p.packet(), &mut counters, &mut events);
        assert!(r.buffered_segments() <= 10_000);
    }
    assert!(counters.get(Counter::TcpBufferLimit) > 0);
    r.flush(&mut counters, &mut events);
    assert_eq!(data_of(&events, c.a).len(), 200_000);
    assert_eq!(counters.get(Counter::TcpGapBytes), 200_000);
}

#[test]
fn many_connections_each_holding_a_segment_are_relieved_cheaply() {
    let n = 100_000u32;
    let segment = vec![7u8; 2800];
    let cfg = TcpConfig::default();
    let bound = cfg.max_total_buffered_bytes;
    let mut r = Reassembler::new(cfg);
    let mut counters = Counters::default();
    let mut events = Vec::new();
    let started = Instant::now();
    for i in 0..n {
        let mut c = Conn::new(0, i.wrapping_mul(7919), 5000);
        c.a = (ip(CLIENT), (i % 60000) as u16 + 1024);
        c.b = (ip(SERVER + (i / 60000) as u8), 9092);
        let mut p = c.pkt(true, ACK, 0, b"a");
        p.ts_ns = i64::from(i);
        r.feed(&p.packet(), &mut counters, &mut events);
        let mut ahead = c.pkt(true, ACK, 100, &segment);
        ahead.ts_ns = i64::from(i);
        r.feed(&ahead.packet(), &mut counters, &mut events);
        assert!(r.buffered_bytes() <= bound);
    }
    let elapsed = started.elapsed();
    eprintln!("100k connections: {elapsed:?}");
    assert!(elapsed < limit(Duration::from_secs(10)), "{elapsed:?}");
    assert_eq!(r.open_connections(), n as usize);
    // 280 MB would be buffered: the global bound released the oldest backlogs.
    assert!(counters.get(Counter::TcpGlobalBufferLimit) > 0);
    let relieved = counters.get(Counter::TcpGaps);
    assert!(relieved > 0 && relieved < u64::from(n) / 5, "{relieved}");
    r.flush(&mut counters, &mut events);
    assert_eq!(counters.get(Counter::TcpGapBytes), 99 * u64::from(n));
    assert_balanced(&events);
}

fn syn_flood(n: u32, cfg: TcpConfig, gap_ns: i64) -> (Reassembler, Counters, Duration) {
    let cap = cfg.max_connections;
    let mut r = Reassembler::new(cfg);
    let mut counters = Counters::default();
    let mut events = Vec::new();
    let started = Instant::now();
    for i in 0..n {
        let p = Pkt {
            frame: u64::from(i) + 1,
            ts_ns: i64::from(i) * gap_ns,
            src: (ip(CLIENT).to_canonical(), (i % 65536) as u16),
            dst: (
                std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a01_0000 + (i >> 16))),
                9092,
            ),
            seq: i.wrapping_mul(2_654_435_761),
            ack: 0,
            flags: SYN,
            payload: Vec::new(),
            missing: 0,
        };
        r.feed(&p.packet(), &mut counters, &mut events);
        assert!(r.open_connections() <= cap);
        events.clear();
    }
    (r, counters, started.elapsed())
}

#[test]
fn a_million_syns_hold_a_bounded_number_of_connections() {
    // A debug build does fewer: enough to pass the connection cap many times over.
    let n: u32 = if cfg!(debug_assertions) {
        300_000
    } else {
        1_000_000
    };
    let cfg = TcpConfig::default();
    let cap = cfg.max_connections;
    let (r, counters, elapsed) = syn_flood(n, cfg, 0);
    eprintln!("{n} SYNs: {elapsed:?}");
    assert!(elapsed < limit(Duration::from_secs(20)), "{elapsed:?}");
    assert_eq!(r.open_connections(), cap);
    assert_eq!(
        counters.get(Counter::TcpConnectionLimit),
        u64::from(n) - cap as u64
    );
    assert_eq!(counters.get(Counter::TcpStreams), u64::from(n));
}

#[test]
fn silent_connections_of_a_file_expire_by_capture_time() {
    // One SYN a millisecond, connections silent after their SYN: with a 10 s idle
    // timeout about 10 000 stay open.
    let cfg = TcpConfig {
        file_idle_timeout_ns: Some(10_000_000_000),
        ..TcpConfig::default()
    };
    let (r, counters, _) = syn_flood(100_000, cfg, 1_000_000);
    assert!(
        (10_000..=10_001).contains(&r.open_connections()),
        "{}",
        r.open_connections()
    );
    assert_eq!(
        counters.get(Counter::TcpIdleClose),
        100_000 - r.open_connections() as u64
    );
    assert_eq!(counters.get(Counter::TcpConnectionLimit), 0);
}

#[test]
fn evicted_connection_flushes_its_pending_data_as_gaps() {
    let cfg = TcpConfig {
        max_connections: 1,
        ..TcpConfig::default()
    };
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, PSH | ACK, 5, b"fg"));
    let mut other = Conn::new(40001, 77, 88);
    other.ts = c.ts;
    pkts.extend(other.handshake());
    let run = run_with(cfg, &pkts);
    assert_eq!(closes(&run.events)[0], (0, CloseReason::Idle));
    let got = chunks(&run.events, c.a);
    assert_eq!(
        got.iter()
            .map(|ch| (ch.data.clone(), ch.lost, ch.resync))
            .collect::<Vec<_>>(),
        vec![(b"abc".to_vec(), 0, false), (b"fg".to_vec(), 2, true)]
    );
    assert_eq!(run.counters.get(Counter::TcpConnectionLimit), 1);
    // The first connection's late packets keep its stream index but carry no data.
    let mut late = run.reassembler;
    let mut counters = Counters::default();
    let mut events = Vec::new();
    late.feed(
        &c.pkt(true, PSH | ACK, 7, b"h").packet(),
        &mut counters,
        &mut events,
    );
    assert_eq!(late.last_stream(), Some(0));
    assert_eq!(counters.get(Counter::TcpAfterCloseBytes), 1);
}

// ---------------------------------------------------------------------------
// Spoofed SYN and RST

fn ack_pkt(c: &mut Conn, from_a: bool, off: u32, ack: u32) -> Pkt {
    let mut p = c.pkt(from_a, ACK, off, b"");
    p.ack = ack;
    p
}

#[test]
fn spoofed_syn_mid_stream_does_not_split_the_connection() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"request-1"));
    pkts.push(c.pkt(false, PSH | ACK, 0, b"response-1"));
    // A SYN on the same 4-tuple with another ISN ...
    let mut spoof = c.pkt(true, SYN, 0, b"");
    spoof.seq = 0xDEAD_BEEF;
    pkts.push(spoof);
    // ... and the server's challenge ACK still acknowledges the old stream.
    let challenge = c.ack_of(true, 9);
    pkts.push(ack_pkt(&mut c, false, 10, challenge));
    pkts.push(c.pkt(true, PSH | ACK, 9, b"request-2"));
    pkts.push(c.pkt(false, PSH | ACK, 10, b"response-2"));
    let run = run(&pkts);
    assert_eq!(opens(&run.events), vec![0]);
    assert_eq!(data_of(&run.events, c.a), b"request-1request-2");
    assert_eq!(data_of(&run.events, c.b), b"response-1response-2");
    assert_eq!(closes(&run.events), vec![(0, CloseReason::EndOfCapture)]);
    assert_eq!(run.counters.get(Counter::TcpSuspectSyn), 1);
    assert_eq!(run.counters.get(Counter::TcpPortReuse), 0);
    assert!(run.streams.iter().all(|s| *s == Some(0)));
}

#[test]
fn spoofed_syn_during_the_handshake_loses_to_the_syn_ack() {
    let mut c = Conn::new(40000, 1000, 5000);
    let syn = c.pkt(true, SYN, 0, b"");
    let mut spoof = c.pkt(true, SYN, 0, b"");
    spoof.seq = 123_456_789;
    let mut syn_ack = c.pkt(false, SYN | ACK, 0, b"");
    syn_ack.ack = c.ack_of(true, 0); // the original ISN
    let pkts = vec![
        syn,
        spoof,
        syn_ack,
        c.pkt(true, PSH | ACK, 0, b"req"),
        c.pkt(false, PSH | ACK, 0, b"resp"),
    ];
    let run = run(&pkts);
    assert_eq!(opens(&run.events), vec![0]);
    assert_eq!(data_of(&run.events, c.a), b"req");
    assert_eq!(data_of(&run.events, c.b), b"resp");
    assert!(chunks(&run.events, c.a).iter().all(|ch| !ch.resync));
    assert_eq!(run.counters.get(Counter::TcpSuspectSyn), 1);
}

#[test]
fn syn_answered_in_the_new_sequence_space_is_port_reuse() {
    // Within the suspect window, but the traffic answers the new ISN: a real reuse.
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"old"));
    let mut fresh = Conn::new(40000, 900_000, 7000);
    fresh.frame = c.frame;
    fresh.ts = c.ts;
    pkts.extend(fresh.handshake());
    pkts.push(fresh.pkt(true, PSH | ACK, 0, b"new"));
    let run = run(&pkts);
    assert_eq!(opens(&run.events), vec![0, 1]);
    assert_eq!(
        closes(&run.events),
        vec![(0, CloseReason::Reused), (1, CloseReason::EndOfCapture)]
    );
    let by_stream = |s: u32| -> Vec<u8> {
        chunks(&run.events, c.a)
            .iter()
            .filter(|ch| ch.stream == s)
            .flat_map(|ch| ch.data.clone())
            .collect()
    };
    assert_eq!(by_stream(0), b"old");
    assert_eq!(by_stream(1), b"new");
    let open = run.events.iter().find_map(|e| match e {
        Event::Open(o) if o.stream == 1 => Some(o.clone()),
        _ => None,
    });
    let open = open.expect("stream 1 opened");
    assert!(open.syn_seen);
    assert_eq!((open.initiator, open.responder), (c.a, c.b));
    assert_eq!(run.counters.get(Counter::TcpPortReuse), 1);
    assert_eq!(run.counters.get(Counter::TcpSuspectSyn), 0);
    // Only the SYN itself keeps the old index: its connection was not known yet.
    assert_eq!(run.streams[4..], [Some(0), Some(1), Some(1), Some(1)]);
}

#[test]
fn syn_after_a_quiet_spell_is_port_reuse_at_once() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"old"));
    let mut fresh = Conn::new(40000, 900_000, 7000);
    fresh.frame = c.frame;
    fresh.ts = c.ts + 1_000_000_000;
    pkts.extend(fresh.handshake());
    let run = run(&pkts);
    assert_eq!(run.streams[4..], [Some(1), Some(1), Some(1)]);
    assert_eq!(run.counters.get(Counter::TcpPortReuse), 1);
}

#[test]
fn data_after_an_in_window_rst_keeps_the_connection() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, RST | ACK, 3, b"")); // in window: believed at first
    pkts.push(c.pkt(false, PSH | ACK, 0, b"crossing")); // the peer's data in flight
    let mut later = c.pkt(true, PSH | ACK, 3, b"def"); // the "reset" side goes on
    later.ts_ns += 5_000_000_000; // long after the RST grace
    c.ts = later.ts_ns;
    pkts.push(later);
    pkts.push(c.pkt(false, PSH | ACK, 8, b"more"));
    pkts.push(c.pkt(true, FIN | ACK, 6, b""));
    pkts.push(c.pkt(false, FIN | ACK, 12, b""));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdef");
    assert_eq!(data_of(&run.events, c.b), b"crossingmore");
    assert_eq!(closes(&run.events), vec![(0, CloseReason::Fin)]);
    assert_eq!(run.counters.get(Counter::TcpDataAfterRst), 2);
    assert_eq!(run.counters.get(Counter::TcpSuspectRst), 1);
    assert_eq!(run.counters.get(Counter::TcpAfterCloseBytes), 0);
}

#[test]
fn genuine_rst_closes_after_its_grace() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, RST | ACK, 3, b""));
    pkts.push(c.pkt(false, PSH | ACK, 0, b"crossing")); // in flight: delivered
    let mut again = c.pkt(false, PSH | ACK, 0, b"crossing"); // a retransmission, late
    again.ts_ns += 5_000_000_000;
    pkts.push(again);
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.b), b"crossing");
    assert_eq!(closes(&run.events), vec![(0, CloseReason::Rst)]);
    assert_eq!(run.counters.get(Counter::TcpDataAfterRst), 2);
    assert_eq!(run.counters.get(Counter::TcpSuspectRst), 0);
    assert_eq!(run.counters.get(Counter::TcpAfterCloseBytes), 8);
    assert_eq!(run.streams.last(), Some(&Some(0)));
}

// ---------------------------------------------------------------------------
// Time and sequence numbers out of line

/// A small deterministic generator (xorshift), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[(self.next() % items.len() as u64) as usize]
    }
}

#[test]
fn backwards_and_extreme_timestamps_break_nothing() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let times = [
            i64::MIN,
            i64::MAX,
            0,
            -1,
            1_000,
            3_000_000_000,
            -5_000_000_000,
            i64::MAX - 1,
        ];
        let seqs = [0u32, 1, 99, 100, 101, 0xFFFF_FFFF, 0x8000_0000, 0x7FFF_FFFF];
        let mut cfg = TcpConfig {
            max_buffered_bytes: 64,
            max_total_buffered_bytes: 96,
            ..TcpConfig::default()
        };
        cfg.max_connections = 3;
        cfg.max_buffered_segments = 4;
        cfg.closed_memory = 2;
        if seed % 2 == 0 {
            cfg.idle_timeout_ns = Some(1_000);
        }
        let mut r = Reassembler::new(cfg);
        let mut counters = Counters::default();
        let mut events = Vec::new();
        let mut sent = 0usize;
        let mut ts = 0i64;
        for frame in 1..=400u64 {
            ts = match rng.next() % 4 {
                0 => rng.pick(&times),
                1 => ts.saturating_sub((rng.next() % 10_000_000_000) as i64),
                _ => ts.saturating_add((rng.next() % 3_000_000_000) as i64),
            };
            let side = rng.next() % 6;
            let (a, b) = ((ip(1), 1000 + (side / 2) as u16), (ip(2), 9092));
            let (src, dst) = if side.is_multiple_of(2) {
                (a, b)
            } else {
                (b, a)
            };
            let len = (rng.next() % 40) as usize;
            let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            sent += len;
            let base = rng.pick(&seqs);
            let p = Pkt {
                frame,
                ts_ns: ts,
                src,
                dst,
                seq: base.wrapping_add((rng.next() % 200) as u32),
                ack: rng.pick(&seqs).wrapping_add((rng.next() % 200) as u32),
                flags: rng.pick(&[
                    SYN,
                    SYN | ACK,
                    ACK,
                    ACK | PSH,
                    FIN | ACK,
                    RST,
                    RST | ACK,
                    0xFF,
                    0,
                ]),
                payload,
                missing: rng.pick(&[0, 0, 0, 5, u32::MAX]),
            };
            let pkt: Packet<'_> = p.packet();
            r.feed(&pkt, &mut counters, &mut events);
            assert!(r.buffered_bytes() <= 96);
            assert!(r.open_connections() <= 3);
        }
        r.flush(&mut counters, &mut events);
        assert_eq!(r.open_connections(), 0);
        assert_eq!(r.buffered_bytes(), 0);
        assert_eq!(r.buffered_segments(), 0);
        assert_balanced(&events);
        let delivered: usize = events
            .iter()
            .map(|e| match e {
                Event::Chunk(c) => c.data.len(),
                _ => 0,
            })
            .sum();
        assert!(delivered <= sent);
    }
}

#[test]
fn close_grace_measured_backwards_never_closes_early() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    pkts.push(c.pkt(true, FIN | ACK, 6, b"")); // bytes 3..6 still missing
    pkts.push(c.pkt(false, FIN | ACK, 0, b""));
    let mut back = c.pkt(false, ACK, 1, b"");
    back.ts_ns = -10_000_000_000; // the clock jumped back
    pkts.push(back);
    pkts.push(c.pkt(true, PSH | ACK, 3, b"def"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdef");
    assert_eq!(closes(&run.events), vec![(0, CloseReason::Fin)]);
    assert_eq!(run.counters.get(Counter::TcpGapBytes), 0);
}

#[test]
fn one_bogus_future_timestamp_does_not_expire_live_connections() {
    let mut c = Conn::new(40000, 1000, 5000);
    let mut pkts = c.handshake();
    pkts.push(c.pkt(true, PSH | ACK, 0, b"abc"));
    let mut stray = Conn::new(40001, 1, 2);
    let mut bogus = stray.pkt(true, SYN, 0, b"");
    bogus.ts_ns = i64::MAX / 2; // a corrupt record, centuries ahead
    pkts.push(bogus);
    pkts.push(c.pkt(true, PSH | ACK, 3, b"def"));
    let run = run(&pkts);
    assert_eq!(data_of(&run.events, c.a), b"abcdef");
    assert_eq!(run.counters.get(Counter::TcpIdleClose), 0);
    assert_eq!(run.counters.get(Counter::TcpAfterClose), 0);
}
