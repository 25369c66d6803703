"""Stage 4: Kafka frames of a connection -> request/response exchanges.

Which side is the broker: a port in ``broker_ports`` says so; otherwise (when
the heuristic is on) the frames settle it once per connection: a frame that
answers a held request header of a known API by its correlation id, or else a
plausible request header, which must come from the initiator when the SYN was
seen (a response can parse as a plausible request header). Frames of a
connection whose role cannot be settled are held (bounded) and counted as
non-Kafka if it never settles.

Requests are matched to responses by correlation_id per connection. Kafka
answers in request order, so a response that skips the oldest open request is
counted as an anomaly; the skipped request stays open and is reported
``unanswered`` if nothing answers it. Produce with acks=0 expects no response.

After a successful SaslHandshake v0 the SASL tokens travel as raw size-prefixed
frames without Kafka headers until authentication ends; those are paired as
``sasl_token`` exchanges instead of being misread as requests.
"""

from __future__ import annotations

import struct
from collections import Counter, deque
from dataclasses import dataclass, field

from dissector.accounting import Counters
from dissector.options import DEFAULT_BROKER_PORTS
from dissector.stages import (
    MALFORMED,
    NO_RESPONSE,
    ORPHAN_RESPONSE,
    PAIR,
    SASL_TOKEN,
    UNANSWERED,
    Exchange,
)
from tests.oracle.framing import DEFAULT_MAX_FRAME, StartCheck
from tests.oracle.framing import Frame as KafkaFrame
from tests.oracle.kafka_header import (
    SASL_HANDSHAKE,
    VersionCheck,
    either_start_check,
    is_plausible_request,
    is_request_like,
    peek_correlation_id,
    peek_request,
    peek_request_cut,
    produce_acks,
    request_start_check,
    response_start_check,
)
from tests.oracle.tcp import Endpoint, StreamOpen

# Bounds that keep memory flat on hostile or lossy traffic.
MAX_OPEN_REQUESTS = 10_000
MAX_HELD_FRAMES = 16
# Request correlation ids remembered per connection to judge resync candidates, and how
# far above the highest one a response's id may be (its request not framed yet).
RECENT_REQUEST_IDS = 64
RESYNC_ID_LEAD = 1024
_I32 = struct.Struct("!i")

# An api_key is known when the specs know one of these versions of it. Versions
# are int16 on the wire but no API has come near this many; the bound keeps the
# one-off probe per key cheap.
MAX_PROBED_VERSION = 128


@dataclass(slots=True)
class _Open:
    frame: KafkaFrame
    api_key: int
    api_version: int
    client_id: str | None
    gap: bool = False  # a hole in the responses after it may hold its response


@dataclass(slots=True)
class _KafkaConnection:
    """One connection as Kafka sees it: which side is the broker, the requests still
    waiting for their response, and the SASL state."""

    stream: int
    a: Endpoint
    b: Endpoint
    broker: Endpoint | None
    syn_seen: bool = False  # the handshake was seen: ``a`` opened it, so it is the client
    pending: dict[int, _Open] = field(default_factory=dict)
    held: list[KafkaFrame] = field(default_factory=list)
    non_kafka: bool = False
    sasl_handshake_ids: set[int] = field(default_factory=set)
    sasl_raw: bool = False
    sasl_token: KafkaFrame | None = None
    # Capture time of the latest hole in the requests that may hold whole requests.
    request_gap: int | None = None
    # Holes noted before the roles were settled: sender -> (start, end).
    unsettled_gaps: dict[Endpoint, tuple[int, int]] = field(default_factory=dict)
    # The latest request correlation ids and the highest: resync candidates are judged
    # against them (``Correlator.confirms_start``).
    recent_ids: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_REQUEST_IDS))
    highest_id: int | None = None

    def saw_request_id(self, corr: int) -> None:
        self.recent_ids.append(corr)
        self.highest_id = corr if self.highest_id is None else max(self.highest_id, corr)

    def may_answer(self, corr: int) -> bool:
        """A response id of a request still open, or of one not framed yet."""
        if self.highest_id is None:
            return True
        return corr in self.pending or 1 <= corr - self.highest_id <= RESYNC_ID_LEAD

    def may_ask(self, corr: int) -> bool:
        """A request id neither open nor among the latest requests'."""
        return corr not in self.pending and corr not in self.recent_ids

    @property
    def client(self) -> Endpoint:
        return self.a if self.broker == self.b else self.b


@dataclass(frozen=True, slots=True)
class CorrelationConfig:
    known: VersionCheck  # (api_key, version) exists
    flexible_request: VersionCheck  # request of (api_key, version) uses header v2
    broker_ports: frozenset[int] = DEFAULT_BROKER_PORTS
    heuristic: bool = True
    max_frame: int = DEFAULT_MAX_FRAME


class Correlator:
    def __init__(self, counters: Counters, config: CorrelationConfig) -> None:
        self._counters = counters
        self._cfg = config
        self._conns: dict[int, _KafkaConnection] = {}
        self._req_check = request_start_check(config.known)
        self._resp_check = response_start_check(config.max_frame)
        self._either_check = either_start_check(config.known, config.max_frame)
        # api_key -> do the specs know any version of it (a few hundred keys at most:
        # api_key is an int16, and only keys of parsed request headers get here).
        self._key_known: dict[int, bool] = {}

    # -- connection lifecycle -------------------------------------------------

    def open(self, ev: StreamOpen) -> None:
        self._conns[ev.stream] = _KafkaConnection(
            ev.stream, ev.initiator, ev.responder, self._broker_by_port(ev), ev.syn_seen
        )

    def is_kafka_candidate(self, stream: int) -> bool:
        conn = self._conns.get(stream)
        return conn is not None and (conn.broker is not None or self._cfg.heuristic)

    def start_check(self, stream: int, src: Endpoint) -> StartCheck:
        conn = self._conns[stream]
        if conn.broker is None:
            return self._either_check
        return self._resp_check if src == conn.broker else self._req_check

    def confirms_start(self, stream: int, src: Endpoint, payload: bytes) -> bool | None:
        """Does the connection confirm a frame start found after losing sync (None while
        the candidate's correlation id is not all there)? A response must answer a
        request that may wait for it, a request must not repeat an id; raw SASL tokens
        and connections of unsettled roles are not checked."""
        conn = self._conns.get(stream)
        if conn is None or conn.broker is None or conn.sasl_raw or conn.sasl_token is not None:
            return True
        if src == conn.broker:
            return None if len(payload) < 4 else conn.may_answer(_I32.unpack_from(payload, 0)[0])
        return None if len(payload) < 8 else conn.may_ask(_I32.unpack_from(payload, 4)[0])

    def close(self, stream: int) -> list[Exchange]:
        conn = self._conns.pop(stream, None)
        if conn is None:
            return []
        out: list[Exchange] = []
        if conn.broker is None or conn.non_kafka:
            self._counters.add("non_kafka_frames", len(conn.held))
            return out
        for corr, req in conn.pending.items():
            out.append(self._unanswered(conn, corr, req, None))
        if conn.sasl_token is not None:
            out.append(self._sasl(conn, conn.sasl_token, None))
        return out

    def open_requests(self) -> Counter[int]:
        """Requests waiting for their response right now, by api_key."""
        return Counter(
            req.api_key for conn in self._conns.values() for req in conn.pending.values()
        )

    def close_all(self) -> list[Exchange]:
        out: list[Exchange] = []
        for stream in list(self._conns):
            out.extend(self.close(stream))
        return out

    # -- frames ---------------------------------------------------------------

    def frame(self, f: KafkaFrame) -> list[Exchange]:
        conn = self._conns.get(f.stream)
        if conn is None or conn.non_kafka:
            self._counters.add("non_kafka_frames")
            return []
        if conn.broker is None:
            return self._settle_role(conn, f)
        if f.src == conn.broker:
            return self._on_response(conn, f)
        return self._on_request(conn, f)

    def _broker_by_port(self, ev: StreamOpen) -> Endpoint | None:
        ports = self._cfg.broker_ports
        init_known = ev.initiator[1] in ports
        resp_known = ev.responder[1] in ports
        if resp_known and (not init_known or ev.syn_seen):
            return ev.responder
        if init_known and not resp_known:
            return ev.initiator
        return None

    def _settle_role(self, conn: _KafkaConnection, f: KafkaFrame) -> list[Exchange]:
        if not self._cfg.heuristic:
            conn.non_kafka = True
            self._counters.add("non_kafka_frames")
            return []
        broker = self._role_from(conn, f)
        if broker is not None:
            conn.broker = broker
            self._counters.add("kafka_found_by_heuristic")
            for src, (start, end) in conn.unsettled_gaps.items():
                self.frames_lost(conn.stream, src, start, end)
            conn.unsettled_gaps.clear()
            out: list[Exchange] = []
            held, conn.held = conn.held, []
            for h in held:
                out.extend(self.frame(h))
            out.extend(self.frame(f))
            return out
        conn.held.append(f)
        if len(conn.held) > MAX_HELD_FRAMES:
            conn.non_kafka = True
            self._counters.add("non_kafka_frames", len(conn.held))
            conn.held.clear()
        return []

    def _role_from(self, conn: _KafkaConnection, f: KafkaFrame) -> Endpoint | None:
        """The broker if ``f`` settles it: first as the answer to a held request header
        of a known API (any version: a new client's first ApiVersions may be newer than
        the specs) from the other side, else as a plausible request header."""
        corr = peek_correlation_id(f.payload)
        if corr is not None and _may_request(conn, f.dst):
            for h in conn.held:
                if h.src == f.dst and is_request_like(h.payload, self._key_is_known) == corr:
                    return f.src
        if _may_request(conn, f.src) and is_plausible_request(f.payload, self._cfg.known):
            return f.dst
        return None

    def _on_request(self, conn: _KafkaConnection, f: KafkaFrame) -> list[Exchange]:
        known = self._cfg.known
        if conn.sasl_raw:
            if not is_plausible_request(f.payload, known):
                return self._raw_token(conn, f)
            conn.sasl_raw = False
        start = peek_request_cut(f.payload) if f.holed else peek_request(f.payload)
        if start is None:
            self._counters.add("malformed_requests")
            return [
                Exchange(
                    conn.stream,
                    conn.client,
                    conn.broker or f.dst,
                    MALFORMED,
                    request=f,
                    note="request_header_truncated",
                )
            ]
        out: list[Exchange] = []
        if not known(start.api_key, start.api_version):
            self._count_unknown(start.api_key)
        corr = start.correlation_id
        conn.saw_request_id(corr)
        if corr in conn.pending:
            self._counters.add("duplicate_correlation_ids")
            out.append(
                self._unanswered(conn, corr, conn.pending.pop(corr), "duplicate_correlation_id")
            )
        flexible = known(start.api_key, start.api_version) and self._cfg.flexible_request(
            start.api_key, start.api_version
        )
        if produce_acks(f.payload, start, flexible) == 0:
            out.append(
                Exchange(
                    conn.stream,
                    conn.client,
                    f.dst,
                    NO_RESPONSE,
                    request=f,
                    api_key=start.api_key,
                    api_version=start.api_version,
                    correlation_id=corr,
                    client_id=start.client_id,
                )
            )
            return out
        if start.api_key == SASL_HANDSHAKE and start.api_version == 0:
            conn.sasl_handshake_ids.add(corr)
        conn.pending[corr] = _Open(f, start.api_key, start.api_version, start.client_id)
        if len(conn.pending) > MAX_OPEN_REQUESTS:
            oldest = next(iter(conn.pending))
            self._counters.add("open_requests_evicted")
            out.append(self._unanswered(conn, oldest, conn.pending.pop(oldest), "evicted"))
        return out

    def _count_unknown(self, api_key: int) -> None:
        """A request the specs cannot decode: a newer version of a known API (the row
        stays ``ok``, its body undecoded), or an api_key no spec has at all."""
        known = self._key_is_known(api_key)
        self._counters.add("unsupported_version_requests" if known else "unknown_api_key_requests")

    def _key_is_known(self, api_key: int) -> bool:
        known = self._key_known.get(api_key)
        if known is None:
            known = any(self._cfg.known(api_key, v) for v in range(MAX_PROBED_VERSION))
            self._key_known[api_key] = known
        return known

    def frames_lost(self, stream: int, src: Endpoint, start: int, end: int) -> None:
        """A hole between capture times ``start`` and ``end`` in the bytes ``src`` sent
        may hold whole frames: requests open by ``end`` may have lost their response
        (``src`` the broker), responses after ``start`` without a request may have lost
        it (``src`` the client)."""
        conn = self._conns.get(stream)
        if conn is None:
            return
        if conn.broker is None:
            first = conn.unsettled_gaps.get(src, (start, end))[0]
            conn.unsettled_gaps[src] = (first, end)
            return
        if conn.broker == src:
            for req in conn.pending.values():
                if req.frame.last_ts_ns <= end:
                    req.gap = True
        else:
            conn.request_gap = start

    def _on_response(self, conn: _KafkaConnection, f: KafkaFrame) -> list[Exchange]:
        if (conn.sasl_raw or conn.sasl_token is not None) and conn.sasl_token is not None:
            token, conn.sasl_token = conn.sasl_token, None
            return [self._sasl(conn, token, f)]
        corr = peek_correlation_id(f.payload)
        req = conn.pending.pop(corr, None) if corr is not None else None
        if req is None:
            self._counters.add("orphan_responses")
            return [
                Exchange(
                    conn.stream,
                    conn.client,
                    f.src,
                    ORPHAN_RESPONSE,
                    response=f,
                    correlation_id=corr,
                    gap=conn.request_gap is not None and conn.request_gap <= f.last_ts_ns,
                )
            ]
        if conn.pending and _older(conn, req):
            self._counters.add("responses_out_of_order")
        if corr in conn.sasl_handshake_ids:
            conn.sasl_handshake_ids.discard(corr)
            # Raw tokens follow only when the handshake succeeded (error_code 0).
            conn.sasl_raw = len(f.payload) >= 6 and f.payload[4:6] == b"\x00\x00"
        return [
            Exchange(
                conn.stream,
                conn.client,
                f.src,
                PAIR,
                request=req.frame,
                response=f,
                api_key=req.api_key,
                api_version=req.api_version,
                correlation_id=corr,
                client_id=req.client_id,
            )
        ]

    def _raw_token(self, conn: _KafkaConnection, f: KafkaFrame) -> list[Exchange]:
        out: list[Exchange] = []
        if conn.sasl_token is not None:
            out.append(self._sasl(conn, conn.sasl_token, None))
        conn.sasl_token = f
        self._counters.add("sasl_raw_tokens")
        return out

    def _sasl(
        self, conn: _KafkaConnection, token: KafkaFrame, answer: KafkaFrame | None
    ) -> Exchange:
        return Exchange(
            conn.stream,
            conn.client,
            conn.broker or token.dst,
            SASL_TOKEN,
            request=token,
            response=answer,
        )

    def _unanswered(
        self, conn: _KafkaConnection, corr: int, req: _Open, note: str | None
    ) -> Exchange:
        return Exchange(
            conn.stream,
            conn.client,
            req.frame.dst,
            UNANSWERED,
            request=req.frame,
            api_key=req.api_key,
            api_version=req.api_version,
            correlation_id=corr,
            client_id=req.client_id,
            # Kafka answers every request but acks=0 Produce: one still open after a
            # hole in the responses most likely had its response there (its row's
            # status says so: stages.base_status).
            note=note,
            gap=req.gap,
        )


def _may_request(conn: _KafkaConnection, side: Endpoint) -> bool:
    """Can ``side`` be the client? When the SYN was seen only the initiator can."""
    return not conn.syn_seen or side == conn.a


def _older(conn: _KafkaConnection, req: _Open) -> bool:
    """Is some still-open request older (sent earlier) than the one just answered?"""
    first = next(iter(conn.pending.values()))
    return first.frame.last_frame < req.frame.last_frame
