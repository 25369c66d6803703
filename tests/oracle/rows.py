"""Stage 6: decoded exchanges -> rows of the pairs DataFrame (``schema.COLUMNS``).

The row builder asks a ``Decoder`` (the protocol package, or anything with the
same functions) to decode both sides and to summarise them into the analytics
columns; it never looks inside Kafka bodies itself.
"""

from __future__ import annotations

from typing import Any

from dissector.accounting import Counters
from dissector.protocol.pairs import add_topics, cut_facts
from dissector.stages import (
    CAPTURE_GAP,
    MALFORMED,
    NEGATIVE_LATENCY,
    REQUEST_INCOMPLETE,
    RESPONSE_INCOMPLETE,
    SASL_TOKEN,
    TRUNCATED,
    Decoder,
    Exchange,
    PairRecord,
    base_status,
)
from dissector.stages import is_fatal as _is_fatal

SASL_TOKEN_API_NAME = "SaslToken"


def _ms(ns: int) -> float:
    return ns / 1_000_000


def base_record(capture: str, ex: Exchange) -> PairRecord:
    """Everything a row knows without decoding bodies: endpoints, times, sizes, header."""
    req, resp = ex.request, ex.response
    req_done = req.end_ts_ns if req is not None else None
    resp_done = resp.end_ts_ns if resp is not None else None
    return PairRecord(
        capture=capture,
        stream=ex.stream,
        client_ip=ex.client[0],
        client_port=ex.client[1],
        broker_ip=ex.broker[0],
        broker_port=ex.broker[1],
        request_time=req_done,
        response_time=resp_done,
        latency_ms=_ms(resp_done - req_done) if resp_done is not None and req_done else None,
        first_byte_ms=_ms(resp.first_ts_ns - req_done) if resp is not None and req_done else None,
        api_key=ex.api_key,
        api_name=SASL_TOKEN_API_NAME if ex.kind == SASL_TOKEN else None,
        api_version=ex.api_version,
        correlation_id=ex.correlation_id,
        client_id=ex.client_id,
        request_size=req.wire_size if req is not None else None,
        response_size=resp.wire_size if resp is not None else None,
        status=base_status(ex),
        decode_error=_join(ex.note if ex.kind == MALFORMED else None, _incomplete(ex)),
    )


# Top-level integer request fields copied into columns of the same name.
REQUEST_EXTRACTS = ("max_wait_ms", "min_bytes")


def build_record(
    capture: str, ex: Exchange, decoder: Decoder, topics: Any, counters: Counters | None = None
) -> PairRecord:
    """The pair's row; ``counters`` gets ``records_partial_batches`` (as the native
    core's records stage counts them)."""
    rec = base_record(capture, ex)
    if _after_gap(ex):
        # The first frame after lost bytes (or after a mid-connection start): what
        # came before it is unknown, so the pair may lack context. Or bytes of the pair
        # itself were lost, or its missing side may be in a hole.
        rec.flags.append(CAPTURE_GAP)
    if any(f is not None and f.holed and f.snapped for f in (ex.request, ex.response)):
        rec.flags.append(TRUNCATED)
    if rec.latency_ms is not None and rec.latency_ms < 0:
        rec.flags.append(NEGATIVE_LATENCY)
    if ex.api_key is None or ex.api_version is None:
        return rec
    rec.api_name = decoder.api_name(ex.api_key)
    # A side not captured whole is not decoded (its row says so).
    req_f = ex.request if ex.request is not None and not ex.request.holed else None
    resp_f = ex.response if ex.response is not None and not ex.response.holed else None
    request = decoder.decode_request(req_f.payload) if req_f is not None else None
    response = (
        decoder.decode_response(resp_f.payload, ex.api_key, ex.api_version)
        if resp_f is not None
        else None
    )
    s = decoder.summarize(ex.api_key, ex.api_version, request, response, topics)
    partial = getattr(s, "partial_batches", 0)
    if partial and counters is not None:
        counters.add("records_partial_batches", partial)
    body = getattr(request, "body", None)
    if isinstance(body, dict):
        for name in REQUEST_EXTRACTS:
            value = body.get(name)
            if type(value) is int:
                setattr(rec, name, value)
    rec.error_code = s.error_code
    rec.error_name = s.error_name
    rec.error_count = s.error_count
    rec.topics = list(s.topics)
    rec.partitions = s.partitions
    rec.records = s.records
    rec.record_bytes = s.record_bytes
    rec.compression = s.compression
    rec.throttle_ms = s.throttle_ms
    rec.assumed_version = s.assumed_version
    rec.decode_error = _join(ex.note, _incomplete(ex), s.decode_error)
    if any(f is not None and f.holed for f in (ex.request, ex.response)):
        cut = cut_facts(decoder, ex, topics)
        add_topics(rec.topics, cut["topics"])
        if ex.response is not None and ex.response.holed:
            rec.error_code, rec.error_name = cut["error_code"], cut["error_name"]
            rec.error_count, rec.throttle_ms = cut["error_count"], cut["throttle_ms"]
    if s.decode_error and _is_fatal(request, response):
        rec.status = "malformed"
    elif rec.status == "ok" and rec.error_code:
        rec.status = "error"
    elif rec.status == "ok" and ex.response is not None and ex.response.holed:
        rec.status = "unknown"  # no error code in what was captured; the rest may hold one
    return rec


def _after_gap(ex: Exchange) -> bool:
    return ex.gap or any(
        f is not None and (f.after_gap or (f.holed and not f.snapped))
        for f in (ex.request, ex.response)
    )


def _incomplete(ex: Exchange) -> str | None:
    return _join(
        REQUEST_INCOMPLETE if ex.request is not None and ex.request.holed else None,
        RESPONSE_INCOMPLETE if ex.response is not None and ex.response.holed else None,
    )


def _join(*notes: str | None) -> str | None:
    present = [n for n in notes if n]
    return "; ".join(present) if present else None
