"""Correlation: roles, matching by correlation id, acks=0, SASL raw tokens, anomalies."""

from __future__ import annotations

import struct

import pytest

from dissector.accounting import Counters
from dissector.stages import Endpoint
from tests.oracle.correlate import CorrelationConfig, Correlator, Exchange
from tests.oracle.framing import Frame
from tests.oracle.tcp import StreamOpen

CLIENT = Endpoint("10.0.0.1", 50000)
BROKER = Endpoint("10.0.0.2", 9092)
ODD_BROKER = Endpoint("10.0.0.2", 36333)


def _known(key: int, version: int) -> bool:
    return 0 <= key <= 92 and 0 <= version <= 18


def _flexible(key: int, version: int) -> bool:
    return key == 0 and version >= 9


def _correlator(counters: Counters, heuristic: bool = True) -> Correlator:
    return Correlator(counters, CorrelationConfig(_known, _flexible, heuristic=heuristic))


def _req(corr: int, key: int = 3, version: int = 1, tail: bytes = b"") -> bytes:
    return struct.pack(">hhih", key, version, corr, 3) + b"cli" + tail


def _resp(corr: int, tail: bytes = b"\x00\x00") -> bytes:
    return struct.pack(">i", corr) + tail


_clock = iter(range(1, 10_000))


def _frame(payload: bytes, src: Endpoint, dst: Endpoint) -> Frame:
    n = next(_clock)
    return Frame(0, src, dst, payload, n * 1000, n * 1000, n, n, False)


def _run(
    corr: Correlator, frames: list[tuple[bytes, bool]], broker=BROKER, syn_seen: bool = True
) -> list[Exchange]:
    corr.open(StreamOpen(0, CLIENT, broker, syn_seen))
    out: list[Exchange] = []
    for payload, from_client in frames:
        src, dst = (CLIENT, broker) if from_client else (broker, CLIENT)
        out.extend(corr.frame(_frame(payload, src, dst)))
    out.extend(corr.close(0))
    return out


def test_pairs_by_correlation_id_and_leftovers_are_unanswered() -> None:
    c = Counters()
    out = _run(_correlator(c), [(_req(1), True), (_req(2), True), (_resp(1), False)])
    kinds = [(e.kind, e.correlation_id) for e in out]
    assert kinds == [("pair", 1), ("unanswered", 2)]
    assert out[0].api_key == 3 and out[0].client_id == "cli"
    assert out[0].client == CLIENT and out[0].broker == BROKER


def test_response_without_request_is_an_orphan() -> None:
    c = Counters()
    out = _run(_correlator(c), [(_resp(77), False), (_req(1), True), (_resp(1), False)])
    assert [(e.kind, e.correlation_id) for e in out] == [("orphan_response", 77), ("pair", 1)]
    assert c["orphan_responses"] == 1


def test_produce_acks_zero_expects_no_response() -> None:
    # Produce v3: transactional_id null (-1), acks 0, timeout...
    acks0 = _req(5, key=0, version=3, tail=struct.pack(">hhi", -1, 0, 1000))
    acks1 = _req(6, key=0, version=3, tail=struct.pack(">hhi", -1, 1, 1000))
    out = _run(_correlator(Counters()), [(acks0, True), (acks1, True), (_resp(6), False)])
    assert [(e.kind, e.correlation_id) for e in out] == [("no_response", 5), ("pair", 6)]


def test_flexible_produce_acks_zero() -> None:
    # Produce v9: header tagged fields (0 tags), compact null transactional_id (0), acks 0.
    acks0 = _req(5, key=0, version=9, tail=b"\x00" + b"\x00" + struct.pack(">hi", 0, 1000))
    out = _run(_correlator(Counters()), [(acks0, True)])
    assert [e.kind for e in out] == ["no_response"]


def test_out_of_order_response_is_counted_and_skipped_request_stays_open() -> None:
    c = Counters()
    out = _run(
        _correlator(c),
        [(_req(1), True), (_req(2), True), (_resp(2), False), (_resp(1), False)],
    )
    assert [(e.kind, e.correlation_id) for e in out] == [("pair", 2), ("pair", 1)]
    assert c["responses_out_of_order"] == 1


def test_sasl_handshake_v0_switches_to_raw_tokens_until_a_request_reappears() -> None:
    handshake = _req(1, key=17, version=0, tail=b"\x00\x05PLAIN")
    ok = _resp(1, tail=b"\x00\x00" + b"\x00\x00\x00\x01\x00\x05PLAIN")
    token = b"\x00user\x00secret"
    out = _run(
        _correlator(Counters()),
        [
            (handshake, True),
            (ok, False),
            (token, True),
            (b"", False),
            (_req(2), True),
            (_resp(2), False),
        ],
    )
    assert [e.kind for e in out] == ["pair", "sasl_token", "pair"]
    assert out[1].request is not None and out[1].request.payload == token
    assert out[1].response is not None and out[1].response.payload == b""


def test_failed_sasl_handshake_does_not_switch_to_raw() -> None:
    handshake = _req(1, key=17, version=0, tail=b"\x00\x05PLAIN")
    refused = _resp(1, tail=b"\x00\x21" + b"\x00\x00\x00\x00")
    out = _run(_correlator(Counters()), [(handshake, True), (refused, False), (_req(2), True)])
    assert [e.kind for e in out] == ["pair", "unanswered"]


def test_heuristic_finds_broker_on_unusual_port_from_the_request_side() -> None:
    c = Counters()
    out = _run(_correlator(c), [(_req(1), True), (_resp(1), False)], broker=ODD_BROKER)
    assert [e.kind for e in out] == ["pair"] and out[0].broker == ODD_BROKER
    assert c["kafka_found_by_heuristic"] == 1


# A response whose bytes also read as a plausible request header: correlation id 0 reads
# as Produce v0, throttle 0 as its correlation id, then an empty client id (as the
# AddPartitionsToTxn responses of a real Kafka 4.4 broker do).
_REQUEST_LIKE_RESPONSE = (_resp(0, b"\x00" * 7 + b"\x02"), False)


@pytest.mark.parametrize("syn_seen", [True, False])
def test_heuristic_pairs_a_newer_request_with_its_answer(syn_seen: bool) -> None:
    # The first request's version is newer than the specs: not plausible on its own.
    newer = (_req(0, key=24, version=19), True)
    frames = [newer, _REQUEST_LIKE_RESPONSE, (_req(1), True), (_resp(1), False)]
    c = Counters()
    out = _run(_correlator(c), frames, broker=ODD_BROKER, syn_seen=syn_seen)
    assert [(e.kind, e.correlation_id) for e in out] == [("pair", 0), ("pair", 1)]
    assert all(e.broker == ODD_BROKER and e.client == CLIENT for e in out)
    assert c["unsupported_version_requests"] == 1 and c["orphan_responses"] == 0


def test_heuristic_takes_no_request_from_the_responder_when_the_syn_was_seen() -> None:
    frames = [_REQUEST_LIKE_RESPONSE, (_req(1), True), (_resp(1), False)]
    out = _run(_correlator(Counters()), frames, broker=ODD_BROKER)
    assert [(e.kind, e.correlation_id) for e in out] == [("orphan_response", 0), ("pair", 1)]
    assert out[1].broker == ODD_BROKER


def test_without_heuristic_unusual_port_is_not_kafka_and_is_counted() -> None:
    c = Counters()
    out = _run(
        _correlator(c, heuristic=False), [(_req(1), True), (_resp(1), False)], broker=ODD_BROKER
    )
    assert out == [] and c["non_kafka_frames"] == 2


def test_binary_junk_on_unknown_port_is_not_taken_for_kafka() -> None:
    c = Counters()
    junk = [(bytes([0xFF, 0xEE]) * 20, i % 2 == 0) for i in range(40)]
    out = _run(_correlator(c), junk, broker=ODD_BROKER)
    assert out == [] and c["non_kafka_frames"] == 40


def test_duplicate_correlation_id_reports_the_first_as_unanswered() -> None:
    c = Counters()
    out = _run(_correlator(c), [(_req(1), True), (_req(1), True), (_resp(1), False)])
    assert [e.kind for e in out] == ["unanswered", "pair"]
    assert out[0].note == "duplicate_correlation_id"
