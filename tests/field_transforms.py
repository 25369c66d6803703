"""Captures transformed the way the field transforms them, for the field-capture tests.

Each transformation takes a real capture's frames and rewrites them with scapy (an
encoder independent of this project): re-encapsulated in mirror tunnels (VXLAN, GENEVE,
GRE, ERSPAN, IP in IP, MPLS), converted to IPv6, fragmented. The tests compare what
the dissector finds in the result with what it finds in the original, and with tshark.

Frames are handled as ``(ts_ns, bytes)`` (Ethernet); captures are written as
nanosecond pcap files.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

from scapy.compat import raw
from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III, ERSPAN_PlatformSpecific
from scapy.contrib.geneve import GENEVE, GeneveOptions
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import IP, UDP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, fragment6
from scapy.layers.l2 import GRE, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw
from scapy.utils import RawPcapNgReader, RawPcapReader

Frame = tuple[int, bytes]

# Outer (tunnel) endpoints: documentation ranges, never the inner ones.
MAC = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}
OUTER4 = {"src": "192.0.2.1", "dst": "192.0.2.2"}
OUTER6 = {"src": "2001:db8::1", "dst": "2001:db8::2"}


def read_frames(path: Path) -> list[Frame]:
    """The Ethernet frames of a pcap/pcapng file with their times in ns."""
    frames: list[Frame] = []
    reader: Iterable[tuple[bytes, object]]
    if path.suffix == ".pcapng":
        reader = RawPcapNgReader(str(path))
        for data, meta in reader:
            ticks = (meta.tshigh << 32) | meta.tslow  # type: ignore[attr-defined]
            frames.append((ticks * 1_000_000_000 // meta.tsresol, bytes(data)))  # type: ignore[attr-defined]
    else:
        pcap = RawPcapReader(str(path))
        unit = 1 if pcap.nano else 1000  # scapy's "usec" holds ns in a nanosecond pcap
        for data, meta in pcap:
            ns = meta.sec * 1_000_000_000 + meta.usec * unit  # type: ignore[attr-defined]
            frames.append((ns, bytes(data)))
    return frames


def write_pcap(
    path: Path, frames: Iterable[Frame], linktype: int = 1, snaplen: int = 262144
) -> Path:
    """A nanosecond pcap file of these frames (each record's wire length = its length)."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, linktype))
        for ts, data in frames:
            sec, ns = divmod(ts, 1_000_000_000)
            out.write(struct.pack("<IIII", sec, ns, len(data), len(data)))
            out.write(data)
    return path


def stream_of(frame: bytes, streams: dict[tuple[object, ...], int]) -> int:
    """tshark's tcp.stream of an Ethernet/IPv4-or-IPv6/TCP frame: 4-tuples numbered
    in order of first appearance (the captures here never reuse one)."""
    etype = struct.unpack_from("!H", frame, 12)[0]
    if etype == 0x0800:
        ihl = (frame[14] & 0x0F) * 4
        src, dst, l4 = frame[26:30], frame[30:34], 14 + ihl
    else:
        src, dst, l4 = frame[22:38], frame[38:54], 54
    sport, dport = struct.unpack_from("!HH", frame, l4)
    key = tuple(sorted([(src, sport), (dst, dport)]))
    return streams.setdefault(key, len(streams))


def ip_part(frame: bytes) -> bytes:
    return frame[14:]


def ether(payload: Packet, etype: int | None = None) -> Packet:
    head = Ether(**MAC) if etype is None else Ether(type=etype, **MAC)
    return head / payload


# --- tunnels: an inner Ethernet frame -> the outer frame carrying it ---------------


def vxlan(f: bytes) -> Packet:
    return ether(IP(**OUTER4) / UDP(sport=49152, dport=4789) / VXLAN(vni=4242) / Raw(f))


def geneve(f: bytes) -> Packet:
    opt = GeneveOptions(classid=0x0102, type=0x80, data=b"mirr")  # GCP adds options
    inner = GENEVE(proto=0x6558, vni=7, options=[opt]) / Raw(f)
    return ether(IP(**OUTER4) / UDP(sport=49153, dport=6081) / inner)


def gre_ip(f: bytes) -> Packet:
    gre = GRE(
        chksum_present=1, key_present=1, key=9, seqnum_present=1, sequence_number=1, proto=0x0800
    )
    return ether(IP(**OUTER4) / gre / Raw(ip_part(f)))


def gre_teb(f: bytes) -> Packet:
    return ether(IP(**OUTER4) / GRE(proto=0x6558) / Raw(f))


def erspan_1(f: bytes) -> Packet:
    return ether(IP(**OUTER4) / GRE(proto=0x88BE) / Raw(f))


def erspan_2(f: bytes) -> Packet:
    gre = GRE(seqnum_present=1, sequence_number=3, proto=0x88BE)
    return ether(IP(**OUTER4) / gre / ERSPAN_II(session_id=5, vlan=0) / Raw(f))


def erspan_3(f: bytes) -> Packet:
    gre = GRE(seqnum_present=1, sequence_number=4, proto=0x22EB)
    return ether(
        IP(**OUTER4) / gre / ERSPAN_III(session_id=6, o=1) / ERSPAN_PlatformSpecific() / Raw(f)
    )


def ip_in_ip(f: bytes) -> Packet:
    return ether(IP(proto=4, **OUTER4) / Raw(ip_part(f)))


def ip4_in_ip6(f: bytes) -> Packet:
    return ether(IPv6(nh=4, **OUTER6) / Raw(ip_part(f)))


def mpls(f: bytes) -> Packet:
    inner = ip_part(f)
    return ether(MPLS(label=16, s=0, ttl=64) / MPLS(label=17, s=1, ttl=64) / Raw(inner), 0x8847)


def mpls_ethernet(f: bytes) -> Packet:
    # Ethernet pseudowire: a zero control word, then the whole frame.
    return ether(MPLS(label=18, s=1, ttl=64) / Raw(b"\0\0\0\0" + f), 0x8847)


def nested(f: bytes) -> Packet:
    """VXLAN in MPLS in GRE on a VLAN, the innermost frame VLAN-tagged too (depth 4)."""
    tagged = f[:12] + struct.pack("!HH", 0x8100, 10) + f[12:]
    vx = IP(**OUTER4) / UDP(sport=49154, dport=4789) / VXLAN(vni=1) / Raw(tagged)
    mp = MPLS(label=20, s=1, ttl=64) / vx
    return Ether(**MAC) / Dot1Q(vlan=99) / IP(**OUTER4) / GRE(proto=0x8847) / mp


TUNNELS_V4: dict[str, Callable[[bytes], Packet]] = {
    "vxlan": vxlan,
    "geneve": geneve,
    "gre_ip": gre_ip,
    "gre_teb": gre_teb,
    "erspan_1": erspan_1,
    "erspan_2": erspan_2,
    "erspan_3": erspan_3,
    "ip_in_ip": ip_in_ip,
    "ip4_in_ip6": ip4_in_ip6,
    "mpls": mpls,
    "mpls_ethernet": mpls_ethernet,
    "nested": nested,
}


def six_in_four(f: bytes) -> Packet:
    return ether(IP(proto=41, **OUTER4) / Raw(ip_part(f)))


def six_in_six(f: bytes) -> Packet:
    return ether(IPv6(nh=41, **OUTER6) / Raw(ip_part(f)))


def gre_ip6(f: bytes) -> Packet:
    return ether(IPv6(nh=47, **OUTER6) / GRE(proto=0x86DD) / Raw(ip_part(f)))


def vxlan_over_ip6(f: bytes) -> Packet:
    return ether(IPv6(**OUTER6) / UDP(sport=49155, dport=4789) / VXLAN(vni=9) / Raw(f))


TUNNELS_V6: dict[str, Callable[[bytes], Packet]] = {
    "six_in_four": six_in_four,
    "six_in_six": six_in_six,
    "gre_ip6": gre_ip6,
    "vxlan_over_ip6": vxlan_over_ip6,
}


def tunnelled(frames: list[Frame], kinds: dict[str, Callable[[bytes], Packet]]) -> list[Frame]:
    """Each TCP connection carried by one tunnel kind, kinds taken in turn."""
    names = list(kinds)
    streams: dict[tuple[object, ...], int] = {}
    out = []
    for ts, f in frames:
        kind = kinds[names[stream_of(f, streams) % len(names)]]
        out.append((ts, raw(kind(f))))
    return out


# --- IPv6 -------------------------------------------------------------------------


def v6_address(v4: bytes) -> str:
    """An IPv4 address's IPv6 stand-in (fd00::a.b.c.d, unique local)."""
    return str(ipaddress.IPv6Address(b"\xfd" + b"\0" * 11 + v4))


def to_ipv6(frames: list[Frame]) -> list[Frame]:
    """The same TCP segments over IPv6 (hop limit 64, no extension headers)."""
    out = []
    for ts, f in frames:
        ihl = (f[14] & 0x0F) * 4
        total = struct.unpack_from("!H", f, 16)[0]
        tcp = f[14 + ihl : 14 + total]
        v6 = IPv6(src=v6_address(f[26:30]), dst=v6_address(f[30:34]), nh=6, hlim=64) / Raw(tcp)
        out.append((ts, raw(ether(v6))))
    return out


# --- fragments --------------------------------------------------------------------


def fragmented_v4(frames: list[Frame], size: int = 256, over: int = 300) -> list[Frame]:
    """IPv4 packets over ``over`` bytes cut into ``size``-byte fragments (scapy's
    ``fragment``); per connection in turn: in order, in reverse order, with the first
    fragment sent twice, and VXLAN-carried with the *outer* packet fragmented."""
    streams: dict[tuple[object, ...], int] = {}
    out: list[Frame] = []
    for ts, f in frames:
        style = stream_of(f, streams) % 4
        if style == 3:
            outer = vxlan(f)
            if len(outer) - 14 <= over:
                out.append((ts, raw(outer)))
                continue
            pieces = fragment(outer[IP], fragsize=size)
        else:
            if len(f) - 14 <= over:
                out.append((ts, f))
                continue
            pieces = fragment(IP(ip_part(f)), fragsize=size)
        if style == 1:
            pieces = pieces[::-1]
        elif style == 2:
            pieces = [pieces[0], *pieces]
        out.extend((ts, raw(ether(p))) for p in pieces)
    return out


def fragmented_v6(frames: list[Frame], size: int = 256, over: int = 300) -> list[Frame]:
    """IPv6 packets over ``over`` bytes cut by scapy's ``fragment6`` (every other
    connection's fragments in reverse order)."""
    streams: dict[tuple[object, ...], int] = {}
    out: list[Frame] = []
    ident = 0
    for ts, f in frames:
        if len(f) - 14 <= over:
            out.append((ts, f))
            continue
        ident += 1
        pkt = IPv6(ip_part(f))
        nh = pkt.nh
        payload = raw(pkt.payload)
        whole = (
            IPv6(src=pkt.src, dst=pkt.dst, hlim=pkt.hlim)
            / IPv6ExtHdrFragment(id=ident, nh=nh)
            / Raw(payload)
        )
        pieces = fragment6(whole, size + 48 + 8)
        if stream_of(f, streams) % 2:
            pieces = pieces[::-1]
        out.extend((ts, raw(ether(p))) for p in pieces)
    return out


# --- loss and segmentation --------------------------------------------------------


def _tcp_layout(f: bytes) -> tuple[int, int, int] | None:
    """(IPv4 header offset, TCP header offset, payload offset) of an Ethernet/IPv4/TCP
    frame, None for anything else."""
    if len(f) < 34 or f[12:14] != b"\x08\x00" or f[23] != 6:
        return None
    ihl = (f[14] & 0x0F) * 4
    tcp = 14 + ihl
    if len(f) < tcp + 20:
        return None
    return 14, tcp, tcp + (f[tcp + 12] >> 4) * 4


def tcp_payload_len(f: bytes) -> int:
    """TCP payload bytes of an Ethernet/IPv4 frame (by the IP total length), 0 if none."""
    lay = _tcp_layout(f)
    if lay is None:
        return 0
    ip, _tcp, data = lay
    return struct.unpack_from("!H", f, ip + 2)[0] + ip - data


def resegment(frames: list[Frame], mss: int = 1448) -> list[Frame]:
    """Every TCP payload over ``mss`` bytes cut into ``mss``-byte segments (sequence
    numbers consecutive, 1 ns apart, IP length and identification rewritten): a
    loopback capture's 64 KiB segments as a 1500-byte-MTU network carries them."""
    out: list[Frame] = []
    for ts, f in frames:
        lay = _tcp_layout(f)
        size = tcp_payload_len(f)
        if lay is None or size <= mss:
            out.append((ts, f))
            continue
        ip, tcp, data = lay
        seq = struct.unpack_from("!I", f, tcp + 4)[0]
        head, payload = f[:data], f[data : data + size]
        for i, at in enumerate(range(0, size, mss)):
            piece = payload[at : at + mss]
            h = bytearray(head)
            struct.pack_into("!H", h, ip + 2, len(h) - ip + len(piece))
            struct.pack_into("!H", h, ip + 10, 0)  # header checksum: not recomputed
            struct.pack_into("!I", h, tcp + 4, (seq + at) & 0xFFFFFFFF)
            out.append((ts + i, bytes(h) + piece))
    return out


def without(frames: list[Frame], drop: Iterable[int]) -> list[Frame]:
    """The capture with the frames at these (0-based) indexes removed, as
    ``editcap IN OUT N...`` removes them (which counts from 1)."""
    gone = set(drop)
    return [fr for i, fr in enumerate(frames) if i not in gone]


def losable(frames: list[Frame]) -> list[int]:
    """Indexes of the frames whose removal loses bytes and leaves evidence of it, as
    packet loss in a capture does: TCP payload that no other frame carries again (a
    retransmission), followed by more payload of the same direction or by a peer ACK
    past it. (The last segment of a direction that nobody acknowledges leaves no trace:
    no tool can tell it was ever sent.)"""
    copies: dict[tuple[bytes, int, int], list[int]] = {}
    last_data: dict[bytes, int] = {}  # direction -> index of its last payload frame
    acked: dict[bytes, int] = {}  # direction -> highest ACK its peer sent, by index
    ends: dict[int, tuple[bytes, int]] = {}
    acks: list[tuple[int, bytes, int]] = []
    for i, (_ts, f) in enumerate(frames):
        lay = _tcp_layout(f)
        if lay is None:
            continue
        ip, tcp, _data = lay
        way = f[ip + 12 : ip + 20] + f[tcp : tcp + 4]
        back = f[ip + 16 : ip + 20] + f[ip + 12 : ip + 16] + f[tcp + 2 : tcp + 4] + f[tcp : tcp + 2]
        seq, ack = struct.unpack_from("!II", f, tcp + 4)
        if f[tcp + 13] & 0x10:
            acks.append((i, back, ack))
        size = tcp_payload_len(f)
        if size:
            copies.setdefault((way, seq, size), []).append(i)
            last_data[way] = i
            ends[i] = (way, (seq + size) & 0xFFFFFFFF)
    del acked
    out = []
    for (way, _seq, _size), found in copies.items():
        if len(found) != 1:
            continue
        i = found[0]
        end = ends[i][1]
        later_ack = any(
            j > i and d == way and ((a - end) & 0xFFFFFFFF) < (1 << 31) for j, d, a in acks
        )
        if last_data[way] > i or later_ack:
            out.append(i)
    return sorted(out)
