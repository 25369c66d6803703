"""The plain data handed from stage to stage, shared by the shipped path and the oracle.

The native core (``dissector.wire``) produces these; protocol, table, analytics, live
and spark consume them; the pure-Python stages kept as the test oracle
(``tests/oracle``) produce the same types, so the two paths compare field by field.
They live in the vocabulary rank, below ``protocol``, because the protocol package's
pair decoder reads an ``Exchange`` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from dissector.schema import Status


class Endpoint(NamedTuple):
    """One side of a TCP connection: the address as text and the port. A named tuple,
    so ``ip, port = endpoint`` and comparisons with ``(ip, port)`` keep working."""

    ip: str
    port: int


class CaptureError(Exception):
    """The file is not a capture we can read (bad magic, unreadable header)."""


@dataclass(slots=True)
class Frame:
    """One Kafka message as found in a TCP direction (size prefix stripped)."""

    stream: int
    src: Endpoint
    dst: Endpoint
    payload: bytes  # message bytes after the 4-byte size prefix
    first_ts_ns: int  # time of the packet carrying the first byte
    last_ts_ns: int  # time of the latest-arriving packet among its bytes
    first_frame: int
    last_frame: int
    after_gap: bool  # the first frame accepted after a resync
    # A hole fell inside the frame after its size prefix: ``payload`` holds the bytes
    # before the first hole only, ``missing`` the payload bytes beyond them.
    missing: int = 0
    snapped: bool = False  # every missing byte was cut by the snap length
    end_lost: bool = False  # its last byte was not captured (last_ts_ns: last captured)
    tls: bool = False  # decrypted from a TLS connection

    @property
    def wire_size(self) -> int:
        return len(self.payload) + self.missing + 4

    @property
    def holed(self) -> bool:
        """Some of its bytes were not captured."""
        return self.missing > 0 or self.end_lost

    @property
    def end_ts_ns(self) -> int | None:
        """When its last byte was captured; None when it was not."""
        return None if self.end_lost else self.last_ts_ns


class ExchangeKind(StrEnum):
    """What the correlation stage made of a frame or a pair of frames."""

    PAIR = "pair"
    NO_RESPONSE = "no_response"
    UNANSWERED = "unanswered"
    ORPHAN_RESPONSE = "orphan_response"
    SASL_TOKEN = "sasl_token"
    MALFORMED = "malformed"


# The kinds as plain strings (the native core hands over the same text).
PAIR = ExchangeKind.PAIR.value
NO_RESPONSE = ExchangeKind.NO_RESPONSE.value
UNANSWERED = ExchangeKind.UNANSWERED.value
ORPHAN_RESPONSE = ExchangeKind.ORPHAN_RESPONSE.value
SASL_TOKEN = ExchangeKind.SASL_TOKEN.value
MALFORMED = ExchangeKind.MALFORMED.value


@dataclass(slots=True)
class Exchange:
    stream: int
    client: Endpoint
    broker: Endpoint
    kind: str  # pair | no_response | unanswered | orphan_response | sasl_token | malformed
    request: Frame | None = None
    response: Frame | None = None
    api_key: int | None = None
    api_version: int | None = None
    correlation_id: int | None = None
    client_id: str | None = None
    note: str | None = None
    gap: bool = False  # a capture hole may hold its missing part (response or request)


# What the stages after correlation read of the records above, whichever path made them:
# this module's dataclasses (the oracle, ``dissector.iter_exchanges``) or the native
# core's own records (``dissector._core.Frame``/``Exchange``), read as they come: copying
# each into a dataclass took a fifth of ``decode``'s time a pair.


class EndpointView(Protocol):
    @property
    def ip(self) -> str: ...
    @property
    def port(self) -> int: ...


class FrameView(Protocol):
    """What is read of a frame after correlation (its place in the stream is not)."""

    @property
    def payload(self) -> bytes: ...
    @property
    def first_ts_ns(self) -> int: ...
    @property
    def last_ts_ns(self) -> int: ...
    @property
    def after_gap(self) -> bool: ...
    @property
    def snapped(self) -> bool: ...
    @property
    def tls(self) -> bool: ...
    @property
    def holed(self) -> bool: ...
    @property
    def end_ts_ns(self) -> int | None: ...
    @property
    def wire_size(self) -> int: ...


class ExchangeView(Protocol):
    @property
    def stream(self) -> int: ...
    @property
    def client(self) -> EndpointView: ...
    @property
    def broker(self) -> EndpointView: ...
    @property
    def kind(self) -> str: ...
    @property
    def request(self) -> FrameView | None: ...
    @property
    def response(self) -> FrameView | None: ...
    @property
    def api_key(self) -> int | None: ...
    @property
    def api_version(self) -> int | None: ...
    @property
    def correlation_id(self) -> int | None: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def note(self) -> str | None: ...
    @property
    def gap(self) -> bool: ...


_KIND_STATUS = {
    PAIR: Status.OK.value,
    NO_RESPONSE: Status.NO_RESPONSE.value,
    UNANSWERED: Status.UNANSWERED.value,
    ORPHAN_RESPONSE: Status.ORPHAN_RESPONSE.value,
    SASL_TOKEN: Status.OK.value,
    MALFORMED: Status.MALFORMED.value,
}


def base_status(ex: ExchangeView) -> str:
    """A row's status before its bodies are looked at (native core: ``base_status`` in
    native/src/rows/mod.rs). A request left open after a hole in its connection's responses
    (``gap``, no other reason noted) most likely had its answer in the hole."""
    if ex.kind == UNANSWERED and ex.gap and ex.note is None:
        return Status.RESPONSE_LOST.value
    return _KIND_STATUS.get(ex.kind, _OK)


_OK = Status.OK.value  # read once: an enum member's .value is a property call


class Decoder(Protocol):
    """What the row builders ask of a decoder (the ``dissector.protocol`` package)."""

    def decode_request(self, payload: bytes, *, records: bool = False) -> Any: ...

    def decode_response(
        self, payload: bytes, api_key: int, api_version: int, *, records: bool = False
    ) -> Any: ...

    def summarize(
        self, api_key: int, api_version: int, request: Any, response: Any, topics: Any
    ) -> Any: ...

    def api_name(self, api_key: int) -> str: ...

    @property
    def TopicNames(self) -> Callable[[], Any]:
        """Makes the topic-id table of one capture (``protocol.summary.TopicNames``)."""
        ...


@dataclass(slots=True)
class PairRecord:
    """One row of the pairs DataFrame; field names and order are ``schema.COLUMN_NAMES``."""

    capture: str
    stream: int
    client_ip: str
    client_port: int
    broker_ip: str
    broker_port: int
    request_time: int | None  # ns since epoch, UTC
    response_time: int | None
    latency_ms: float | None
    first_byte_ms: float | None
    api_key: int | None
    api_name: str | None
    api_version: int | None
    correlation_id: int | None
    client_id: str | None
    request_size: int | None
    response_size: int | None
    status: str
    error_code: int | None = None
    error_name: str | None = None
    error_count: int | None = None
    topics: list[str] = field(default_factory=list)
    partitions: int | None = None
    records: int | None = None
    record_bytes: int | None = None
    compression: str | None = None
    throttle_ms: int | None = None
    decode_error: str | None = None
    flags: list[str] = field(default_factory=list)
    max_wait_ms: int | None = None
    min_bytes: int | None = None
    # Derived per connection by the native core (native/src/rows/queueing.rs); null on records built
    # otherwise, which analytics.stats then answers by its pandas rules.
    fetch_wait: str | None = None
    service_ms: float | None = None
    queue_ms: float | None = None
    inflight: int | None = None
    assumed_version: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class RowFlag(StrEnum):
    """Values of a row's ``flags`` (anomalies.py describes them)."""

    CAPTURE_GAP = "capture_gap"
    TRUNCATED = "truncated"
    NEGATIVE_LATENCY = "negative_latency"
    TLS = "tls"


CAPTURE_GAP = RowFlag.CAPTURE_GAP.value
TRUNCATED = RowFlag.TRUNCATED.value
# Decode notes of a side not captured whole (its body is not decoded).
REQUEST_INCOMPLETE = "request_incomplete"
RESPONSE_INCOMPLETE = "response_incomplete"
NEGATIVE_LATENCY = RowFlag.NEGATIVE_LATENCY.value
TLS = RowFlag.TLS.value

# A version newer than our specs is not broken bytes: the row keeps its status and
# says why it is not decoded in decode_error (like Wireshark's "unsupported version").
# Nor is a version the broker refused (messages.settle_refused).
NOT_MALFORMED_PREFIXES = ("unsupported_version", "version_refused")


def is_fatal(*decoded: Any) -> bool:
    """Does a decode error of these sides make the row ``malformed``?"""
    for d in decoded:
        error = getattr(d, "error", None) if d is not None else None
        if error and not error.startswith(NOT_MALFORMED_PREFIXES):
            return True
    return False
