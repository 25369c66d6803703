"""Just enough of the Kafka request/response headers to correlate frames.

Correlation needs api_key, api_version, correlation_id and client_id, which sit
at the same offsets in request header v1 and v2 (client_id is a classic
nullable string even in flexible header v2), plus Produce's ``acks`` to know
that no response will come. Full header and body decoding is the protocol
stage's job.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

# The API keys live with the protocol model; named here as plain ints for the oracle's
# users (the native correlator's tests hand them to Rust).
from dissector.protocol.keys import ApiKey

CONTROLLED_SHUTDOWN = int(ApiKey.CONTROLLED_SHUTDOWN)
PRODUCE = int(ApiKey.PRODUCE)
SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)

_REQ_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")


VersionCheck = Callable[[int, int], bool]
"""Does (api_key, api_version) exist in the protocol we know?"""


@dataclass(slots=True, frozen=True)
class RequestStart:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_end: int  # offset after client_id (before header v2 tagged fields)


def peek_request(payload: bytes) -> RequestStart | None:
    """The correlation-relevant part of a request header, or None if too short."""
    if len(payload) < 8:
        return None
    if len(payload) < _REQ_FIXED.size:
        api_key, api_version = _INT16.unpack_from(payload, 0)[0], _INT16.unpack_from(payload, 2)[0]
        if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
            return RequestStart(api_key, api_version, _INT32.unpack_from(payload, 4)[0], None, 8)
        return None
    api_key, api_version, correlation_id, id_len = _REQ_FIXED.unpack_from(payload, 0)
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        # The one request with header v0: no client_id at all.
        return RequestStart(api_key, api_version, correlation_id, None, 8)
    if id_len < 0:
        return RequestStart(api_key, api_version, correlation_id, None, 10)
    end = 10 + id_len
    if end > len(payload):
        return None
    client_id = payload[10:end].decode("utf-8", "replace")
    return RequestStart(api_key, api_version, correlation_id, client_id, end)


def peek_request_cut(payload: bytes) -> RequestStart | None:
    """The request header of a frame not captured whole: as ``peek_request``, but a
    client_id cut off by the hole or the snap length is left out (None)."""
    start = peek_request(payload)
    if start is None and len(payload) >= 8:
        api_key, api_version = _INT16.unpack_from(payload, 0)[0], _INT16.unpack_from(payload, 2)[0]
        return RequestStart(
            api_key, api_version, _INT32.unpack_from(payload, 4)[0], None, len(payload)
        )
    return start


def peek_correlation_id(payload: bytes) -> int | None:
    if len(payload) < 4:
        return None
    return _INT32.unpack_from(payload, 0)[0]


def is_plausible_request(payload: bytes, known: VersionCheck) -> bool:
    """Strict test that a frame is a Kafka request, for finding Kafka on unknown ports."""
    start = peek_request(payload)
    if start is None or start.correlation_id < 0 or not known(start.api_key, start.api_version):
        return False
    cid = start.client_id
    return cid is None or cid.isprintable()


def is_request_like(payload: bytes, known_key: Callable[[int], bool]) -> int | None:
    """The correlation id of a request header of a known API, whatever its version, with
    the checks of ``is_plausible_request`` on correlation id and client id; weaker than
    that test, so only used to match a response to it."""
    start = peek_request(payload)
    if start is None or start.correlation_id < 0 or not known_key(start.api_key):
        return None
    cid = start.client_id
    return start.correlation_id if cid is None or cid.isprintable() else None


def request_start_check(known: VersionCheck) -> Callable[[bytes, bytes], bool]:
    """A framing resync check for the client->broker direction."""

    def check(buf: bytes, full: bytes) -> bool:
        if len(buf) < 4:
            return False
        size = _INT32.unpack_from(buf, 0)[0]
        return size >= 8 and is_plausible_request(buf[4 : 4 + size], known)

    return check


def response_start_check(max_frame: int) -> Callable[[bytes, bytes], bool]:
    """A framing resync check for the broker->client direction.

    Responses carry no type, so we accept a sane size that ends at or beyond the
    bytes we have (a response spanning several segments), or is followed by
    another sane size prefix.
    """

    def check(buf: bytes, full: bytes) -> bool:
        if len(buf) < 8:
            return False
        size = _INT32.unpack_from(buf, 0)[0]
        if size < 4 or size > max_frame:
            return False
        end = 4 + size
        if len(full) - end < 4:
            # Ends at (or just before) the data we have: nothing after it to check.
            return True
        # The next prefix may lie beyond the probe window: read from all that is buffered.
        nxt = _INT32.unpack_from(full, end)[0]
        return 4 <= nxt <= max_frame

    return check


def either_start_check(known: VersionCheck, max_frame: int) -> Callable[[bytes, bytes], bool]:
    req, resp = request_start_check(known), response_start_check(max_frame)
    return lambda buf, full: req(buf, full) or resp(buf, full)


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def produce_acks(payload: bytes, start: RequestStart, flexible: bool) -> int | None:
    """Produce's ``acks`` field, or None when the bytes do not allow reading it.

    v0-2: acks follows the header. v3+: a transactional_id string precedes it;
    flexible versions (v9+) add header tagged fields and a compact string.
    """
    if start.api_key != PRODUCE:
        return None
    try:
        pos = start.header_end
        if flexible:
            n_tags, pos = _read_uvarint(payload, pos)
            for _ in range(n_tags):
                _tag, pos = _read_uvarint(payload, pos)
                size, pos = _read_uvarint(payload, pos)
                pos += size
        if start.api_version >= 3:
            if flexible:
                length, pos = _read_uvarint(payload, pos)
                pos += max(length - 1, 0)
            else:
                (length,) = _INT16.unpack_from(payload, pos)
                pos += 2 + max(length, 0)
        return _INT16.unpack_from(payload, pos)[0]
    except (ValueError, struct.error):
        return None
