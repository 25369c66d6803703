"""Stage 1: capture files (and live sources) -> TCP packets.

Contract used by the later stages:

* ``Packet`` is one captured TCP segment with its IP endpoints.
* ``read_packets(path, counters)`` yields the TCP packets of a pcap or pcapng file
  (format detected by magic, not extension; gzip-compressed too) in capture order.
  Non-TCP frames and frames that cannot be parsed are counted in ``counters``, never
  raised.
* A packet source is any iterable of ``Packet`` (``PacketSource``). Live capture builds
  one with ``decode_frames`` from ``(linktype, ts_ns, frame_bytes)`` tuples.

Why our own file readers instead of ``dpkt.pcap``/``dpkt.pcapng``: dpkt's pcapng reader
applies the first interface's link type and ``if_tsresol`` to every interface and both
readers return float seconds, whose 53-bit mantissa cannot hold today's epoch times to
the nanosecond. The formats are small, so a struct-based reader is both exact and
faster; the link, IP and TCP headers are likewise parsed with ``struct``/byte indexing,
because building dpkt objects per frame costs about 5x more (measured by
``benchmarks/capture_speed.py``: 87k vs 426k packets/s).

Counter names added here (all per frame unless noted):

``frames`` every packet record read; ``bytes_read`` file bytes read (per chunk);
``tcp_packets`` packets yielded;
``non_ip``, ``non_tcp``, ``unknown_linktype``, ``bad_link_header``, ``bad_ip_header``,
``bad_tcp_header``, ``ip_fragment`` (IPv4 or IPv6 fragment, not reassembled);
``snaplen_truncated`` (payload cut by the snaplen); ``caplen_exceeds_wire_len``
(record claims more captured than wire bytes, as go-sniffer writes);
``ip_total_length_zero`` (TSO capture: length taken from the frame);
file level: ``truncated_file`` (partial last record), ``bad_record`` (impossible
record/block length; reading stops when the next record cannot be located),
``pcapng_unknown_interface``, ``pcapng_simple_packet_block`` (no timestamp: ts_ns is 0),
``read_error`` (the file could not be read further, e.g. a corrupt gzip stream).
"""

from __future__ import annotations

import gzip
import socket
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from dissector.accounting import Counters
from dissector.stages import CaptureError

FIN = 0x01
SYN = 0x02
RST = 0x04
PSH = 0x08
ACK = 0x10


@dataclass(slots=True)
class Packet:
    frame: int  # 1-based position in the capture, as tshark's frame.number
    ts_ns: int  # capture time, nanoseconds since the Unix epoch (UTC)
    src: str  # IP address as text
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int  # TCP flags byte
    payload: bytes  # TCP payload bytes present in the capture
    missing: int = 0  # payload bytes the IP length announces but the snaplen cut off


PacketSource = Iterable[Packet]
"""Anything yielding ``Packet`` in capture order: a file reader or a live capture."""

Frame = tuple[int, int, bytes]
"""One link-layer record: (linktype, ts_ns, bytes as captured)."""

# Link types (tcpdump.org LINKTYPE_* values as stored in files).
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_BSD12 = 12  # DLT_RAW on some BSDs, seen in files
LINKTYPE_RAW_BSD14 = 14  # DLT_RAW on OpenBSD, seen in files
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108  # OpenBSD loopback: like NULL but always big-endian
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

_SLL_LINKTYPES = frozenset({LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2})
_NULL_LINKTYPES = frozenset({LINKTYPE_NULL, LINKTYPE_LOOP})
# Raw IP: the version nibble tells IPv4 from IPv6 (228/229 promise one, we still check).
_RAW_LINKTYPES = frozenset(
    {LINKTYPE_RAW, LINKTYPE_RAW_BSD12, LINKTYPE_RAW_BSD14, LINKTYPE_IPV4, LINKTYPE_IPV6}
)

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_VLAN_TPIDS = frozenset({0x8100, 0x88A8, 0x9100, 0x9200})
# BSD loopback address families meaning IPv6 differ by OS: NetBSD/OpenBSD 24,
# FreeBSD 28, macOS 30.
_NULL_AF_INET = 2
_NULL_AF_INET6 = frozenset({24, 28, 30})

_IP_PROTO_TCP = 6
# IPv6 extension headers we can step over: (hdr ext len + 1) * 8 bytes each.
_IPV6_EXT_8 = frozenset({0, 43, 60})  # hop-by-hop, routing, destination options
_IPV6_FRAGMENT = 44
_IPV6_AH = 51  # length counts 4-byte units, minus 2

_TCP_HEAD = struct.Struct("!HHIIH")
# IPv4 fixed header: version/IHL, total length, flags/fragment offset, protocol, addresses.
_IPV4_HEAD = struct.Struct("!B1xH2xH1xB2x8s")

_MAX_RECORD = 64 * 1024 * 1024  # larger "captured length" means a corrupt file
_CHUNK = 1 << 20
_COUNT_FLUSH = 4096  # hot counters are kept in locals and published this often

_PCAP_MAGICS: dict[bytes, tuple[str, int, int]] = {
    # magic as stored -> (byte order, ns per fraction unit, record header size)
    b"\xd4\xc3\xb2\xa1": ("<", 1000, 16),
    b"\xa1\xb2\xc3\xd4": (">", 1000, 16),
    b"\x4d\x3c\xb2\xa1": ("<", 1, 16),
    b"\xa1\xb2\x3c\x4d": (">", 1, 16),
    # Kuznetzov's "modified" pcap: 8 more bytes per record header.
    b"\x34\xcd\xb2\xa1": ("<", 1000, 24),
    b"\xa1\xb2\xcd\x34": (">", 1000, 24),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_GZIP_MAGIC = b"\x1f\x8b"

_BT_IDB = 1
_BT_PB = 2  # obsolete Packet Block
_BT_SPB = 3
_BT_EPB = 6
_BT_SHB = 0x0A0D0D0A
_PACKET_BLOCKS = frozenset({_BT_EPB, _BT_PB})
_OPT_IF_TSRESOL = 9
_OPT_IF_TSOFFSET = 14


def _tsresol_to_ratio(value: int) -> tuple[int, int]:
    """Map a pcapng if_tsresol byte to an exact (multiplier, divisor) giving ns."""
    exponent = value & 0x7F
    if value & 0x80:
        return 10**9, 1 << exponent
    if exponent <= 9:
        return 10 ** (9 - exponent), 1
    return 1, 10 ** (exponent - 9)


# ---------------------------------------------------------------------------
# Record readers: file object -> Frame tuples


class _ChunkReader:
    """A file read in large chunks, so records are sliced from memory."""

    __slots__ = ("buf", "counters", "error", "pos", "read")

    def __init__(self, f: BinaryIO, initial: bytes, counters: Counters) -> None:
        # read1: a gzip stream cut short still yields what decompressed before the cut.
        self.read = getattr(f, "read1", f.read)
        self.counters = counters  # bytes_read drives progress displays
        self.buf = initial
        self.pos = 0
        self.error = False  # reading failed (I/O error, corrupt gzip): treated as the end

    def ensure(self, n: int) -> bool:
        """Make ``n`` bytes available at ``pos``; False if the file ends first."""
        have = len(self.buf) - self.pos
        if have >= n:
            return True
        parts = [self.buf[self.pos :]]
        want = max(n - have, _CHUNK)
        while have < n:
            try:
                more = self.read(want)
            except (OSError, EOFError, zlib.error):
                self.error = True
                break
            if not more:
                break
            self.counters.add("bytes_read", len(more))
            parts.append(more)
            have += len(more)
        self.buf = b"".join(parts)
        self.pos = 0
        return have >= n


def _pcap_frames(reader: _ChunkReader, header: bytes, counters: Counters) -> Iterator[Frame]:
    order, frac_ns, rec_len = _PCAP_MAGICS[header[:4]]
    # The upper bits of the link type field carry FCS info; the type is the low 16.
    linktype = struct.unpack(order + "I", header[20:24])[0] & 0xFFFF
    unpack_from = struct.Struct(order + "IIII").unpack_from
    oversize = 0
    buf = reader.buf
    pos = reader.pos
    try:
        while True:
            end = pos + rec_len
            if end > len(buf):
                reader.pos = pos
                if not reader.ensure(rec_len):
                    if len(reader.buf) - reader.pos:
                        counters.add("truncated_file")
                    return
                buf = reader.buf
                pos = 0
            sec, frac, incl, orig = unpack_from(buf, pos)
            if incl > _MAX_RECORD:
                counters.add("bad_record")
                return
            start = pos + rec_len
            end = start + incl
            if end > len(buf):
                reader.pos = pos
                if not reader.ensure(rec_len + incl):
                    counters.add("truncated_file")
                    return
                buf = reader.buf
                start = rec_len
                end = start + incl
            pos = end
            if incl > orig:
                oversize += 1
            yield linktype, sec * 1_000_000_000 + frac * frac_ns, buf[start:end]
    finally:
        if oversize:
            counters.add("caplen_exceeds_wire_len", oversize)


def _parse_idb(body: bytes, order: str) -> tuple[int, int, int, int]:
    """(linktype, ts multiplier, ts divisor, ts offset ns) of an IDB body."""
    linktype = struct.unpack_from(order + "H", body, 0)[0]
    mul, div, offset_ns = 1000, 1, 0  # default resolution: microseconds
    pos = 8
    end = len(body) - 4  # trailing block length copy
    while pos + 4 <= end:
        code, length = struct.unpack_from(order + "HH", body, pos)
        if code == 0:
            break
        value = body[pos + 4 : pos + 4 + length]
        if code == _OPT_IF_TSRESOL and length >= 1:
            mul, div = _tsresol_to_ratio(value[0])
        elif code == _OPT_IF_TSOFFSET and length == 8:
            offset_ns = struct.unpack(order + "q", value)[0] * 1_000_000_000
        pos += 4 + ((length + 3) & ~3)
    return linktype, mul, div, offset_ns


def _interface(
    interfaces: list[tuple[int, int, int, int]], iface_id: int
) -> tuple[int, int, int, int]:
    """The interface a packet names; one never described reads as the first one, or as
    Ethernet with microsecond times (pcapng's default resolution) when there is none."""
    if iface_id < len(interfaces):
        return interfaces[iface_id]
    return interfaces[0] if interfaces else (1, 1000, 1, 0)


def _pcapng_frames(reader: _ChunkReader, counters: Counters) -> Iterator[Frame]:
    order = "<"
    # Per interface: (linktype, ts multiplier, ts divisor, ts offset ns).
    interfaces: list[tuple[int, int, int, int]] = []
    head = struct.Struct("<II").unpack_from
    # Block type and length plus, for an EPB, its fixed fields: one unpack per packet.
    head_epb = struct.Struct("<IIIIIII").unpack_from
    buf = reader.buf
    pos = reader.pos
    while True:
        if len(buf) - pos >= 28:
            btype, blen, iface_id, ts_hi, ts_lo, caplen, _orig = head_epb(buf, pos)
        else:
            reader.pos = pos
            if not reader.ensure(28) and len(reader.buf) - reader.pos < 12:
                if len(reader.buf) - reader.pos:
                    counters.add("truncated_file")
                return
            buf = reader.buf
            pos = 0
            if len(buf) >= 28:
                btype, blen, iface_id, ts_hi, ts_lo, caplen, _orig = head_epb(buf, pos)
            else:  # a short last block: no packet block fits here
                btype, blen = head(buf, pos)
        if btype == _BT_SHB:
            # The byte-order magic decides how this section (and its length) reads.
            bom = buf[pos + 8 : pos + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                order = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                order = ">"
            else:
                counters.add("bad_record")
                return
            head = struct.Struct(order + "II").unpack_from
            head_epb = struct.Struct(order + "IIIIIII").unpack_from
            btype, blen = head(buf, pos)
            interfaces = []
        if blen < 12 or blen % 4 or blen > _MAX_RECORD:
            counters.add("bad_record")
            return
        end = pos + blen
        if end > len(buf):
            reader.pos = pos
            if not reader.ensure(blen):
                counters.add("truncated_file")
                return
            buf = reader.buf
            pos = 0
            end = blen
        if btype in _PACKET_BLOCKS:
            if blen < 32:
                counters.add("bad_record")
                pos = end
                continue
            if btype == _BT_PB:
                # Obsolete layout: a 16-bit interface id, then a 16-bit drop count.
                iface_id = struct.unpack_from(order + "H", buf, pos + 8)[0]
            if caplen > blen - 32:
                counters.add("bad_record")
                pos = end
                continue
            if caplen > _orig:
                counters.add("caplen_exceeds_wire_len")
            if iface_id >= len(interfaces):
                counters.add("pcapng_unknown_interface")
            linktype, mul, div, offset = _interface(interfaces, iface_id)
            start = pos + 28
            pos = end
            yield (
                linktype,
                ((ts_hi << 32) | ts_lo) * mul // div + offset,
                buf[start : start + caplen],
            )
        elif btype == _BT_SPB:
            start = pos + 12
            pos = end
            if blen < 16:
                counters.add("bad_record")
                continue
            if not interfaces:
                counters.add("pcapng_unknown_interface")
            orig = struct.unpack_from(order + "I", buf, start - 4)[0]
            counters.add("pcapng_simple_packet_block")
            yield _interface(interfaces, 0)[0], 0, buf[start : start + min(orig, blen - 16)]
        elif btype == _BT_IDB:
            if blen < 20:
                counters.add("bad_record")
                return
            interfaces.append(_parse_idb(buf[pos + 8 : end], order))
            pos = end
        else:
            # Other blocks (name resolution, statistics, custom, ...) carry no packets.
            pos = end


def _open(path: str) -> tuple[BinaryIO, bytes]:
    """Open ``path`` (transparently gunzipping) and return it with its first 24 bytes."""
    try:
        f: BinaryIO = open(path, "rb")  # noqa: SIM115 - handed over to the generator
    except OSError as exc:
        raise CaptureError(f"{path}: cannot open: {exc.strerror or exc}") from exc
    try:
        head = f.read(24)
        if head[:2] == _GZIP_MAGIC:
            f.close()
            f = gzip.open(path, "rb")  # type: ignore[assignment]  # noqa: SIM115
            head = f.read(24)
    except (OSError, EOFError) as exc:
        f.close()
        raise CaptureError(f"{path}: cannot read: {exc}") from exc
    return f, head


def _check_header(path: str, head: bytes) -> str:
    """Return "pcap" or "pcapng", or raise CaptureError saying what is wrong."""
    if head[:4] in _PCAP_MAGICS:
        if len(head) < 24:
            raise CaptureError(f"{path}: pcap file header is truncated ({len(head)} of 24 bytes)")
        return "pcap"
    if head[:4] == _PCAPNG_SHB:
        if len(head) < 12 or head[8:12] not in (b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d"):
            raise CaptureError(
                f"{path}: pcapng section header is truncated or has a bad byte order"
            )
        return "pcapng"
    if not head:
        raise CaptureError(f"{path}: empty file, not a pcap or pcapng capture")
    raise CaptureError(
        f"{path}: not a pcap or pcapng capture (starts with {head[:4].hex()}, "
        "expected pcap magic a1b2c3d4/a1b23c4d or pcapng 0a0d0d0a)"
    )


def iter_frames(path: str, counters: Counters) -> Iterator[Frame]:
    """Yield every packet record of a capture file as ``(linktype, ts_ns, data)``.

    Raises ``CaptureError`` at once (not on first ``next``) for a non-capture file.
    """
    f, head = _open(path)
    try:
        kind = _check_header(path, head)
    except CaptureError:
        f.close()
        raise
    return _frames_owning(f, head, kind, counters)


def _frames_owning(f: BinaryIO, head: bytes, kind: str, counters: Counters) -> Iterator[Frame]:
    with f:
        reader = _ChunkReader(f, head[24:] if kind == "pcap" else head, counters)
        if kind == "pcap":
            yield from _pcap_frames(reader, head, counters)
        else:
            yield from _pcapng_frames(reader, counters)
        if reader.error:
            counters.add("read_error")


# ---------------------------------------------------------------------------
# Frame decoding: link layer -> IP -> TCP


def _skip_vlan_tags(
    data: bytes, off: int, etype: int, counters: Counters
) -> tuple[int, int] | None:
    """(inner ethertype, its offset) past 802.1Q/QinQ tags starting at ``off``."""
    while etype in _VLAN_TPIDS:
        if len(data) < off + 4:
            counters.add("bad_link_header")
            return None
        etype = (data[off + 2] << 8) | data[off + 3]
        off += 4
    return etype, off


def parse_frame(
    linktype: int,
    data: bytes,
    frame: int,
    ts_ns: int,
    counters: Counters,
    addr_cache: dict[bytes, tuple[str, str]] | None = None,
) -> Packet | None:
    """Decode one link-layer frame into a ``Packet``; count and return None if not TCP.

    ``addr_cache`` (address pair bytes -> texts) avoids re-formatting addresses; pass the
    same dict for a whole capture (callers bound its size).
    """
    n = len(data)
    # --- link layer: find the network protocol and its offset
    if linktype == LINKTYPE_ETHERNET:
        if n < 14:
            counters.add("bad_link_header")
            return None
        etype = (data[12] << 8) | data[13]
        off = 14
        if etype in _VLAN_TPIDS:
            tagged = _skip_vlan_tags(data, off, etype, counters)
            if tagged is None:
                return None
            etype, off = tagged
    elif linktype in _SLL_LINKTYPES:
        if linktype == LINKTYPE_LINUX_SLL:
            off, ppos = 16, 14
        else:
            off, ppos = 20, 0
        if n < off:
            counters.add("bad_link_header")
            return None
        etype = (data[ppos] << 8) | data[ppos + 1]
        if etype in _VLAN_TPIDS:
            tagged = _skip_vlan_tags(data, off, etype, counters)
            if tagged is None:
                return None
            etype, off = tagged
    elif linktype in _NULL_LINKTYPES:
        if n < 4:
            counters.add("bad_link_header")
            return None
        if linktype == LINKTYPE_LOOP:
            family = int.from_bytes(data[:4], "big")
        else:
            # Written in the capturing host's byte order, which the file does not record.
            family = int.from_bytes(data[:4], "little")
            if family > 0xFFFF:
                family = int.from_bytes(data[:4], "big")
        off = 4
        if family == _NULL_AF_INET:
            etype = _ETH_IPV4
        elif family in _NULL_AF_INET6:
            etype = _ETH_IPV6
        else:
            counters.add("non_ip")
            return None
    elif linktype in _RAW_LINKTYPES:
        if n < 1:
            counters.add("bad_ip_header")
            return None
        off = 0
        version = data[0] >> 4
        if version == 4:
            etype = _ETH_IPV4
        elif version == 6:
            etype = _ETH_IPV6
        else:
            counters.add("bad_ip_header")
            return None
    else:
        counters.add("unknown_linktype")
        return None

    cache = addr_cache if addr_cache is not None else {}
    # --- network layer: addresses, where TCP starts and where the IP packet ends
    if etype == _ETH_IPV4:
        if n - off < 20:
            counters.add("bad_ip_header")
            return None
        # One unpack for the whole fixed header: far cheaper than indexing byte by byte.
        vihl, total, frag, proto, key = _IPV4_HEAD.unpack_from(data, off)
        ihl = (vihl & 0x0F) * 4
        if total == 0 and ihl >= 20:
            # TCP segmentation offload captured before segmentation.
            counters.add("ip_total_length_zero")
            total = n - off
        if vihl >> 4 != 4 or ihl < 20 or n - off < ihl or total < ihl:
            counters.add("bad_ip_header")
            return None
        if frag & 0x3FFF:
            counters.add("ip_fragment")
            return None
        if proto != _IP_PROTO_TCP:
            counters.add("non_tcp")
            return None
        pair = cache.get(key)
        if pair is None:
            pair = cache[key] = (
                socket.inet_ntop(socket.AF_INET, key[:4]),
                socket.inet_ntop(socket.AF_INET, key[4:]),
            )
        src, dst = pair
        l4 = off + ihl
        end = off + total
    elif etype == _ETH_IPV6:
        if n - off < 40 or data[off] >> 4 != 6:
            counters.add("bad_ip_header")
            return None
        plen = (data[off + 4] << 8) | data[off + 5]
        nh = data[off + 6]
        l4 = off + 40
        end = l4 + plen if plen else n  # 0: jumbogram or TSO, take the frame
        while nh != _IP_PROTO_TCP:
            if nh in _IPV6_EXT_8 or nh == _IPV6_AH:
                if l4 + 2 > n:
                    counters.add("bad_ip_header")
                    return None
                hlen = (data[l4 + 1] + 2) * 4 if nh == _IPV6_AH else (data[l4 + 1] + 1) * 8
                nh = data[l4]
                l4 += hlen
            elif nh == _IPV6_FRAGMENT:
                if l4 + 8 > n:
                    counters.add("bad_ip_header")
                    return None
                # An "atomic" fragment (offset 0, no more fragments) is a whole packet.
                if ((data[l4 + 2] << 8) | data[l4 + 3]) & 0xFFF9:
                    counters.add("ip_fragment")
                    return None
                nh = data[l4]
                l4 += 8
            else:
                counters.add("non_tcp")
                return None
            if l4 > end:
                counters.add("bad_ip_header")
                return None
        key = data[off + 8 : off + 40]
        pair = cache.get(key)
        if pair is None:
            pair = cache[key] = (
                socket.inet_ntop(socket.AF_INET6, key[:16]),
                socket.inet_ntop(socket.AF_INET6, key[16:]),
            )
        src, dst = pair
    else:
        counters.add("non_ip")
        return None

    # --- transport layer
    avail = end if end <= n else n
    if avail - l4 < 20:
        counters.add("bad_tcp_header")
        return None
    sport, dport, seq, ack, offflags = _TCP_HEAD.unpack_from(data, l4)
    doff = (offflags >> 12) * 4
    start = l4 + doff
    if doff < 20 or start > end:
        counters.add("bad_tcp_header")
        return None
    if end > n:
        counters.add("snaplen_truncated")
        if start > n:
            # Options cut off too: the segment's place in the stream is still known.
            return Packet(
                frame, ts_ns, src, dst, sport, dport, seq, ack, offflags & 0xFF, b"", end - start
            )
        return Packet(
            frame, ts_ns, src, dst, sport, dport, seq, ack, offflags & 0xFF, data[start:n], end - n
        )
    return Packet(frame, ts_ns, src, dst, sport, dport, seq, ack, offflags & 0xFF, data[start:end])


_ADDR_CACHE_LIMIT = 1 << 16


def decode_frames(frames: Iterable[Frame], counters: Counters) -> Iterator[Packet]:
    """Turn ``(linktype, ts_ns, data)`` records into TCP packets, numbering frames from 1.

    Live capture uses this with frames from its own source.
    """
    cache: dict[bytes, tuple[str, str]] = {}
    frame = 0
    pending = 0
    yielded = 0
    try:
        for linktype, ts_ns, data in frames:
            frame += 1
            pending += 1
            pkt = parse_frame(linktype, data, frame, ts_ns, counters, cache)
            if pending >= _COUNT_FLUSH:
                counters.add("frames", pending)
                counters.add("tcp_packets", yielded)
                pending = yielded = 0
                if len(cache) > _ADDR_CACHE_LIMIT:
                    cache.clear()
            if pkt is not None:
                yielded += 1
                yield pkt
    finally:
        if pending:
            counters.add("frames", pending)
        if yielded:
            counters.add("tcp_packets", yielded)


def read_packets(path: str, counters: Counters) -> Iterator[Packet]:
    """Yield the TCP packets of a pcap/pcapng(/gzip) file in capture order.

    Raises ``CaptureError`` immediately if ``path`` is not a readable capture; damage
    inside the file (bad frames, a partial last record) is counted, never raised.
    """
    return decode_frames(iter_frames(path, counters), counters)
