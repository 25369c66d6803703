//! Framing: size-prefixed frames cut from the chunks of one direction; resync; TLS.

mod corr_common;

use _core::counter::Counter;
use _core::kafka::framing::{Framer, DEFAULT_MAX_FRAME, TLS_TENTATIVE_MAX};
use _core::kafka::header::StartCheck;
use _core::types::{Counters, KafkaFrame};
use corr_common::*;

fn framer(check: StartCheck, max_frame: u32) -> Framer {
    let (src, dst) = if check == StartCheck::Response {
        (broker(), client())
    } else {
        (client(), broker())
    };
    Framer::new(0, src, dst, check, versions(), max_frame)
}

fn req_framer() -> Framer {
    framer(StartCheck::Request, 1 << 20)
}

fn feed(f: &mut Framer, c: &mut Counters, data: &[u8], n: u64, resync: bool) -> Vec<KafkaFrame> {
    let mut out = Vec::new();
    f.feed(
        chunk(f.src, f.dst, data, n, resync, if resync { 100 } else { 0 }),
        c,
        &mut out,
    );
    out
}

#[test]
fn frame_split_across_chunks_keeps_first_and_last_packet() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let msg = wire_req(7);
    assert!(feed(&mut f, &mut c, &msg[..3], 1, false).is_empty());
    assert!(feed(&mut f, &mut c, &msg[3..9], 2, false).is_empty());
    let out = feed(&mut f, &mut c, &msg[9..], 3, false);
    assert_eq!(out.len(), 1);
    let fr = &out[0];
    assert_eq!(fr.payload, msg[4..]);
    assert_eq!(
        (fr.first_ts_ns, fr.last_ts_ns, fr.first_frame, fr.last_frame),
        (1000, 3000, 1, 3)
    );
    assert_eq!(fr.wire_size(), msg.len() as u64);
}

#[test]
fn several_frames_in_one_chunk_and_a_tail_into_the_next() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let (a, b, d) = (wire_req(1), wire_req(2), wire_req(3));
    let data = [&a[..], &b[..], &d[..5]].concat();
    let out = feed(&mut f, &mut c, &data, 1, false);
    assert_eq!(
        out.iter().map(|x| x.payload.clone()).collect::<Vec<_>>(),
        vec![a[4..].to_vec(), b[4..].to_vec()]
    );
    let out = feed(&mut f, &mut c, &d[5..], 2, false);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, d[4..]);
    assert_eq!((out[0].first_ts_ns, out[0].last_ts_ns), (1000, 2000));
}

#[test]
fn hole_inside_a_frame_keeps_sync_by_its_size_prefix() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let mut big = wire_req(5);
    big.extend_from_slice(&[b'x'; 300]);
    let size = (big.len() - 4) as i32;
    big[..4].copy_from_slice(&size.to_be_bytes());
    let next = wire_req(6);
    assert!(feed(&mut f, &mut c, &big[..100], 1, false).is_empty());
    // Bytes 100..200 lost (the helper's hole is 100 bytes); the rest and the next request.
    let out = feed(&mut f, &mut c, &[&big[200..], &next[..]].concat(), 3, true);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].payload, big[4..100]);
    assert_eq!(
        (out[0].missing, out[0].end_lost),
        ((big.len() - 100) as u64, false)
    );
    assert_eq!((out[0].first_frame, out[0].last_frame), (1, 3));
    assert_eq!(out[1].payload, next[4..]);
    assert!(!out[1].after_gap);
    assert!(f.take_lost().is_none());
    assert_eq!(c.get(Counter::Resyncs), 0);
    assert_eq!(c.get(Counter::ResyncSkippedBytes), 0);
}

#[test]
fn resync_after_gap_skips_to_next_plausible_request_at_a_chunk_start() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let msg = wire_req(5);
    assert!(feed(&mut f, &mut c, &msg[..6], 1, false).is_empty());
    // The hole (100 bytes) runs past msg's end: msg goes on holed, its end lost.
    let holed = feed(&mut f, &mut c, b"\x12\x34\x56\x78garbage", 2, true);
    assert_eq!(holed.len(), 1);
    assert_eq!(holed[0].payload, msg[4..6]);
    assert!(holed[0].end_lost && holed[0].wire_size() == msg.len() as u64);
    assert!(f.take_lost().is_some());
    let out = feed(&mut f, &mut c, &wire_req(6), 3, false);
    assert_eq!(out.len(), 1);
    assert!(out[0].after_gap);
    assert_eq!(c.get(Counter::FramesCutByGap), 1);
    assert_eq!(c.get(Counter::ResyncSkippedBytes), 11);
    assert_eq!(c.get(Counter::Resyncs), 1);
    let out = feed(&mut f, &mut c, &wire_req(7), 4, false);
    assert!(!out[0].after_gap);
}

#[test]
fn oversized_size_prefix_loses_sync_and_is_never_buffered() {
    let mut c = Counters::default();
    let max = 1 << 20;
    let mut f = framer(StartCheck::Request, max);
    let mut big = ((max + 1) as i32).to_be_bytes().to_vec();
    big.extend(vec![0u8; 64 * 1024]);
    assert!(feed(&mut f, &mut c, &big, 1, false).is_empty());
    assert_eq!(f.buffered(), 0);
    assert_eq!(c.get(Counter::BadFrameSize), 1);
    assert_eq!(c.get(Counter::ResyncSkippedBytes), big.len() as u64);
    // What follows is skipped until a chunk starts with a plausible request.
    assert!(feed(&mut f, &mut c, &vec![0u8; 4096], 2, false).is_empty());
    assert_eq!(f.buffered(), 0);
    let out = feed(&mut f, &mut c, &wire_req(9), 3, false);
    assert_eq!(out.len(), 1);
    assert!(out[0].after_gap);
}

#[test]
fn partial_frame_at_close_is_counted() {
    let mut c = Counters::default();
    let mut f = req_framer();
    feed(&mut f, &mut c, &wire_req(1)[..7], 1, false);
    f.close(&mut c);
    assert_eq!(
        (
            c.get(Counter::TruncatedFrames),
            c.get(Counter::TruncatedFrameBytes)
        ),
        (1, 7)
    );
}

#[test]
fn resync_candidate_in_tiny_segments_is_kept_until_it_can_be_judged() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let msg = wire(&req(42, 18, 3, b"\x00"));
    assert!(feed(&mut f, &mut c, &msg[..6], 1, true).is_empty());
    assert!(feed(&mut f, &mut c, &msg[6..9], 2, false).is_empty());
    let out = feed(&mut f, &mut c, &msg[9..], 3, false);
    assert_eq!(out.len(), 1);
    assert!(out[0].after_gap && out[0].first_ts_ns == 1000);
    assert_eq!(c.get(Counter::ResyncSkippedBytes), 0);
}

#[test]
fn response_resync_reads_the_next_size_prefix_beyond_the_probe_window() {
    // Python's check reads the next prefix from the 512-byte window and raises here.
    let mut c = Counters::default();
    let mut f = framer(StartCheck::Response, DEFAULT_MAX_FRAME);
    let first = wire(&resp(1, &[7u8; 596]));
    let second = wire(&resp(2, &[8u8; 6]));
    let out = feed(&mut f, &mut c, &[&first[..], &second[..]].concat(), 1, true);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].payload, first[4..]);
    // A following size prefix that is not sane rejects the candidate.
    let mut f = framer(StartCheck::Response, DEFAULT_MAX_FRAME);
    let bad = [&first[..], &[0xff, 0xff, 0xff, 0xff][..]].concat();
    assert!(feed(&mut f, &mut c, &bad, 2, true).is_empty());
}

fn tls_record(kind: u8, body_len: usize) -> Vec<u8> {
    let mut r = vec![kind, 0x03, 0x03];
    r.extend_from_slice(&(body_len as u16).to_be_bytes());
    r.extend(vec![0xabu8; body_len]);
    r
}

#[test]
fn tls_client_hello_is_suspected_then_concluded_at_close() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let mut hello = vec![0x16, 0x03, 0x01, 0x02, 0x00, 0x01];
    hello.extend(vec![0u8; 64]);
    assert!(feed(&mut f, &mut c, &hello, 1, false).is_empty());
    assert!(f.tls_suspected());
    let app = [&b"\x17\x03\x03\x00\x10"[..], &[0u8; 16][..]].concat();
    assert!(feed(&mut f, &mut c, &app, 2, false).is_empty());
    f.close(&mut c);
    assert!(f.is_tls());
    assert_eq!(c.get(Counter::TlsBytes), (hello.len() + app.len()) as u64);
    assert_eq!(c.get(Counter::TlsConnectionsDirections), 1);
    assert_eq!(c.get(Counter::TlsFalseAlarm), 0);
}

#[test]
fn tls_record_chain_concludes_tls_at_once() {
    let mut c = Counters::default();
    let mut f = req_framer();
    let data = [tls_record(0x16, 40), tls_record(0x14, 1)].concat();
    feed(&mut f, &mut c, &data, 1, false);
    assert!(f.is_tls());
    feed(&mut f, &mut c, &tls_record(0x17, 100), 2, false);
    assert_eq!(c.get(Counter::TlsBytes), data.len() as u64 + 105);
    assert_eq!(c.get(Counter::TlsConnectionsDirections), 1);
}

#[test]
fn tls_lookalike_at_a_frame_boundary_followed_by_kafka_is_a_false_alarm() {
    let mut c = Counters::default();
    let mut f = req_framer();
    assert_eq!(feed(&mut f, &mut c, &wire_req(1), 1, false).len(), 1);
    // A short "record" where a size prefix belongs, then a request where the next record
    // header should be: the chain breaks, framing resumes on the request.
    let fake = [0x16, 0x03, 0x01, 0x00, 0x02, 0xaa, 0xbb];
    assert!(feed(&mut f, &mut c, &fake, 2, false).is_empty());
    assert!(f.tls_suspected());
    let out = feed(&mut f, &mut c, &wire_req(2), 3, false);
    assert_eq!(out.len(), 1);
    assert!(out[0].after_gap);
    assert_eq!(feed(&mut f, &mut c, &wire_req(3), 4, false).len(), 1);
    f.close(&mut c);
    assert!(!f.is_tls());
    assert_eq!(c.get(Counter::TlsFalseAlarm), 1);
    assert_eq!(c.get(Counter::TlsConnectionsDirections), 0);
    assert_eq!(c.get(Counter::TlsBytes), 0);
    assert_eq!(c.get(Counter::ResyncSkippedBytes), fake.len() as u64);
}

#[test]
fn tls_lookalike_claiming_a_long_record_gives_way_to_a_whole_kafka_frame() {
    let mut c = Counters::default();
    let mut f = req_framer();
    // Bytes after a gap that look like the start of a 4 KiB record...
    let fake = [&[0x16, 0x03, 0x01, 0x10, 0x00][..], &[0u8; 20][..]].concat();
    assert!(feed(&mut f, &mut c, &fake, 1, true).is_empty());
    assert!(f.tls_suspected());
    // ...but the next chunk, inside that "record", is a whole plausible request.
    let out = feed(&mut f, &mut c, &wire_req(8), 2, false);
    assert_eq!(out.len(), 1);
    assert_eq!(c.get(Counter::TlsFalseAlarm), 1);
    assert!(!f.is_tls() && !f.tls_suspected());
}

#[test]
fn tls_lookalike_with_an_impossible_record_length_is_not_taken_for_tls() {
    let mut c = Counters::default();
    let mut f = req_framer();
    feed(
        &mut f,
        &mut c,
        &[0x17, 0x03, 0x03, 0xff, 0xff, 1, 2, 3],
        1,
        false,
    );
    assert!(!f.is_tls() && !f.tls_suspected());
    assert_eq!(c.get(Counter::BadFrameSize), 1);
    assert_eq!(c.get(Counter::TlsFalseAlarm), 1);
    assert_eq!(feed(&mut f, &mut c, &wire_req(4), 2, false).len(), 1);
}

#[test]
fn suspicion_without_verdict_is_bounded() {
    let mut c = Counters::default();
    let mut f = req_framer();
    feed(&mut f, &mut c, &tls_record(0x17, 1000), 1, false);
    // A gap hides the record boundaries; junk that is no Kafka frame keeps coming.
    let mut rng = Lcg(7);
    let mut n = 2;
    while f.tls_suspected() {
        let mut junk = rng.bytes(1400);
        junk[0] = 0x7f; // never a sane size prefix
        feed(&mut f, &mut c, &junk, n, n == 2);
        n += 1;
        assert!(n < 100, "still undecided after {n} chunks");
    }
    assert!(f.is_tls());
    assert!(c.get(Counter::TlsBytes) > TLS_TENTATIVE_MAX);
}

#[test]
fn many_tls_lookalikes_in_one_chunk_cost_one_reprobe() {
    // Clearing a suspicion re-probes the rest of the chunk; a second look-alike in the
    // same chunk is only a bad size prefix, so a long hostile chunk costs linear work.
    let mut c = Counters::default();
    let mut f = req_framer();
    let unit = [&[0x16, 0x03, 0x01, 0x00, 0x00][..], &wire_req(1)[..]].concat();
    let data: Vec<u8> = std::iter::repeat_n(unit, 50_000).flatten().collect();
    let all = [&wire_req(0)[..], &data[..]].concat();
    let out = feed(&mut f, &mut c, &all, 1, false);
    assert_eq!(out.len(), 2);
    assert_eq!(c.get(Counter::TlsFalseAlarm), 1);
    assert_eq!(c.get(Counter::BadFrameSize), 1);
    assert!(!f.is_tls() && !f.tls_suspected());
    // The next chunk may be suspected again, and framing resumes at a request.
    assert_eq!(feed(&mut f, &mut c, &wire_req(2), 2, false).len(), 1);
}

#[test]
fn junk_never_panics_and_buffers_stay_bounded() {
    let max = 1 << 16;
    for (seed, check) in [
        (1, StartCheck::Request),
        (2, StartCheck::Response),
        (3, StartCheck::Either),
    ] {
        let mut rng = Lcg(seed);
        let mut c = Counters::default();
        let mut f = framer(check, max);
        let mut frames = 0usize;
        for n in 0..3000u64 {
            let len = (rng.next() % 1500) as usize;
            let mut data = rng.bytes(len);
            if rng.one_in(5) && data.len() >= 4 {
                // A plausible small size prefix now and then, so frames do get cut.
                data[..4].copy_from_slice(&((rng.next() % 3000) as i32).to_be_bytes());
            }
            if rng.one_in(17) && data.len() >= 3 {
                data[..3].copy_from_slice(&[0x16, 0x03, 0x01]);
            }
            frames += feed(&mut f, &mut c, &data, n, rng.one_in(11)).len();
            assert!(f.buffered() <= max as usize + 4 + 1500);
        }
        f.close(&mut c);
        assert!(frames > 0 || f.is_tls());
    }
}
