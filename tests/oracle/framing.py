"""Stage 3: in-order bytes of one connection direction -> Kafka frames.

Every Kafka message on the wire is a big-endian int32 size followed by that many
bytes. A ``Framer`` cuts one direction's byte stream at those boundaries.

Losing sync is the hard part: after a TCP gap, or when the capture starts
mid-connection, the next bytes are usually not a size prefix. We then only try
frame starts at chunk (segment) starts, because Kafka clients and brokers write
each message with its own send call, and accept a candidate only when it is
plausible for the direction's role (see ``kafka_header``). Everything skipped is
counted.

A direction that never yields a Kafka frame although its bytes were tried and
rejected (HTTP on a Kafka port, say) is not Kafka: when it closes, what it had
counted as framing trouble (``bad_frame_size``, ``resync_skipped_bytes``...) is
taken back and its bytes are counted as ``non_kafka_bytes``, the direction as
``non_kafka_directions``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from dissector.accounting import Counters

# The broker's socket.request.max.bytes default; a bigger size prefix means we
# are not looking at a frame boundary (or at Kafka at all).
from dissector.options import DEFAULT_MAX_FRAME
from dissector.stages import Frame
from tests.oracle.tcp import Chunk, Endpoint

_SIZE = struct.Struct(">i")

# Bytes enough to judge a resync candidate: size prefix, request header and a
# client_id of ordinary length, or a response size and the next size prefix.
_PROBE_BYTES = 512

# Counts by which a direction shows that its bytes were tried as frames and refused.
_REJECTIONS = ("bad_frame_size", "resync_skipped_bytes")

# A TLS record starts with content type 0x14-0x17 and version 0x03 0x0N.
_TLS_CONTENT_TYPES = frozenset((0x14, 0x15, 0x16, 0x17))


StartCheck = Callable[[bytes, bytes], bool]
# The connection's check of a candidate's bytes after its size prefix: refused (False),
# or None while its correlation id is not all there (``Correlator.confirms_start``).
Confirm = Callable[[bytes], bool | None]
"""Is the probe window (first arg) a plausible frame start, given everything buffered
from it on (second arg)?"""


def looks_like_tls(buf: bytes | bytearray | memoryview) -> bool:
    return len(buf) >= 3 and buf[0] in _TLS_CONTENT_TYPES and buf[1] == 0x03 and buf[2] <= 0x04


@dataclass(slots=True)
class _Holed:
    """A frame a capture hole fell into after its size prefix was captured: where it
    ends, and so where the next frame starts, is known by sequence arithmetic (as
    Wireshark goes on with the next PDU after "previous segment not captured")."""

    prefix: bytes  # payload bytes before the first hole
    left: int  # bytes of the frame still to come
    first_ts: int
    first_frame: int
    last_ts: int
    last_frame: int
    after_gap: bool
    size: int  # the payload's size by its prefix
    missing: int = 0  # payload bytes not captured so far


class Framer:
    """Cuts one direction of one connection into size-prefixed frames."""

    __slots__ = (
        "_after_gap",
        "_buf",
        "_confirm",
        "_counters",
        "_fed",
        "_first_frame",
        "_first_ts",
        "_framed",
        "_holed",
        "_last_frame",
        "_last_ts",
        "_own",
        "_plausible",
        "_resync_pending",
        "_seen_ts",
        "_synced",
        "dst",
        "lost_at",
        "max_frame",
        "src",
        "stream",
        "tls",
    )

    def __init__(
        self,
        stream: int,
        src: Endpoint,
        dst: Endpoint,
        counters: Counters,
        plausible_start: StartCheck,
        max_frame: int = DEFAULT_MAX_FRAME,
        confirm: Confirm = lambda _payload: True,
    ) -> None:
        self.stream = stream
        self.src = src
        self.dst = dst
        self.max_frame = max_frame
        self.tls = False
        self._counters = counters
        self._plausible = plausible_start
        self._confirm = confirm
        self._buf = bytearray()
        self._holed: _Holed | None = None
        # Capture times of the packets around a hole that may have swallowed whole
        # frames (sync lost), and of the last chunk fed.
        self.lost_at: tuple[int, int] | None = None
        self._seen_ts = 0
        self._synced = True
        self._resync_pending = False
        self._after_gap = False
        self._first_ts = 0
        self._first_frame = 0
        # The latest-arriving packet (highest frame number) among the bytes of the
        # frame in ``_buf``: when the capture had all of them. After a hole the chunks
        # of held segments come with their own, older, times.
        self._last_ts = 0
        self._last_frame = -1
        self._fed = 0  # bytes fed outside TLS
        self._framed = False  # a frame was cut: this direction speaks Kafka
        # What this direction added to the shared counters before its first frame,
        # to take back if it turns out not to be Kafka at all.
        self._own: Counter[str] = Counter()

    def feed(self, chunk: Chunk) -> list[Frame]:
        if self.tls:
            self._counters.add("tls_bytes", len(chunk.data))
            return []
        # Bytes of this direction came before: a break in them is a hole, even one of
        # unknown size (a lost TLS record), not the start of a direction seen
        # mid-connection (its first frame says so: after_gap).
        had_bytes = self._fed > 0
        self._fed += len(chunk.data)
        out: list[Frame] = []
        before, self._seen_ts = self._seen_ts, chunk.ts_ns
        if chunk.resync and not self._bridge(chunk, out):
            self._lose_sync()
            if chunk.lost or had_bytes:
                self.lost_at = (before, chunk.ts_ns)
        if self._holed is not None:
            rest = self._fill_holed(chunk, out)
            if not rest:
                return out
            chunk = dataclasses.replace(chunk, data=rest)
        return out + self._feed(chunk) if out else self._feed(chunk)

    def _bridge(self, chunk: Chunk, out: list[Frame]) -> bool:
        """A hole of ``chunk.lost`` bytes before ``chunk``: bridged when it falls inside
        a frame whose size prefix was captured (True), or sync is lost (False). A hole
        running past that frame's end ends it too, and loses sync unless it ends exactly
        there."""
        lost = chunk.lost
        if not lost or not self._synced:
            self._end_holed(True, out)
            return False
        if self._holed is None:
            if len(self._buf) < 4:
                return False  # the hole is at (or in) a size prefix: the next is unknown
            (size,) = _SIZE.unpack_from(self._buf, 0)
            prefix = bytes(self._buf[4:])
            self._buf.clear()
            self._count("frames_cut_by_gap")
            self._holed = _Holed(
                prefix,
                max(size, 0) - len(prefix),
                self._first_ts,
                self._first_frame,
                self._last_ts,
                self._last_frame,
                self._after_gap,
                max(size, 0),
            )
            self._after_gap = False
        h = self._holed
        inside = min(lost, h.left)
        h.missing += inside
        h.left -= inside
        if h.left:
            return True
        self._end_holed(True, out)
        return lost == inside

    def _fill_holed(self, chunk: Chunk, out: list[Frame]) -> bytes:
        """Feed the holed frame the bytes it still expects; return the rest."""
        h = self._holed
        assert h is not None
        take = min(h.left, len(chunk.data))
        if take and chunk.frame > h.last_frame:
            h.last_ts, h.last_frame = chunk.ts_ns, chunk.frame
        h.left -= take
        if not h.left:
            self._end_holed(False, out)
        return chunk.data[take:]

    def _end_holed(self, end_lost: bool, out: list[Frame]) -> None:
        h = self._holed
        if h is None:
            return
        self._holed = None
        out.append(
            Frame(
                self.stream,
                self.src,
                self.dst,
                h.prefix,
                h.first_ts,
                h.last_ts,
                h.first_frame,
                h.last_frame,
                h.after_gap,
                # Everything not in the payload: lost, or captured after the first hole.
                missing=h.size - len(h.prefix),
                end_lost=end_lost or h.left > 0,
            )
        )
        self._framed = True

    def _feed(self, chunk: Chunk) -> list[Frame]:
        if not self._buf:
            self._first_ts, self._first_frame = chunk.ts_ns, chunk.frame
            self._last_ts, self._last_frame = chunk.ts_ns, chunk.frame
            if self._synced:
                whole = self._whole_frame(chunk)
                if whole is not None:
                    return [whole]
        if not self._synced:
            return self._probe(chunk)
        self._buf += chunk.data
        self._saw(chunk)
        return self._cut(chunk.ts_ns, chunk.frame)

    def _saw(self, chunk: Chunk) -> None:
        """``chunk``'s bytes joined the frame in ``_buf``."""
        if chunk.frame > self._last_frame:
            self._last_ts, self._last_frame = chunk.ts_ns, chunk.frame

    def _whole_frame(self, chunk: Chunk) -> Frame | None:
        """The chunk is exactly one frame (the usual case: one message per send and
        segment): cut it without going through the buffer. None otherwise."""
        data = chunk.data
        if len(data) < 4 or type(data) is not bytes:  # payloads are bytes: slice, not copy twice
            return None
        (size,) = _SIZE.unpack_from(data, 0)
        if size < 0 or size > self.max_frame or size + 4 != len(data):
            return None
        frame = Frame(
            self.stream,
            self.src,
            self.dst,
            data[4:],
            chunk.ts_ns,
            chunk.ts_ns,
            chunk.frame,
            chunk.frame,
            self._after_gap,
        )
        self._after_gap = False
        self._framed = True
        return frame

    def close(self) -> None:
        """End of this direction: a partial frame left over is counted, not lost silently."""
        if self._holed is not None:
            # Its end is beyond the capture: counted like any frame cut off by the end.
            self._count("truncated_frames")
            self._count("truncated_frame_bytes", 4 + len(self._holed.prefix))
            self._holed = None
        if self._buf and not self.tls:
            if self._synced:
                self._count("truncated_frames")
                self._count("truncated_frame_bytes", len(self._buf))
            else:
                self._count("resync_skipped_bytes", len(self._buf))
        self._buf.clear()
        if not self._framed and not self.tls and any(self._own[n] for n in _REJECTIONS):
            self._recount_as_non_kafka()

    def _count(self, name: str, n: int = 1) -> None:
        self._counters.add(name, n)
        if not self._framed:
            self._own[name] += n

    def _recount_as_non_kafka(self) -> None:
        counts = self._counters.counts
        for name, n in self._own.items():
            counts[name] -= n
            if counts[name] == 0:
                del counts[name]  # no "bad_frame_size=0" in the printed counters
        self._own.clear()
        self._counters.add("non_kafka_bytes", self._fed)
        self._counters.add("non_kafka_directions")

    def _lose_sync(self) -> None:
        if self._buf:
            if self._synced:
                self._count("frames_cut_by_gap")
            self._count("resync_skipped_bytes", len(self._buf))
            self._buf.clear()
        self._synced = False
        self._resync_pending = True

    def _probe(self, chunk: Chunk) -> list[Frame]:
        """Out of sync: ``_buf`` holds a candidate frame that began at a chunk start.

        The candidate grows until there are enough bytes to judge it (a header may
        arrive in several small segments); when it is rejected, the newest chunk's
        start is the next candidate.
        """
        if not self._buf and self._resync_pending and looks_like_tls(chunk.data):
            self._detect_tls(chunk.data)
            return []
        self._buf += chunk.data
        self._saw(chunk)
        verdict = self._judge(self._buf)
        if verdict is False and len(self._buf) > len(chunk.data):
            self._count("resync_skipped_bytes", len(self._buf) - len(chunk.data))
            self._buf[:] = chunk.data
            self._first_ts, self._first_frame = chunk.ts_ns, chunk.frame
            self._last_ts, self._last_frame = chunk.ts_ns, chunk.frame
            verdict = self._judge(self._buf)
        if verdict is None:
            return []
        if verdict is False:
            self._count("resync_skipped_bytes", len(self._buf))
            self._buf.clear()
            return []
        self._synced = True
        self._resync_pending = False
        self._after_gap = True
        self._count("resyncs")
        return self._cut(chunk.ts_ns, chunk.frame)

    def _judge(self, buf: bytearray) -> bool | None:
        """Is buf a plausible frame start: True, False, or None (need more bytes)? The
        connection must not refuse it either (``Correlator.confirms_start``), asked as
        soon as the candidate's correlation id is there."""
        if len(buf) < 4:
            return None
        (size,) = _SIZE.unpack_from(buf, 0)
        if size < 0 or size > self.max_frame:
            return False
        need = min(4 + size, _PROBE_BYTES)
        plausible = None
        if len(buf) >= need:
            window = bytes(buf[: max(need, min(len(buf), _PROBE_BYTES))])
            plausible = self._plausible(window, bytes(buf))
        if plausible is False:
            return False
        if self._confirm(bytes(buf[4:12])) is False:
            self._counters.add("resync_unconfirmed")
            return False
        return plausible

    def _detect_tls(self, data: bytes | bytearray) -> None:
        self.tls = True
        self._counters.add("tls_connections_directions")
        self._counters.add("tls_bytes", len(data))
        self._buf.clear()

    def _cut(self, ts_ns: int, frame_no: int) -> list[Frame]:
        buf = self._buf
        out: list[Frame] = []
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                rest = bytes(buf[pos:])
                if looks_like_tls(rest):
                    self._detect_tls(rest)
                    return out
                self._count("bad_frame_size")
                self._count("resync_skipped_bytes", len(rest))
                buf.clear()
                self._synced = False
                self._resync_pending = False
                return out
            end = pos + 4 + size
            if end > len(buf):
                break
            out.append(
                Frame(
                    self.stream,
                    self.src,
                    self.dst,
                    bytes(buf[pos + 4 : end]),
                    self._first_ts,
                    self._last_ts,
                    self._first_frame,
                    self._last_frame,
                    self._after_gap,
                )
            )
            self._after_gap = False
            self._framed = True
            pos = end
            # A following frame in the same chunk starts in this packet.
            self._first_ts, self._first_frame = ts_ns, frame_no
            self._last_ts, self._last_frame = ts_ns, frame_no
        if pos:
            del buf[:pos]
        return out
