"""Whole exchanges decoded: both bodies, the summary, and topic ids resolved to names.

One path for every reader of full bodies: ``kafka-dissector decode`` /
``dissector.decode`` (``as_json``), the partitions, groups and versions tables. The
input is any stream of (capture, exchange: ``stages.ExchangeView``), the native core's
records or the oracle's.

Topic names follow one policy: per capture, learnt from every response of an API that
names topic ids (``TOPIC_NAME_SOURCES``) seen so far, whether or not its pair is
wanted, so ``decode --api Fetch`` resolves ids as a full run does.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dissector.json_values import iso_ns
from dissector.protocol.families import TOPIC_ID_SOURCES, names
from dissector.protocol.messages import settle_assumed
from dissector.schema import Status
from dissector.stages import (
    CAPTURE_GAP,
    MALFORMED,
    NEGATIVE_LATENCY,
    REQUEST_INCOMPLETE,
    RESPONSE_INCOMPLETE,
    TLS,
    TRUNCATED,
    ExchangeView,
    FrameView,
    base_status,
    is_fatal,
)

TOPIC_NAME_SOURCES = frozenset(names(TOPIC_ID_SOURCES))
"""APIs whose responses map topic ids to names, by name (``families.TOPIC_ID_SOURCES``)."""

Expand = Callable[[str, bool], bool]
"""(api_name, is_request) -> expand the record batches of that side into records?"""


def _never(_api: str, _request: bool) -> bool:
    return False


@dataclass(slots=True)
class DecodedExchange:
    """One exchange with both bodies decoded (None where absent or not decodable).
    Not frozen: a frozen dataclass sets each field through object.__setattr__, which
    doubled its cost, and ``decode`` makes one a pair."""

    capture: str
    exchange: ExchangeView
    api_name: str | None
    request: Any  # protocol.Decoded | None
    response: Any

    def request_body(self) -> dict[str, Any]:
        body = self.request.body if self.request is not None else None
        return body if isinstance(body, dict) else {}

    def response_body(self) -> dict[str, Any]:
        body = self.response.body if self.response is not None else None
        return body if isinstance(body, dict) else {}


def decoder_for_specs(specs: Iterable[str | os.PathLike[str]]) -> Any:
    """The protocol package, or a decoder bound to extra spec directories / jars."""
    paths = [os.fspath(s) for s in specs]
    if paths:
        from dissector.protocol.bound_decoder import decoder_for

        return decoder_for(paths)
    from dissector import protocol

    return protocol


def decode_exchanges(
    exchanges: Iterable[tuple[str, ExchangeView]],
    decoder: Any,
    wanted: Callable[[ExchangeView, str | None], bool],
    *,
    expand: Expand = _never,
    counts: Counter[str] | None = None,
) -> Iterator[tuple[DecodedExchange, Any]]:
    """(decoded exchange, the capture's ``TopicNames``) for each exchange ``wanted``
    (called with the exchange and its API name, None when the header is unknown).

    Exchanges without api_key/version are yielded undecoded when wanted. ``counts``
    receives ``pairs`` and ``decode_errors`` of the wanted exchanges.
    """
    names: Any = None
    current: str | None = None
    api_names: dict[int, str] = {}  # the decoder's name of each key, asked once a run
    for path, ex in exchanges:
        if path != current:  # captures are independent: ids learnt in one mean nothing in the next
            current, names = path, decoder.TopicNames()
        api_key, version = ex.api_key, ex.api_version
        api: str | None = None
        if api_key is not None:
            api = api_names.get(api_key)
            if api is None:
                api = api_names[api_key] = decoder.api_name(api_key)
        want = wanted(ex, api)
        if api_key is None or version is None:
            if want:
                yield DecodedExchange(path, ex, api, None, None), names
            continue
        assert api is not None  # a known header has an api_key
        if not want and api not in TOPIC_NAME_SOURCES:
            continue
        # A side not captured whole is not decoded, as in the pairs table's row.
        request = response = None
        req, resp = ex.request, ex.response
        if req is not None and not req.holed:
            request = decoder.decode_request(req.payload, records=expand(api, True))
        if resp is not None and not resp.holed:
            response = decoder.decode_response(
                resp.payload, api_key, version, records=expand(api, False)
            )
        settle_assumed(request, response)  # a version newer than the specs: both or neither
        if api in TOPIC_NAME_SOURCES:
            if response is not None and response.error is None:
                names.learn(api_key, response.body)
            elif resp is not None and resp.holed:
                # The ids its captured bytes name whole, as the native core learns them
                # (summary.rs read_cut): a snap length cuts most Metadata responses.
                cut = decoder.decode_response(resp.payload, api_key, version, prefix=True)
                names.learn(api_key, cut.body)
        if not want:
            continue
        if counts is not None:
            counts["pairs"] += 1
            counts["decode_errors"] += sum(1 for s in (request, response) if s and s.error)
        yield DecodedExchange(path, ex, api, request, response), names


# ----------------------------------------------------------------- JSON lines


def as_json(dx: DecodedExchange, decoder: Any, names: Any) -> dict[str, Any]:
    """The ``decode`` command's object for one exchange: headers, bodies (topic ids
    annotated with their names), the summary. (It runs once a pair: a million pairs
    are decoded in seconds only if each step here is a plain one.)"""
    ex = dx.exchange
    request, response = ex.request, ex.response
    request_cut = request is not None and request.holed
    response_cut = response is not None and response.holed
    summary: dict[str, Any] | None = None
    if ex.api_key is not None and ex.api_version is not None:
        s = decoder.summarize(ex.api_key, ex.api_version, dx.request, dx.response, names)
        if names.names:  # annotate finds nothing to add before an id is learnt
            for side in (dx.request, dx.response):
                if side is not None:
                    names.annotate(side.body)
        summary = s.as_dict()
        if request_cut or response_cut:
            facts = cut_facts(decoder, ex, names)
            add_topics(summary["topics"], facts.pop("topics"))
            summary.update(facts)
    # The pair's times as in the pairs table: the packets completing each side (none
    # for a side whose last byte was not captured).
    sent = request.end_ts_ns if request is not None else None
    answered = response.end_ts_ns if response is not None else None
    # A request completed at time 0 is taken as unknown, as the pairs table does.
    timed = sent is not None and sent != 0 and response is not None
    latency = _ms(answered - sent) if timed and sent is not None and answered is not None else None
    first_byte = (
        _ms(response.first_ts_ns - sent)
        if timed and sent is not None and response is not None
        else None
    )
    return {
        "capture": dx.capture,
        "stream": ex.stream,
        "client": f"{ex.client.ip}:{ex.client.port}",
        "broker": f"{ex.broker.ip}:{ex.broker.port}",
        "kind": ex.kind,
        "api_key": ex.api_key,
        "api_name": dx.api_name,
        "api_version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "client_id": ex.client_id,
        "request_time": iso_ns(sent),
        "response_time": iso_ns(answered),
        "latency_ms": latency,
        "first_byte_ms": first_byte,
        "status": _status(ex, summary, dx, response_cut),
        "flags": row_flags(ex, latency),
        "decode_error": row_decode_error(ex, summary),
        "note": ex.note,
        "request": _side(dx.request, request),
        "response": _side(dx.response, response),
        "summary": summary,
    }


def row_flags(ex: ExchangeView, latency_ms: float | None) -> list[str]:
    """The row flags of the pairs table (``stages.RowFlag``) for this exchange, in its
    order (native core: native/src/rows/mod.rs)."""
    # After lost bytes, bytes of the pair lost, or its missing side maybe in a hole.
    gap = ex.gap
    truncated = tls = False
    for f in (ex.request, ex.response):
        if f is None:
            continue
        holed = f.holed
        if f.after_gap or (holed and not f.snapped):
            gap = True
        if holed and f.snapped:
            truncated = True
        if f.tls:
            tls = True
    flags = []
    if gap:
        flags.append(CAPTURE_GAP)
    if truncated:
        flags.append(TRUNCATED)
    if latency_ms is not None and latency_ms < 0:
        flags.append(NEGATIVE_LATENCY)
    if tls:
        flags.append(TLS)
    return flags


def row_decode_error(ex: ExchangeView, summary: dict[str, Any] | None) -> str | None:
    """The pairs table's ``decode_error`` of this exchange (native core:
    native/src/rows/mod.rs): why it is malformed, its note, the sides not captured whole,
    the summary's error."""
    parts = []
    if ex.note and (ex.kind == MALFORMED or summary is not None):
        parts.append(ex.note)  # why it is malformed, or the note of a decoded pair
    if ex.request is not None and ex.request.holed:
        parts.append(REQUEST_INCOMPLETE)
    if ex.response is not None and ex.response.holed:
        parts.append(RESPONSE_INCOMPLETE)
    error = summary.get("decode_error") if summary is not None else None
    if error:
        parts.append(error)
    return "; ".join(parts) if parts else None


def cut_facts(decoder: Any, ex: ExchangeView, names: Any) -> dict[str, Any]:
    """What the captured bytes of the sides not captured whole tell (native core:
    summary.rs ``read_cut`` and ``CutScan::facts``, added to the row by pipeline.rs
    ``add_cut_facts``):
    ``topics``, the topics named in them (to add to the row's, ``add_topics``); of a
    response, a non-zero error code read before the cut (its error count is then
    unknown) and its throttle. The decoder reads each prefix as far as it goes; nothing
    past the cut is guessed."""
    assert ex.api_key is not None and ex.api_version is not None
    req, resp = ex.request, ex.response
    request = (
        decoder.decode_request(req.payload, prefix=True) if req is not None and req.holed else None
    )
    response = (
        decoder.decode_response(resp.payload, ex.api_key, ex.api_version, prefix=True)
        if resp is not None and resp.holed
        else None
    )
    s = decoder.summarize(ex.api_key, ex.api_version, request, response, names)
    facts: dict[str, Any] = {"topics": list(s.topics)}
    if response is not None:
        code = s.error_code or None
        facts.update(error_code=code, error_name=s.error_name if code else None)
        facts.update(error_count=None, throttle_ms=s.throttle_ms)
    return facts


def add_topics(topics: list[str], more: list[str]) -> None:
    """The topics read in cut bytes after the row's own, each once (native core:
    pipeline.rs ``add_cut_facts``)."""
    for topic in more:
        if topic not in topics:
            topics.append(topic)


def _ms(ns: int) -> float:
    return ns / 1_000_000


def _status(
    ex: ExchangeView, summary: dict[str, Any] | None, dx: DecodedExchange, response_cut: bool
) -> str:
    status = base_status(ex)
    if summary is None:
        return status
    if summary["decode_error"] and is_fatal(dx.request, dx.response):
        return Status.MALFORMED.value
    if status == _OK and summary["error_code"]:
        return _ERROR
    if status == _OK and response_cut:
        return Status.UNKNOWN.value  # no error code in what was captured; the rest may hold one
    return status


_OK = Status.OK.value
_ERROR = Status.ERROR.value


def _side(decoded: Any, frame: FrameView | None) -> dict[str, Any] | None:
    if frame is not None and frame.holed:
        # Not decoded: say how much of it the capture holds.
        return {
            "incomplete": "snap length" if frame.snapped else "capture hole",
            "kept_bytes": len(frame.payload) + 4,  # its bytes before the first hole
            "wire_size": frame.wire_size,
        }
    if decoded is None:
        return None
    out: dict[str, Any] = {"header": decoded.header, "body": decoded.body}
    if decoded.error:
        out["error"] = decoded.error
    if decoded.trailing:
        out["trailing_bytes"] = decoded.trailing
    if decoded.notes:
        out["notes"] = decoded.notes
    if getattr(decoded, "assumed_version", None) is not None:
        out["assumed_version"] = decoded.assumed_version
    return out
