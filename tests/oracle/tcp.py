"""Stage 2: TCP packets -> in-order byte chunks per connection direction.

Contract used by the later stages:

* ``Reassembler(counters).feed(packet)`` returns the events that packet
  releases; ``flush()`` releases what is left at the end of the capture.
* Events are ``StreamOpen``, ``Chunk`` and ``StreamClose``.
* ``reassemble(packets, counters)`` is the same as a generator.

Policies (what a dissector has to decide because the wire does not):

* Stream indexes are given in order of first appearance of a 4-tuple, like tshark's
  ``tcp.stream``. A SYN (without ACK) whose sequence number differs from the first
  one seen in that direction starts a new connection on the same 4-tuple (port
  reuse, tshark's rule): the old one gets ``StreamClose("reused")`` if still open.
* Overlapping data: **first data wins.** Bytes already delivered or buffered are
  never replaced by a later copy; a later copy that disagrees is counted
  (``tcp_overlap_conflict``). Delivered bytes are compared only against the last
  delivered segment (we do not keep history), so conflicts further back go uncounted.
* Out-of-order segments are buffered, bounded per direction (``max_buffered_bytes``)
  and across all connections (``max_total_buffered_bytes``). Over a bound, or once
  the peer has acknowledged past a hole in ``ack_gap_packets`` packets or for
  ``ack_gap_ns`` of capture time (the capture missed those bytes, the receiver did
  not), the hole is skipped: the next chunk has ``resync=True`` and ``lost`` = hole
  size, counted in ``tcp_gap_bytes``.
* A direction first seen without its SYN (capture started mid-connection) starts
  at the first sequence number seen; its first chunk has ``resync=True``.
* Keep-alives and zero-window probes (1 byte at or before the next expected sequence)
  are old data and never enter the stream twice.
* Snaplen-truncated segments deliver the bytes present; the missing ones are a gap.
* A connection closes after both FINs, once no hole is left before them; with holes
  left it waits ``close_grace_ns`` of capture time for late segments, then closes
  anyway (holes become gaps). After a plausible RST it waits ``rst_grace_ns``, because
  the peer's data already in flight crosses the RST on the wire. Packets of a closed
  connection keep its stream index (``last_stream``) but carry no more data
  (payload counted in ``tcp_after_close_bytes``). Closed connections are freed;
  only a bounded table of their 4-tuples is kept for the stream index.

Counter names: ``tcp_streams``, ``tcp_retransmission`` (packets whose data was all
seen), ``tcp_keepalive``, ``tcp_overlap`` (partly new packets), ``tcp_overlap_conflict``,
``tcp_out_of_order`` (segments buffered), ``tcp_gaps`` / ``tcp_gap_bytes`` (holes
skipped), ``tcp_buffer_limit`` / ``tcp_global_buffer_limit`` (skips forced by a bound),
``tcp_acked_gap`` (skips proven by ACKs), ``tcp_out_of_window`` (segment too far ahead,
dropped), ``tcp_port_reuse``, ``tcp_rst_ignored`` (RST far outside the window),
``tcp_after_close`` / ``tcp_after_close_bytes``, ``tcp_idle_close`` (closed by
``idle_timeout_ns``, off by default: a capture file's connections stay open until
FIN/RST or the end; live capture should set it to bound memory).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from dissector.accounting import Counters
from dissector.stages import Endpoint
from tests.oracle.capture import ACK, FIN, RST, SYN, Packet


@dataclass(slots=True)
class StreamOpen:
    stream: int  # connection index in this capture, like tshark's tcp.stream
    initiator: Endpoint  # SYN sender if the SYN was seen, else the first packet's source
    responder: Endpoint
    syn_seen: bool


@dataclass(slots=True)
class Chunk:
    stream: int
    src: Endpoint
    dst: Endpoint
    data: bytes  # in-order payload bytes for this direction
    ts_ns: int  # time of the packet that delivered (the last of) these bytes
    frame: int  # frame number of that packet
    resync: bool  # data does not continue the previous bytes of this direction
    lost: int = 0  # bytes known to be missing just before ``data`` (0 if unknown)


@dataclass(slots=True)
class StreamClose:
    stream: int
    reason: str  # fin | rst | reused | end_of_capture | idle (only with idle_timeout_ns)


Event = StreamOpen | Chunk | StreamClose

_M32 = 0xFFFFFFFF
_HALF = 1 << 31
# A segment starting this far beyond the next expected byte is not this connection's
# data (TCP windows are at most 1 GiB).
_MAX_AHEAD = 1 << 30
# An RST is believed if its sequence number is this close to the expected one; a
# receiver ignores RSTs far outside its window, so must we.
_RST_WINDOW = 1 << 24
_SWEEP_EVERY = 1024

DEFAULT_MAX_BUFFERED = 4 << 20
DEFAULT_MAX_TOTAL_BUFFERED = 256 << 20
DEFAULT_ACK_GAP_PACKETS = 16
DEFAULT_ACK_GAP_NS = 200_000_000
DEFAULT_CLOSE_GRACE_NS = 2_000_000_000
DEFAULT_RST_GRACE_NS = 1_000_000_000
DEFAULT_CLOSED_MEMORY = 1 << 16

# A buffered out-of-order segment: (start seq, data, bytes missing after it, ts, frame).
_Seg = tuple[int, bytes, int, int, int]


def _seg_seq(seg: _Seg) -> int:
    return seg[0]


class _Dir:
    """One direction of a connection: the sender's byte stream."""

    __slots__ = (
        "ack_count",
        "ack_hole",
        "ack_max",
        "ack_since",
        "ack_top",
        "base",
        "buffered",
        "conn",
        "dst",
        "fin",
        "key",
        "last_data",
        "last_seq",
        "lost",
        "next",
        "peer",
        "resync",
        "segs",
        "src",
        "syn",
    )

    def __init__(self, conn: _TcpConnection, key: tuple[str, int, str, int]) -> None:
        self.conn = conn
        self.key = key
        self.src = Endpoint(key[0], key[1])
        self.dst = Endpoint(key[2], key[3])
        self.peer: _Dir = self
        self.next: int | None = None  # unwrapped sequence number of the next byte
        self.base: int | None = None  # first 32-bit seq seen (the ISN if SYN seen)
        self.syn = False
        self.fin: int | None = None  # unwrapped seq where the FIN sits
        self.segs: list[_Seg] = []
        self.buffered = 0
        self.resync = False  # the next chunk does not continue the previous one
        self.lost = 0  # bytes skipped before the next chunk
        self.last_seq = 0  # last delivered segment, to check retransmitted copies
        self.last_data = b""
        # Peer packets acknowledging past our next byte (the capture lost bytes the
        # receiver got): how many since ``next`` was ``ack_hole``, since when, how far.
        self.ack_count = 0
        self.ack_hole = -1
        self.ack_since = 0
        self.ack_max = 0
        self.ack_top = 0  # the highest byte ever acknowledged past the next expected one

    def unwrap(self, seq: int) -> int:
        """The unwrapped sequence number nearest to ``next`` with these low 32 bits."""
        ref = self.next
        assert ref is not None
        return ref + (((seq - ref) + _HALF) & _M32) - _HALF


class _TcpConnection:
    """One TCP connection: its two directions, stream index and closing state."""

    __slots__ = ("a", "b", "closing_since", "last_ts", "rst", "stream")

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self.last_ts = 0  # capture time of the latest packet, for the idle timeout
        self.a: _Dir
        self.b: _Dir
        self.rst = False
        self.closing_since: int | None = None


class Reassembler:
    """Per-direction TCP reassembly with tshark-compatible stream indexes."""

    def __init__(
        self,
        counters: Counters,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED,
        *,
        max_total_buffered_bytes: int = DEFAULT_MAX_TOTAL_BUFFERED,
        ack_gap_packets: int = DEFAULT_ACK_GAP_PACKETS,
        ack_gap_ns: int = DEFAULT_ACK_GAP_NS,
        close_grace_ns: int = DEFAULT_CLOSE_GRACE_NS,
        rst_grace_ns: int = DEFAULT_RST_GRACE_NS,
        idle_timeout_ns: int | None = None,
        closed_memory: int = DEFAULT_CLOSED_MEMORY,
    ) -> None:
        self._counters = counters
        self._max_dir = max_buffered_bytes
        self._max_total = max_total_buffered_bytes
        self._ack_gap = ack_gap_packets
        self._ack_gap_ns = ack_gap_ns
        self._grace = close_grace_ns
        self._rst_grace = rst_grace_ns
        self._idle = idle_timeout_ns
        self._next_idle_sweep: int | None = None
        self._closed_memory = closed_memory
        self._dirs: dict[tuple[str, int, str, int], _Dir] = {}
        # 4-tuple -> (stream, first seq of that direction) of closed connections. An
        # OrderedDict: evicting the oldest from a plain dict rescans its deleted slots,
        # which turns quadratic over a long capture.
        self._closed: OrderedDict[tuple[str, int, str, int], tuple[int, int | None]] = OrderedDict()
        self._closing: dict[_TcpConnection, None] = {}
        self._next_stream = 0
        self._total = 0
        self._fed = 0
        self.last_stream = -1  # stream index of the last packet fed (tshark's tcp.stream)

    @property
    def open_connections(self) -> int:
        return len(self._dirs) // 2

    @property
    def buffered_bytes(self) -> int:
        return self._total

    # ------------------------------------------------------------------ public

    def feed(self, pkt: Packet) -> list[Event]:
        out: list[Event] = []
        self._fed += 1
        if self._closing and self._fed % _SWEEP_EVERY == 0:
            self._sweep(pkt.ts_ns, out)
        if self._idle is not None:
            self._idle_sweep(pkt.ts_ns, out)
        key = (pkt.src, pkt.sport, pkt.dst, pkt.dport)
        d = self._dirs.get(key)
        flags = pkt.flags
        if d is not None and d.conn.closing_since is not None:
            conn = d.conn
            if self._close_due(conn, pkt.ts_ns):
                # Past its grace: this packet comes after the close.
                self._close(conn, "rst" if conn.rst else "fin", out)
                d = None
        if d is None:
            d = self._lookup_closed(key, pkt)
            if d is None:
                return out
            self._open(d, pkt, out)
        elif flags & SYN and not flags & ACK and d.base is not None and pkt.seq != d.base:
            self._counters.add("tcp_port_reuse")
            self._close(d.conn, "rst" if d.conn.rst else "reused", out)
            d = self._new_conn(key)
            self._open(d, pkt, out)
        conn = d.conn
        self.last_stream = conn.stream
        conn.last_ts = pkt.ts_ns
        self._segment(d, pkt, out)
        if conn.closing_since is not None or (flags & (FIN | RST) and self._wants_close(conn)):
            self._try_close(conn, pkt.ts_ns, out)
        if self._total > self._max_total:
            self._relieve_global(out)
        return out

    def flush(self) -> list[Event]:
        """End of capture: release every connection's data (holes become gaps).

        A connection already closing (FIN both ways or RST, waiting for late segments)
        keeps that reason; the others close with ``end_of_capture``.
        """
        out: list[Event] = []
        seen: set[int] = set()
        for d in list(self._dirs.values()):
            conn = d.conn
            if conn.stream not in seen:
                seen.add(conn.stream)
                if self._wants_close(conn):
                    reason = "rst" if conn.rst else "fin"
                else:
                    reason = "end_of_capture"
                self._close(conn, reason, out)
        return out

    # ------------------------------------------------------------ connections

    def _new_conn(self, key: tuple[str, int, str, int]) -> _Dir:
        conn = _TcpConnection(self._next_stream)
        self._next_stream += 1
        self._counters.add("tcp_streams")
        d = _Dir(conn, key)
        peer = _Dir(conn, (key[2], key[3], key[0], key[1]))
        d.peer = peer
        peer.peer = d
        conn.a = d
        conn.b = peer
        self._dirs[key] = d
        self._dirs[peer.key] = peer
        return d

    def _lookup_closed(self, key: tuple[str, int, str, int], pkt: Packet) -> _Dir | None:
        """A packet of an unknown 4-tuple: new connection, or late packet of a closed one."""
        closed = self._closed.get(key)
        if closed is not None:
            stream, base = closed
            flags = pkt.flags
            new_syn = flags & SYN and not flags & ACK and pkt.seq != base
            if not new_syn:
                self.last_stream = stream
                if pkt.payload:
                    self._counters.add("tcp_after_close")
                    self._counters.add("tcp_after_close_bytes", len(pkt.payload))
                return None
            self._counters.add("tcp_port_reuse")
            self._closed.pop(key, None)
            self._closed.pop((key[2], key[3], key[0], key[1]), None)
        return self._new_conn(key)

    def _open(self, d: _Dir, pkt: Packet, out: list[Event]) -> None:
        flags = pkt.flags
        syn = bool(flags & SYN)
        if syn and flags & ACK:
            initiator, responder = d.dst, d.src
        else:
            initiator, responder = d.src, d.dst
        out.append(StreamOpen(d.conn.stream, initiator, responder, syn))

    def _wants_close(self, conn: _TcpConnection) -> bool:
        return conn.rst or (conn.a.fin is not None and conn.b.fin is not None)

    def _try_close(self, conn: _TcpConnection, now: int, out: list[Event]) -> None:
        if not self._wants_close(conn):
            return
        if conn.closing_since is None:
            conn.closing_since = now
            self._closing[conn] = None
        if self._close_due(conn, now):
            self._close(conn, "rst" if conn.rst else "fin", out)

    def _close_due(self, conn: _TcpConnection, now: int) -> bool:
        a, b = conn.a, conn.b
        complete = (
            not a.segs
            and not b.segs
            and (a.fin is None or (a.next is not None and a.next >= a.fin))
            and (b.fin is None or (b.next is not None and b.next >= b.fin))
        )
        if complete and not conn.rst:
            return True
        waited = now - (conn.closing_since if conn.closing_since is not None else now)
        return waited > (self._rst_grace if complete else self._grace)

    def _idle_sweep(self, now: int, out: list[Event]) -> None:
        """Close connections silent for ``idle_timeout_ns`` (live capture: bounded memory).

        Runs every quarter timeout of capture time, so its cost does not grow with
        the packet rate.
        """
        idle = self._idle
        assert idle is not None
        if self._next_idle_sweep is None:
            self._next_idle_sweep = now + idle // 4
            return
        if now < self._next_idle_sweep:
            return
        self._next_idle_sweep = now + idle // 4
        stale = {d.conn for d in self._dirs.values() if now - d.conn.last_ts > idle}
        for conn in sorted(stale, key=lambda c: c.stream):
            self._counters.add("tcp_idle_close")
            self._close(conn, "idle", out)

    def _sweep(self, now: int, out: list[Event]) -> None:
        for conn in list(self._closing):
            if self._close_due(conn, now):
                self._close(conn, "rst" if conn.rst else "fin", out)

    def _close(self, conn: _TcpConnection, reason: str, out: list[Event]) -> None:
        for d in (conn.a, conn.b):
            while d.segs:
                self._skip_hole(d, out)
            if d.next is None:
                continue
            # The last bytes never seen: before the FIN, or (no FIN seen) acknowledged
            # by the peer (the FIN takes a sequence number, not a byte). An empty chunk
            # with ``lost`` tells framing its last frames may be in that hole.
            acked = max(d.ack_top, d.next)
            end = d.fin if d.fin is not None else acked
            if end > d.next:
                self._counters.add("tcp_gaps")
                self._counters.add("tcp_gap_bytes", end - d.next)
                d.lost += end - d.next
                d.resync = True
                d.next = end
                self._emit(d, b"", conn.last_ts, 0, out)
        out.append(StreamClose(conn.stream, reason))
        self._closing.pop(conn, None)
        closed = self._closed
        for d in (conn.a, conn.b):
            if self._dirs.get(d.key) is d:
                del self._dirs[d.key]
            closed[d.key] = (conn.stream, d.base)
            closed.move_to_end(d.key)  # eviction is oldest first
        while len(closed) > self._closed_memory:
            closed.popitem(last=False)
        # Break the reference cycles so a closed connection is freed at once by
        # reference counting instead of waiting for the cyclic garbage collector.
        a, b = conn.a, conn.b
        del conn.a, conn.b, a.peer, b.peer

    # ---------------------------------------------------------------- segments

    def _segment(self, d: _Dir, pkt: Packet, out: list[Event]) -> None:
        flags = pkt.flags
        seq = pkt.seq
        if flags & SYN:
            if not d.syn:
                d.syn = True
                if d.next is None:
                    d.base = seq
                    d.next = seq + 1
            seq = (seq + 1) & _M32
        elif d.next is None:
            d.base = seq
            d.next = seq
            d.resync = True  # mid-connection: what came before is unknown
        payload = pkt.payload
        missing = pkt.missing
        peer = d.peer
        if flags & ACK:
            pnext = peer.next
            # Acknowledging more than the capture holds happens only when it lost bytes
            # (or reordered them): rare, so the check stays inline.
            if pnext is not None and (((pkt.ack - pnext) + _HALF) & _M32) - _HALF > 0:
                self._ack_evidence(peer, pkt.ack, pkt.ts_ns, out)
        if flags & RST:
            if abs(d.unwrap(seq) - d.next) > _RST_WINDOW:  # type: ignore[operator]
                self._counters.add("tcp_rst_ignored")
            else:
                d.conn.rst = True
            return  # data on an RST is diagnostic text, not stream bytes
        nxt: int = d.next  # type: ignore[assignment]
        if payload or missing:
            start = nxt + (((seq - nxt) + _HALF) & _M32) - _HALF  # unwrap, inlined: hot
            if start == nxt and not missing and not d.segs:
                # The common case, kept free of calls.
                d.next = nxt + len(payload)
                d.last_seq = nxt
                d.last_data = payload
                out.append(
                    Chunk(
                        d.conn.stream, d.src, d.dst, payload, pkt.ts_ns, pkt.frame, d.resync, d.lost
                    )
                )
                d.resync = False
                d.lost = 0
            elif start == nxt:
                self._deliver_in_order(d, payload, missing, pkt, out)
            elif start < nxt:
                self._old_data(d, start, payload, missing, pkt, out)
            elif start - nxt > _MAX_AHEAD:
                self._counters.add("tcp_out_of_window")
                return
            else:
                self._buffer(d, start, payload, missing, pkt.ts_ns, pkt.frame)
                self._counters.add("tcp_out_of_order")
                if d.ack_count and d.ack_hole == nxt:
                    self._skip_acked(d, pkt.ts_ns, out)
                if d.buffered > self._max_dir:
                    self._counters.add("tcp_buffer_limit")
                    while d.buffered > self._max_dir:
                        self._skip_hole(d, out)
            if flags & FIN and d.fin is None:
                d.fin = start + len(payload) + missing
        elif flags & FIN and d.fin is None:
            d.fin = d.unwrap(seq)

    def _deliver_in_order(
        self, d: _Dir, payload: bytes, missing: int, pkt: Packet, out: list[Event]
    ) -> None:
        start: int = d.next  # type: ignore[assignment]
        end = start + len(payload)
        segs = d.segs
        if segs and segs[0][0] < end:
            # Overlaps bytes buffered earlier: first data wins, so merge via the buffer.
            self._buffer(d, start, payload, missing, pkt.ts_ns, pkt.frame)
            self._drain(d, out)
            return
        d.next = end
        if payload:
            d.last_seq = start
            d.last_data = payload
        if missing:
            if payload:
                self._emit(d, payload, pkt.ts_ns, pkt.frame, out)
            self._lose_after(d, end + missing, pkt.ts_ns, pkt.frame, out)
            if segs:
                self._drain(d, out)
        elif segs and segs[0][0] == end:
            # Fills the hole: this packet's chunk, then the buffered ones.
            self._drain(d, out, payload, pkt.ts_ns, pkt.frame)
        elif payload:
            self._emit(d, payload, pkt.ts_ns, pkt.frame, out)

    def _old_data(
        self, d: _Dir, start: int, payload: bytes, missing: int, pkt: Packet, out: list[Event]
    ) -> None:
        """A segment starting before the next expected byte: retransmission or overlap."""
        nxt: int = d.next  # type: ignore[assignment]
        end = start + len(payload)
        if end + missing <= nxt and len(payload) <= 1 and start == nxt - 1:
            # Keep-alive: its byte (if any) is filler, often zero, not a conflicting copy.
            self._counters.add("tcp_keepalive")
            return
        self._check_delivered(d, start, payload)
        if end + missing <= nxt:
            self._counters.add("tcp_retransmission")
            return
        self._counters.add("tcp_overlap")
        if end > nxt:
            fresh = payload[nxt - start :]
            buffered = d.segs
            if buffered and buffered[0][0] < end:
                # Later bytes are already buffered: first data wins, so only fill the hole.
                self._buffer(d, nxt, fresh, missing, pkt.ts_ns, pkt.frame)
                self._drain(d, out)
                return
            self._deliver_in_order(d, fresh, missing, pkt, out)
        else:
            self._lose_after(d, end + missing, pkt.ts_ns, pkt.frame, out)
            if d.segs:
                self._drain(d, out)

    def _check_delivered(self, d: _Dir, start: int, payload: bytes) -> None:
        """Count a retransmitted copy that disagrees with the last delivered segment."""
        last = d.last_data
        lo = max(start, d.last_seq)
        hi = min(start + len(payload), d.last_seq + len(last), d.next)  # type: ignore[type-var]
        if hi > lo and payload[lo - start : hi - start] != last[lo - d.last_seq : hi - d.last_seq]:
            self._counters.add("tcp_overlap_conflict")

    def _lose_after(self, d: _Dir, target: int, ts_ns: int, frame: int, out: list[Event]) -> None:
        """Bytes up to ``target`` are known to be missing (cut by the snap length from
        the packet ``ts_ns``/``frame``): skip them, and say so at once with an empty chunk
        of that packet, so that framing can end a frame cut there."""
        nxt: int = d.next  # type: ignore[assignment]
        if d.segs and d.segs[0][0] < target:
            target = d.segs[0][0]
        if target > nxt:
            self._counters.add("tcp_gaps")
            self._counters.add("tcp_gap_bytes", target - nxt)
            d.lost += target - nxt
            d.resync = True
            d.next = target
            self._emit(d, b"", ts_ns, frame, out)

    def _emit(self, d: _Dir, data: bytes, ts_ns: int, frame: int, out: list[Event]) -> None:
        out.append(Chunk(d.conn.stream, d.src, d.dst, data, ts_ns, frame, d.resync, d.lost))
        d.resync = False
        d.lost = 0

    def _buffer(
        self, d: _Dir, start: int, data: bytes, missing: int, ts_ns: int, frame: int
    ) -> None:
        """Insert an out-of-order segment, keeping buffered segments disjoint."""
        segs = d.segs
        end = start + len(data)
        i = bisect_left(segs, start, key=_seg_seq)
        pieces: list[_Seg] = []
        cur = start
        if i > 0:
            pseq, pdata, _pm, _pt, _pf = segs[i - 1]
            pend = pseq + len(pdata)
            if pend > cur:
                self._compare(pdata, pseq, data, start, cur, min(pend, end))
                cur = min(pend, end)
        j = i
        while cur < end and j < len(segs) and segs[j][0] < end:
            nseq, ndata, _nm, _nt, _nf = segs[j]
            if nseq > cur:
                pieces.append((cur, data[cur - start : nseq - start], 0, ts_ns, frame))
            nend = nseq + len(ndata)
            self._compare(ndata, nseq, data, start, nseq, min(nend, end))
            cur = max(cur, nend)
            j += 1
        if cur < end:
            pieces.append((cur, data[cur - start :], missing, ts_ns, frame))
        elif missing and cur == end:
            pieces.append((end, b"", missing, ts_ns, frame))
        if not pieces:
            self._counters.add("tcp_retransmission")
            return
        for piece in pieces:
            k = bisect_left(segs, piece[0], key=_seg_seq)
            segs.insert(k, piece)
            size = len(piece[1])
            d.buffered += size
            self._total += size

    def _compare(
        self, old: bytes, old_start: int, new: bytes, new_start: int, lo: int, hi: int
    ) -> None:
        if hi > lo and old[lo - old_start : hi - old_start] != new[lo - new_start : hi - new_start]:
            self._counters.add("tcp_overlap_conflict")

    def _drain(
        self,
        d: _Dir,
        out: list[Event],
        lead: bytes = b"",
        ts_ns: int = -1,
        frame: int = -1,
    ) -> None:
        """Release buffered segments that now continue the stream, after ``lead`` (bytes
        just delivered by the packet ``ts_ns``/``frame``).

        Every packet's bytes go out as a chunk of their own, with that packet's time:
        framing times a frame by the packets that carried its bytes.
        """
        segs = d.segs
        if lead:
            self._emit(d, lead, ts_ns, frame, out)
        while segs and segs[0][0] <= d.next:  # type: ignore[operator]
            sseq, sdata, smissing, sts, sframe = segs.pop(0)
            size = len(sdata)
            d.buffered -= size
            self._total -= size
            nxt: int = d.next  # type: ignore[assignment]
            send = sseq + size
            if send > nxt:
                piece = sdata[nxt - sseq :] if nxt > sseq else sdata
                d.last_seq = nxt
                d.last_data = piece
                d.next = send
                self._emit(d, piece, sts, sframe, out)
            if smissing:
                self._lose_after(d, send + smissing, sts, sframe, out)

    def _skip_hole(self, d: _Dir, out: list[Event]) -> None:
        """Give up on the bytes before the first buffered segment and release what follows."""
        first = d.segs[0][0]
        nxt: int = d.next  # type: ignore[assignment]
        if first > nxt:
            self._counters.add("tcp_gaps")
            self._counters.add("tcp_gap_bytes", first - nxt)
            d.lost += first - nxt
            d.resync = True
            d.next = first
        self._drain(d, out)

    def _ack_evidence(self, d: _Dir, ack: int, now: int, out: list[Event]) -> None:
        """The peer acknowledged bytes of ``d`` beyond its next expected byte."""
        target = d.unwrap(ack)
        if d.ack_hole != d.next:
            d.ack_hole = d.next  # type: ignore[assignment]
            d.ack_count = 0
            d.ack_since = now
            d.ack_max = target
        d.ack_count += 1
        d.ack_max = max(d.ack_max, target)
        d.ack_top = max(d.ack_top, target)
        if d.segs:
            self._skip_acked(d, now, out)

    def _skip_acked(self, d: _Dir, now: int, out: list[Event]) -> None:
        """Skip holes the peer acknowledged, once the evidence outlasts reordering.

        Reordering in a capture spans a few packets and microseconds; evidence from
        ``ack_gap_packets`` peer packets or ``ack_gap_ns`` of capture time means the
        bytes were lost by the capture, not late.
        """
        if d.ack_count >= self._ack_gap or now - d.ack_since >= self._ack_gap_ns:
            self._counters.add("tcp_acked_gap")
            target = d.ack_max
            while d.segs and d.next < target:  # type: ignore[operator]
                self._skip_hole(d, out)

    def _relieve_global(self, out: list[Event]) -> None:
        """Over the global bound: skip the holes of the direction holding most bytes."""
        self._counters.add("tcp_global_buffer_limit")
        while self._total > self._max_total:
            worst = max(self._dirs.values(), key=lambda x: x.buffered)
            if not worst.segs:
                return
            while worst.segs:
                self._skip_hole(worst, out)


def reassemble(packets: Iterable[Packet], counters: Counters, **options: Any) -> Iterator[Event]:
    """Every event of a packet source, ending with the end-of-capture flush.

    ``options`` are ``Reassembler``'s keyword arguments.
    """
    r = Reassembler(counters, **options)
    for pkt in packets:
        yield from r.feed(pkt)
    yield from r.flush()
