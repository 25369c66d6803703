//! Correlation: roles, matching by correlation id, acks=0, SASL raw tokens, anomalies,
//! responses held for late requests, and the bounds.

mod corr_common;

use _core::counter::Counter;
use _core::kafka::correlate::{
    CorrelationConfig, Correlator, DEFAULT_BROKER_PORTS, MAX_HELD_FRAMES, MAX_HELD_RESPONSES,
    MAX_HELD_RESPONSE_BYTES, MAX_OPEN_REQUESTS,
};
use _core::types::{Counters, Endpoint, Exchange, ExchangeKind, StreamOpen};
use corr_common::*;

use ExchangeKind::*;

fn correlator(heuristic: bool) -> Correlator {
    Correlator::new(
        CorrelationConfig {
            broker_ports: DEFAULT_BROKER_PORTS.to_vec(),
            heuristic,
            max_frame: 1 << 20,
            sasl_handshake_key: SASL_HANDSHAKE,
            produce_key: PRODUCE,
        },
        versions(),
    )
}

/// Frames in order, `true` for client -> broker; the connection closes at the end.
fn run_on(
    corr: &mut Correlator,
    c: &mut Counters,
    frames: &[(Vec<u8>, bool)],
    broker_ep: Endpoint,
) -> Vec<Exchange> {
    run_opened(corr, c, frames, broker_ep, true)
}

/// `run_on`, with the TCP handshake seen or not (a capture started mid-connection).
fn run_opened(
    corr: &mut Correlator,
    c: &mut Counters,
    frames: &[(Vec<u8>, bool)],
    broker_ep: Endpoint,
    syn_seen: bool,
) -> Vec<Exchange> {
    corr.open(&StreamOpen {
        stream: 0,
        initiator: client(),
        responder: broker_ep,
        syn_seen,
    });
    let mut out = Vec::new();
    for (n, (payload, from_client)) in frames.iter().enumerate() {
        let (src, dst) = if *from_client {
            (client(), broker_ep)
        } else {
            (broker_ep, client())
        };
        corr.frame(frame(payload, src, dst, n as u64 + 1), c, &mut out);
    }
    corr.close(0, c, &mut out);
    out
}

fn run(c: &mut Counters, frames: &[(Vec<u8>, bool)]) -> Vec<Exchange> {
    run_on(&mut correlator(true), c, frames, broker())
}

fn kinds(out: &[Exchange]) -> Vec<(ExchangeKind, Option<i32>)> {
    out.iter().map(|e| (e.kind, e.correlation_id)).collect()
}

fn r(corr: i32) -> (Vec<u8>, bool) {
    (req(corr, 3, 1, b""), true)
}

fn a(corr: i32) -> (Vec<u8>, bool) {
    (resp(corr, b"\x00\x00"), false)
}

#[test]
fn pairs_by_correlation_id_and_leftovers_are_unanswered() {
    let mut c = Counters::default();
    let out = run(&mut c, &[r(1), r(2), a(1)]);
    assert_eq!(kinds(&out), vec![(Pair, Some(1)), (Unanswered, Some(2))]);
    assert_eq!(
        (out[0].api_key, out[0].client_id.as_deref()),
        (Some(3), Some("cli"))
    );
    assert_eq!((out[0].client, out[0].broker), (client(), broker()));
}

#[test]
fn response_without_request_is_an_orphan_once_it_cannot_be_answered() {
    let mut c = Counters::default();
    // 77 answers a request from before the capture; a later request (higher id) shows
    // its request will not come, so it is reported before that request's exchange.
    let out = run(&mut c, &[a(77), r(78), a(78)]);
    assert_eq!(
        kinds(&out),
        vec![(OrphanResponse, Some(77)), (Pair, Some(78))]
    );
    assert_eq!(c.get(Counter::OrphanResponses), 1);
    // With no later request it is reported at the connection's end, never dropped.
    let mut c = Counters::default();
    let out = run(&mut c, &[a(77), r(1), a(1)]);
    assert_eq!(
        kinds(&out),
        vec![(Pair, Some(1)), (OrphanResponse, Some(77))]
    );
    assert_eq!(c.get(Counter::OrphanResponses), 1);
}

#[test]
fn responses_before_their_requests_pair_when_the_requests_come_late() {
    // After a hole in the request direction the reassembler releases the requests after
    // the responses: they must still pair.
    let mut c = Counters::default();
    let out = run(&mut c, &[r(1), a(1), a(2), a(3), a(4), r(2), r(3), r(4)]);
    assert_eq!(
        kinds(&out),
        vec![
            (Pair, Some(1)),
            (Pair, Some(2)),
            (Pair, Some(3)),
            (Pair, Some(4))
        ]
    );
    assert_eq!(c.get(Counter::LateRequestPairs), 3);
    assert_eq!(c.get(Counter::OrphanResponses), 0);
    let late = &out[1];
    assert_eq!(late.request.as_ref().map(|f| f.first_frame), Some(6));
    assert_eq!(late.response.as_ref().map(|f| f.first_frame), Some(3));
    assert_eq!(
        (late.api_key, late.client_id.as_deref()),
        (Some(3), Some("cli"))
    );
}

#[test]
fn a_request_lost_in_the_hole_leaves_its_response_an_orphan_in_order() {
    let mut c = Counters::default();
    let out = run(&mut c, &[a(2), a(3), a(4), r(3), r(4)]);
    assert_eq!(
        kinds(&out),
        vec![(OrphanResponse, Some(2)), (Pair, Some(3)), (Pair, Some(4))]
    );
}

#[test]
fn held_responses_are_bounded() {
    let mut c = Counters::default();
    let n = MAX_HELD_RESPONSES as i32 + 10;
    let mut corr = correlator(true);
    corr.open(&StreamOpen {
        stream: 0,
        initiator: client(),
        responder: broker(),
        syn_seen: true,
    });
    let mut out = Vec::new();
    for i in 0..n {
        corr.frame(
            frame(&resp(1000 + i, b""), broker(), client(), i as u64 + 1),
            &mut c,
            &mut out,
        );
    }
    assert_eq!(
        out.len(),
        10,
        "beyond the bound the oldest become orphans at once"
    );
    assert_eq!(out[0].correlation_id, Some(1000));
    corr.close(0, &mut c, &mut out);
    assert_eq!(out.len(), n as usize);
    assert!(out.iter().all(|e| e.kind == OrphanResponse));
    assert_eq!(c.get(Counter::OrphanResponses), n as u64);
}

#[test]
fn held_responses_give_way_after_a_long_wait() {
    let mut c = Counters::default();
    let mut corr = correlator(true);
    corr.open(&StreamOpen {
        stream: 0,
        initiator: client(),
        responder: broker(),
        syn_seen: true,
    });
    let mut out = Vec::new();
    corr.frame(
        frame(&resp(5, b""), broker(), client(), 1),
        &mut c,
        &mut out,
    );
    let mut later = frame(&resp(6, b""), broker(), client(), 2);
    later.last_ts_ns = 60_000_000_000;
    corr.frame(later, &mut c, &mut out);
    assert_eq!(kinds(&out), vec![(OrphanResponse, Some(5))]);
}

#[test]
fn produce_acks_zero_expects_no_response() {
    let acks0 = req(
        5,
        PRODUCE,
        3,
        &[
            &(-1i16).to_be_bytes()[..],
            &0i16.to_be_bytes(),
            &1000i32.to_be_bytes(),
        ]
        .concat(),
    );
    let acks1 = req(
        6,
        PRODUCE,
        3,
        &[
            &(-1i16).to_be_bytes()[..],
            &1i16.to_be_bytes(),
            &1000i32.to_be_bytes(),
        ]
        .concat(),
    );
    let out = run(
        &mut Counters::default(),
        &[(acks0, true), (acks1, true), a(6)],
    );
    assert_eq!(kinds(&out), vec![(NoResponse, Some(5)), (Pair, Some(6))]);
}

#[test]
fn flexible_produce_acks_zero_after_header_tagged_fields() {
    // Produce v9: one header tagged field (tag 0, 2 bytes), compact null transactional_id, acks 0.
    let tail = [
        &[1u8, 0, 2, 0xaa, 0xbb, 0][..],
        &0i16.to_be_bytes(),
        &1000i32.to_be_bytes(),
    ]
    .concat();
    let out = run(
        &mut Counters::default(),
        &[(req(5, PRODUCE, 9, &tail), true)],
    );
    assert_eq!(kinds(&out), vec![(NoResponse, Some(5))]);
    // Tagged fields running past the bytes: acks unknown, so a response is expected.
    let out = run(
        &mut Counters::default(),
        &[(req(6, PRODUCE, 9, &[3, 0, 9]), true)],
    );
    assert_eq!(kinds(&out), vec![(Unanswered, Some(6))]);
}

#[test]
fn out_of_order_response_is_counted_and_skipped_request_stays_open() {
    let mut c = Counters::default();
    let out = run(&mut c, &[r(1), r(2), a(2), a(1)]);
    assert_eq!(kinds(&out), vec![(Pair, Some(2)), (Pair, Some(1))]);
    assert_eq!(c.get(Counter::ResponsesOutOfOrder), 1);
}

#[test]
fn sasl_handshake_v0_switches_to_raw_tokens_until_a_request_reappears() {
    let handshake = req(1, SASL_HANDSHAKE, 0, b"\x00\x05PLAIN");
    let ok = resp(1, b"\x00\x00\x00\x00\x00\x01\x00\x05PLAIN");
    let token = b"\x00user\x00secret".to_vec();
    let mut c = Counters::default();
    let out = run(
        &mut c,
        &[
            (handshake, true),
            (ok, false),
            (token.clone(), true),
            (vec![], false),
            r(2),
            a(2),
        ],
    );
    assert_eq!(
        out.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![Pair, SaslToken, Pair]
    );
    assert_eq!(
        out[1].request.as_ref().map(|f| f.payload.clone()),
        Some(token)
    );
    assert_eq!(out[1].response.as_ref().map(|f| f.payload.len()), Some(0));
    assert_eq!(c.get(Counter::SaslRawTokens), 1);
}

#[test]
fn failed_sasl_handshake_does_not_switch_to_raw() {
    let handshake = req(1, SASL_HANDSHAKE, 0, b"\x00\x05PLAIN");
    let refused = resp(1, b"\x00\x21\x00\x00\x00\x00");
    let out = run(
        &mut Counters::default(),
        &[(handshake, true), (refused, false), r(2)],
    );
    assert_eq!(
        out.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![Pair, Unanswered]
    );
}

#[test]
fn heuristic_finds_broker_on_unusual_port_from_the_request_side() {
    let odd = ep(2, 36333);
    let mut c = Counters::default();
    let out = run_on(&mut correlator(true), &mut c, &[a(0), r(1), a(1)], odd);
    // The response seen before the role was settled is held, then replayed.
    assert_eq!(
        kinds(&out),
        vec![(OrphanResponse, Some(0)), (Pair, Some(1))]
    );
    assert_eq!(out[1].broker, odd);
    assert_eq!(c.get(Counter::KafkaFoundByHeuristic), 1);
}

/// A response whose bytes also read as a plausible request header: correlation id 0
/// reads as api_key 0 (Produce) version 0, then throttle 0 as its correlation id and an
/// empty client id (as the AddPartitionsToTxn responses of a real Kafka 4.4 broker do).
fn request_like_response(corr: i32) -> (Vec<u8>, bool) {
    (resp(corr, b"\x00\x00\x00\x00\x00\x00\x00\x02"), false)
}

#[test]
fn heuristic_pairs_a_newer_request_with_its_answer_instead_of_reading_the_answer_as_a_request() {
    // The first request's version is newer than the specs (not plausible on its own).
    let newer = (req(0, 24, 21, b""), true);
    for syn_seen in [true, false] {
        let odd = ep(2, 36333);
        let mut c = Counters::default();
        let frames = [newer.clone(), request_like_response(0), r(1), a(1)];
        let out = run_opened(&mut correlator(true), &mut c, &frames, odd, syn_seen);
        assert_eq!(
            kinds(&out),
            vec![(Pair, Some(0)), (Pair, Some(1))],
            "{syn_seen}"
        );
        assert!(out.iter().all(|e| e.broker == odd && e.client == client()));
        assert_eq!(c.get(Counter::UnsupportedVersionRequests), 1);
        assert_eq!(c.get(Counter::OrphanResponses), 0);
    }
}

#[test]
fn heuristic_takes_no_request_from_the_responder_when_the_syn_was_seen() {
    let odd = ep(2, 36333);
    let mut c = Counters::default();
    let frames = [request_like_response(0), r(1), a(1)];
    let out = run_on(&mut correlator(true), &mut c, &frames, odd);
    assert_eq!(
        kinds(&out),
        vec![(OrphanResponse, Some(0)), (Pair, Some(1))]
    );
    assert_eq!(out[1].broker, odd);
}

#[test]
fn heuristic_mid_stream_still_settles_on_the_first_plausible_request() {
    // Without the handshake either side may be the client: the old rule stands.
    let odd = ep(2, 36333);
    let mut c = Counters::default();
    let out = run_opened(
        &mut correlator(true),
        &mut c,
        &[a(0), r(1), a(1)],
        odd,
        false,
    );
    assert_eq!(
        kinds(&out),
        vec![(OrphanResponse, Some(0)), (Pair, Some(1))]
    );
    assert_eq!(c.get(Counter::KafkaFoundByHeuristic), 1);
}

#[test]
fn without_heuristic_unusual_port_is_not_kafka_and_is_counted() {
    let mut c = Counters::default();
    let out = run_on(&mut correlator(false), &mut c, &[r(1), a(1)], ep(2, 36333));
    assert!(out.is_empty());
    assert_eq!(c.get(Counter::NonKafkaFrames), 2);
}

#[test]
fn binary_junk_on_unknown_port_is_held_bounded_then_not_kafka() {
    let mut c = Counters::default();
    let junk: Vec<(Vec<u8>, bool)> = (0..40)
        .map(|i| ([0xffu8, 0xee].repeat(20), i % 2 == 0))
        .collect();
    let out = run_on(&mut correlator(true), &mut c, &junk, ep(2, 36333));
    assert!(out.is_empty());
    assert_eq!(c.get(Counter::NonKafkaFrames), 40);
    const { assert!(MAX_HELD_FRAMES < 40) };
}

#[test]
fn duplicate_correlation_id_reports_the_first_as_unanswered() {
    let mut c = Counters::default();
    let out = run(&mut c, &[r(1), r(1), a(1)]);
    assert_eq!(
        out.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![Unanswered, Pair]
    );
    assert_eq!(out[0].note.as_deref(), Some("duplicate_correlation_id"));
    assert_eq!(c.get(Counter::DuplicateCorrelationIds), 1);
}

#[test]
fn truncated_request_header_is_malformed() {
    let mut c = Counters::default();
    let out = run(&mut c, &[(vec![0, 3, 0, 1, 0, 0], true)]);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].kind, out[0].note.as_deref()),
        (Malformed, Some("request_header_truncated"))
    );
    assert_eq!(c.get(Counter::MalformedRequests), 1);
}

#[test]
fn open_requests_are_bounded_and_the_oldest_is_evicted() {
    let mut c = Counters::default();
    let mut corr = correlator(true);
    corr.open(&StreamOpen {
        stream: 0,
        initiator: client(),
        responder: broker(),
        syn_seen: true,
    });
    let mut out = Vec::new();
    for i in 0..=MAX_OPEN_REQUESTS as i32 {
        corr.frame(
            frame(&req(i, 3, 1, b""), client(), broker(), i as u64 + 1),
            &mut c,
            &mut out,
        );
    }
    assert_eq!(kinds(&out), vec![(Unanswered, Some(0))]);
    assert_eq!(out[0].note.as_deref(), Some("evicted"));
    assert_eq!(c.get(Counter::OpenRequestsEvicted), 1);
    assert_eq!(corr.open_requests(), vec![(3, MAX_OPEN_REQUESTS as u64)]);
    corr.close(0, &mut c, &mut out);
    assert_eq!(out.len(), MAX_OPEN_REQUESTS + 1);
    assert_eq!(
        out[1].correlation_id,
        Some(1),
        "leftovers in the order they were sent"
    );
}

#[test]
fn evicted_sasl_handshakes_are_forgotten_with_their_requests() {
    let mut c = Counters::default();
    let mut corr = correlator(true);
    corr.open(&StreamOpen {
        stream: 0,
        initiator: client(),
        responder: broker(),
        syn_seen: true,
    });
    let mut out = Vec::new();
    let n = MAX_OPEN_REQUESTS as i32 + 50;
    let mut no = 0u64;
    let mut send =
        |corr: &mut Correlator, c: &mut Counters, out: &mut Vec<Exchange>, p: &[u8], up: bool| {
            no += 1;
            let (src, dst) = if up {
                (client(), broker())
            } else {
                (broker(), client())
            };
            corr.frame(frame(p, src, dst, no), c, out);
        };
    for i in 0..n {
        send(
            &mut corr,
            &mut c,
            &mut out,
            &req(i, SASL_HANDSHAKE, 0, b"\x00\x05PLAIN"),
            true,
        );
    }
    assert_eq!(out.len(), 50);
    // Id 0 (an evicted handshake) reused by an ordinary request, answered without error:
    // no switch to raw SASL tokens, so the next frame is read as a request.
    send(&mut corr, &mut c, &mut out, &req(0, 3, 1, b""), true);
    send(&mut corr, &mut c, &mut out, &resp(0, b"\x00\x00"), false);
    assert_eq!(
        out.last().map(|e| (e.kind, e.api_key)),
        Some((Pair, Some(3)))
    );
    send(&mut corr, &mut c, &mut out, b"\x00user\x00secret", true);
    assert_eq!(c.get(Counter::SaslRawTokens), 0);
}

#[test]
fn a_response_too_big_to_hold_is_an_orphan_after_the_held_ones() {
    let mut c = Counters::default();
    let big = resp(9, &vec![0u8; MAX_HELD_RESPONSE_BYTES]);
    let out = run(&mut c, &[a(7), (big, false), r(8)]);
    assert_eq!(
        kinds(&out),
        vec![
            (OrphanResponse, Some(7)),
            (OrphanResponse, Some(9)),
            (Unanswered, Some(8))
        ]
    );
}

#[test]
fn keys_are_the_spec_models() {
    // The requests these tests build name Produce and SaslHandshake by the keys of the
    // exported spec model, the one place that knows them.
    let model = spec_model();
    assert_eq!(PRODUCE, model.produce_key);
    assert_eq!(SASL_HANDSHAKE, model.sasl_handshake_key);
}

#[test]
fn acks_is_read_by_the_field_the_spec_model_names() {
    use _core::types::Versions;
    let model = spec_model();
    assert_eq!(model.acks_field, "acks");
    // v3 (null int16 transactional_id first), v9 (compact null string first): the
    // model's layouts say what precedes acks.
    let v3 = [
        &(-1i16).to_be_bytes()[..],
        &0i16.to_be_bytes(),
        &1000i32.to_be_bytes(),
    ]
    .concat();
    assert_eq!(model.request_acks(PRODUCE, 3, &v3), Some(0));
    let v9 = [&[0u8][..], &(-1i16).to_be_bytes(), &1000i32.to_be_bytes()].concat();
    assert_eq!(model.request_acks(PRODUCE, 9, &v9), Some(-1));
    // Other APIs have no acks, whatever their bytes.
    assert_eq!(model.request_acks(SASL_HANDSHAKE, 1, &v3), None);
    // Bytes that end before acks: unknown, not a guess.
    assert_eq!(model.request_acks(PRODUCE, 3, &v3[..3]), None);
}
