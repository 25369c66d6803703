"""Stage 1 (capture files -> TCP packets) against independent oracles.

Oracles: tshark's dissection of the shared real captures and of files we write;
packets built by scapy (an independent encoder) for each link type and header case;
and hand-written byte layouts of the pcap/pcapng specifications.
"""

from __future__ import annotations

import gzip
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP, IPOption_RR, IPOption_Timestamp
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from dissector.accounting import Counters
from tests.oracle.capture import (
    ACK,
    PSH,
    SYN,
    CaptureError,
    Packet,
    decode_frames,
    iter_frames,
    parse_frame,
    read_packets,
)
from tests.oracle.tcp import StreamClose, StreamOpen, reassemble

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "captures"
SHARED_FILES = sorted(p.name for p in SHARED.glob("*.pcap*")) if SHARED.is_dir() else []
TSHARK = shutil.which("tshark")

needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (the oracle)")


def _shared(name: str) -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"conformance captures not present: {SHARED}")
    return SHARED / name


def epoch_to_ns(text: str) -> int:
    """tshark's frame.time_epoch string -> integer ns, without going through float."""
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def tshark_tcp_rows(path: Path) -> list[tuple[int, int, str, str, int, int, int, int, int]]:
    """(frame, ts_ns, src, dst, sport, dport, tcp.len, seq, flags) of every TCP packet."""
    assert TSHARK is not None
    fields = [
        "frame.number",
        "frame.time_epoch",
        "ip.src",
        "ipv6.src",
        "ip.dst",
        "ipv6.dst",
        "tcp.srcport",
        "tcp.dstport",
        "tcp.len",
        "tcp.seq",
        "tcp.flags",
    ]
    cmd = [TSHARK, "-r", str(path), "-o", "tcp.relative_sequence_numbers:FALSE", "-Y", "tcp"]
    cmd += ["-T", "fields", "-E", "occurrence=l"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    rows = []
    for line in out.splitlines():
        c = line.split("\t")
        rows.append(
            (
                int(c[0]),
                epoch_to_ns(c[1]),
                c[2] or c[3],
                c[4] or c[5],
                int(c[6]),
                int(c[7]),
                int(c[8]),
                int(c[9]),
                int(c[10], 16) & 0xFF,
            )
        )
    return rows


def our_rows(
    path: Path, counters: Counters
) -> list[tuple[int, int, str, str, int, int, int, int, int]]:
    return [
        (
            p.frame,
            p.ts_ns,
            p.src,
            p.dst,
            p.sport,
            p.dport,
            len(p.payload) + p.missing,
            p.seq,
            p.flags,
        )
        for p in read_packets(str(path), counters)
    ]


# ---------------------------------------------------------------------------
# Real captures against tshark


@needs_tshark
@pytest.mark.parametrize("name", SHARED_FILES or ["(no shared captures)"])
def test_shared_capture_matches_tshark(name: str) -> None:
    path = _shared(name)
    counters = Counters()
    ours = our_rows(path, counters)
    theirs = tshark_tcp_rows(path)
    assert len(ours) == len(theirs)
    for mine, ref in zip(ours, theirs, strict=True):
        assert mine == ref
    assert counters["tcp_packets"] == len(theirs)


def test_mixed_resolution_pcapng_timestamps() -> None:
    """ndpi-kafka.pcapng: interface 0 in microseconds, interface 1 in nanoseconds."""
    path = _shared("ndpi-kafka.pcapng")
    pkts = list(read_packets(str(path), Counters()))
    # Values read from the file with `tshark -T fields -e frame.time_epoch` (tshark 4.0).
    assert pkts[0].ts_ns == 1681844706_292198000
    assert pkts[22].ts_ns == 1703132756_328165530
    assert pkts[-1].ts_ns == 1703132769_960435569
    # A reader that applied interface 0's microsecond resolution to interface 1
    # would land ~1000x later: every timestamp must be within the capture's two days.
    assert all(1681844706 <= p.ts_ns // 10**9 <= 1703132770 for p in pkts)


def test_go_sniffer_recorded_length_larger_than_wire() -> None:
    path = _shared("go-sniffer-kafka.pcap")
    counters = Counters()
    pkts = list(read_packets(str(path), counters))
    assert len(pkts) == 20
    assert counters["caplen_exceeds_wire_len"] == 20
    # The 16 junk bytes after each IP packet are not payload: the IP length bounds it.
    assert [len(p.payload) for p in pkts[:7]] == [0, 0, 0, 47, 0, 79, 0]
    assert all(p.missing == 0 for p in pkts)


# ---------------------------------------------------------------------------
# Link types and headers, built with scapy


def _tcp(**kw: object) -> TCP:
    return TCP(sport=50000, dport=9092, seq=1000, ack=2000, flags="PA", **kw)


PAYLOAD = b"kafka-bytes"
V4 = IP(src="10.1.2.3", dst="10.4.5.6") / _tcp() / Raw(PAYLOAD)
V6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / _tcp() / Raw(PAYLOAD)


def _check(pkt: Packet | None, src: str, dst: str) -> None:
    assert pkt is not None
    assert (pkt.src, pkt.dst, pkt.sport, pkt.dport) == (src, dst, 50000, 9092)
    assert (pkt.seq, pkt.ack, pkt.flags) == (1000, 2000, PSH | ACK)
    assert pkt.payload == PAYLOAD
    assert pkt.missing == 0


def _null_header(family: int, order: str) -> bytes:
    return struct.pack(order + "I", family)


LINK_CASES: list[tuple[str, int, bytes, str]] = [
    ("ethernet", 1, bytes(Ether() / V4), "v4"),
    ("ethernet-v6", 1, bytes(Ether() / V6), "v6"),
    ("802.1q", 1, bytes(Ether() / Dot1Q(vlan=300) / V4), "v4"),
    ("qinq-88a8", 1, bytes(Ether() / Dot1AD(vlan=10) / Dot1Q(vlan=20) / V4), "v4"),
    ("qinq-9100", 1, bytes(Ether(type=0x9100) / Dot1Q(vlan=10) / Dot1Q(vlan=20) / V6), "v6"),
    ("sll", 113, bytes(CookedLinux(proto=0x0800) / V4), "v4"),
    ("sll-v6", 113, bytes(CookedLinux(proto=0x86DD) / V6), "v6"),
    ("sll2", 276, bytes(CookedLinuxV2(proto=0x0800) / V4), "v4"),
    ("sll2-v6", 276, bytes(CookedLinuxV2(proto=0x86DD) / V6), "v6"),
    ("null-le-inet", 0, _null_header(2, "<") + bytes(V4), "v4"),
    ("null-be-inet", 0, _null_header(2, ">") + bytes(V4), "v4"),
    ("null-le-inet6-24", 0, _null_header(24, "<") + bytes(V6), "v6"),
    ("null-be-inet6-28", 0, _null_header(28, ">") + bytes(V6), "v6"),
    ("null-le-inet6-30", 0, _null_header(30, "<") + bytes(V6), "v6"),
    ("loop-inet", 108, _null_header(2, ">") + bytes(V4), "v4"),
    ("raw-101-v4", 101, bytes(V4), "v4"),
    ("raw-101-v6", 101, bytes(V6), "v6"),
    ("raw-12", 12, bytes(V4), "v4"),
    ("raw-14", 14, bytes(V6), "v6"),
    ("ipv4-228", 228, bytes(V4), "v4"),
    ("ipv6-229", 229, bytes(V6), "v6"),
]


@pytest.mark.parametrize(("name", "linktype", "frame", "family"), LINK_CASES)
def test_link_types(name: str, linktype: int, frame: bytes, family: str) -> None:
    counters = Counters()
    pkt = parse_frame(linktype, frame, 1, 5, counters)
    if family == "v4":
        _check(pkt, "10.1.2.3", "10.4.5.6")
    else:
        _check(pkt, "2001:db8::1", "2001:db8::2")
    assert counters.as_dict() == {}


def _write_pcap(path: Path, linktype: int, frames: list[bytes], order: str = "<") -> None:
    with open(path, "wb") as f:
        f.write(struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for i, frame in enumerate(frames):
            f.write(struct.pack(order + "IIII", 1_700_000_000 + i, 123456, len(frame), len(frame)))
            f.write(frame)


@needs_tshark
def test_link_types_agree_with_tshark(tmp_path: Path) -> None:
    # One pcapng with an interface per case, so tshark runs once.
    blob = _shb("<")
    for _name, linktype, _frame, _family in LINK_CASES:
        blob += _idb("<", linktype, 9)
    for i, (_name, _linktype, frame, _family) in enumerate(LINK_CASES):
        blob += _epb("<", i, 1_700_000_000_000_000_000 + i, frame)
    path = tmp_path / "links.pcapng"
    path.write_bytes(blob)
    theirs = tshark_tcp_rows(path)
    assert [r[0] for r in theirs] == list(range(1, len(LINK_CASES) + 1))
    assert our_rows(path, Counters()) == theirs


def test_ipv4_options() -> None:
    pkt = IP(src="10.1.2.3", dst="10.4.5.6", options=[IPOption_RR(), IPOption_Timestamp()])
    frame = bytes(Ether() / pkt / _tcp() / Raw(PAYLOAD))
    assert frame[14] & 0x0F > 5  # the options really are there
    _check(parse_frame(1, frame, 1, 0, Counters()), "10.1.2.3", "10.4.5.6")


def test_tcp_options_skipped() -> None:
    seg = TCP(
        sport=50000,
        dport=9092,
        seq=1000,
        ack=2000,
        flags="PA",
        options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 2)), ("WScale", 7)],
    )
    frame = bytes(Ether() / IP(src="10.1.2.3", dst="10.4.5.6") / seg / Raw(PAYLOAD))
    _check(parse_frame(1, frame, 1, 0, Counters()), "10.1.2.3", "10.4.5.6")


def test_ipv6_extension_headers() -> None:
    ext = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrRouting(addresses=["2001:db8::9"])
        / IPv6ExtHdrFragment(offset=0, m=0)  # atomic fragment: a whole packet
        / IPv6ExtHdrDestOpt()
        / _tcp()
        / Raw(PAYLOAD)
    )
    _check(parse_frame(1, bytes(Ether() / ext), 1, 0, Counters()), "2001:db8::1", "2001:db8::2")


@pytest.mark.parametrize(
    "packet",
    [
        IP(src="10.1.2.3", dst="10.4.5.6", flags="MF") / _tcp() / Raw(PAYLOAD),
        IP(src="10.1.2.3", dst="10.4.5.6", frag=100) / Raw(PAYLOAD),
        IPv6() / IPv6ExtHdrFragment(offset=0, m=1) / _tcp() / Raw(PAYLOAD),
        IPv6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(offset=10, m=0) / Raw(PAYLOAD),
    ],
    ids=["v4-first", "v4-later", "v6-first", "v6-later"],
)
def test_fragments_counted_not_parsed(packet: IP) -> None:
    counters = Counters()
    assert parse_frame(1, bytes(Ether() / packet), 1, 0, counters) is None
    assert counters.as_dict() == {"ip_fragment": 1}


@pytest.mark.parametrize(
    ("linktype", "frame", "counter"),
    [
        (1, bytes(Ether() / ARP()), "non_ip"),
        (1, bytes(Ether() / IP() / UDP() / Raw(b"x")), "non_tcp"),
        (1, bytes(Ether() / IPv6() / UDP()), "non_tcp"),
        (1, b"\x00" * 10, "bad_link_header"),
        (1, bytes(Ether() / Dot1Q())[:16], "bad_link_header"),
        (1, bytes(Ether(type=0x0800)) + b"\x45\x00", "bad_ip_header"),
        (1, bytes(Ether() / IP())[:14] + b"\x46" + bytes(Ether() / IP())[15:], "bad_ip_header"),
        (101, b"\x75" + bytes(V4)[1:], "bad_ip_header"),
        (1, bytes(Ether() / IP(proto=6) / Raw(b"\x00" * 10)), "bad_tcp_header"),
        (1, bytes(Ether() / IP() / TCP(dataofs=3)), "bad_tcp_header"),
        (0, _null_header(7, "<") + bytes(V4), "non_ip"),
        (147, bytes(V4), "unknown_linktype"),
    ],
    ids=[
        "arp",
        "udp",
        "udp6",
        "short-ether",
        "short-vlan",
        "short-ip",
        "ihl-beyond-frame",
        "raw-version-7",
        "short-tcp",
        "tcp-offset-3",
        "null-unknown-af",
        "linktype-147",
    ],
)
def test_bad_frames_counted(linktype: int, frame: bytes, counter: str) -> None:
    counters = Counters()
    assert parse_frame(linktype, frame, 1, 0, counters) is None
    assert counters.as_dict() == {counter: 1}


def test_snaplen_truncated_payload() -> None:
    full = bytes(Ether() / IP(src="10.1.2.3", dst="10.4.5.6") / _tcp() / Raw(b"A" * 1000))
    cut = full[: 14 + 20 + 20 + 100]
    counters = Counters()
    pkt = parse_frame(1, cut, 1, 0, counters)
    assert pkt is not None
    assert pkt.payload == b"A" * 100
    assert pkt.missing == 900
    assert counters["snaplen_truncated"] == 1


def test_snaplen_cut_inside_tcp_options() -> None:
    seg = TCP(sport=50000, dport=9092, seq=7, flags="A", options=[("Timestamp", (1, 2))] * 3)
    full = bytes(Ether() / IP(src="10.1.2.3", dst="10.4.5.6") / seg / Raw(b"B" * 50))
    pkt = parse_frame(1, full[: 14 + 20 + 24], 1, 0, Counters())
    assert pkt is not None
    assert pkt.seq == 7
    assert pkt.payload == b""
    assert pkt.missing == 50


def test_ethernet_padding_is_not_payload() -> None:
    # A pure ACK is padded to Ethernet's 60-byte minimum; the IP length excludes it.
    frame = bytes(Ether() / IP() / TCP(flags="A")) + b"\x00" * 6
    pkt = parse_frame(1, frame, 1, 0, Counters())
    assert pkt is not None
    assert pkt.payload == b""
    assert pkt.missing == 0


# ---------------------------------------------------------------------------
# File formats


def _v4_frames(n: int) -> list[bytes]:
    return [
        bytes(
            Ether()
            / IP(src="10.0.0.1", dst="10.0.0.2")
            / TCP(sport=40000, dport=9092, seq=100 + i, flags="PA")
            / Raw(bytes([65 + i % 26]))
        )
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("magic", "order", "frac", "ns"),
    [
        (0xA1B2C3D4, "<", 123456, 123456000),
        (0xA1B2C3D4, ">", 123456, 123456000),
        (0xA1B23C4D, "<", 123456789, 123456789),
        (0xA1B23C4D, ">", 123456789, 123456789),
    ],
    ids=["us-le", "us-be", "ns-le", "ns-be"],
)
def test_pcap_variants(tmp_path: Path, magic: int, order: str, frac: int, ns: int) -> None:
    frames = _v4_frames(3)
    path = tmp_path / "x.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            f.write(struct.pack(order + "IIII", 1_700_000_000 + i, frac, len(frame), len(frame)))
            f.write(frame)
    pkts = list(read_packets(str(path), Counters()))
    assert [p.ts_ns for p in pkts] == [(1_700_000_000 + i) * 10**9 + ns for i in range(3)]
    assert [p.payload for p in pkts] == [b"A", b"B", b"C"]
    assert [p.frame for p in pkts] == [1, 2, 3]
    if TSHARK:
        assert [r[1] for r in tshark_tcp_rows(path)] == [p.ts_ns for p in pkts]


def test_modified_pcap_with_longer_record_headers(tmp_path: Path) -> None:
    """Kuznetzov's patched libpcap: magic a1b2cd34, 8 more bytes per record header."""
    frames = _v4_frames(2)
    path = tmp_path / "modified.pcap"
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2CD34, 2, 4, 0, 0, 65535, 1))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1_700_000_000 + i, 5, len(frame), len(frame)))
            f.write(struct.pack("<iHBx", 2, 0x0800, 0))  # ifindex, protocol, packet type
            f.write(frame)
    pkts = list(read_packets(str(path), Counters()))
    assert [(p.ts_ns, p.payload) for p in pkts] == [
        (1_700_000_000_000_005_000, b"A"),
        (1_700_000_001_000_005_000, b"B"),
    ]


def _block(order: str, btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    length = len(body) + 12
    return struct.pack(order + "II", btype, length) + body + struct.pack(order + "I", length)


def _shb(order: str) -> bytes:
    return _block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def _idb(order: str, linktype: int, tsresol: int | None, tsoffset: int | None = None) -> bytes:
    opts = b""
    if tsresol is not None:
        opts += struct.pack(order + "HH", 9, 1) + bytes([tsresol]) + b"\x00" * 3
    if tsoffset is not None:
        opts += struct.pack(order + "HHq", 14, 8, tsoffset)
    if opts:
        opts += struct.pack(order + "HH", 0, 0)
    return _block(order, 1, struct.pack(order + "HHI", linktype, 0, 65535) + opts)


def _epb(order: str, iface: int, ticks: int, frame: bytes) -> bytes:
    head = struct.pack(
        order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)
    )
    return _block(order, 6, head + frame)


@pytest.mark.parametrize("order", ["<", ">"], ids=["le", "be"])
def test_pcapng_interfaces_with_own_linktype_and_resolution(tmp_path: Path, order: str) -> None:
    eth = bytes(Ether() / V4)
    sll = bytes(CookedLinux(proto=0x86DD) / V6)
    raw = bytes(V4)
    blob = (
        _shb(order)
        + _idb(order, 1, None)  # default: microseconds
        + _idb(order, 113, 9)  # nanoseconds
        + _idb(order, 101, 0x80 | 10, tsoffset=100)  # 2^-10 s, +100 s offset
        + _epb(order, 0, 1_700_000_000_123_456, eth)
        + _epb(order, 1, 1_700_000_001_123_456_789, sll)
        + _block(order, 5, struct.pack(order + "III", 0, 0, 0))  # statistics: ignored
        + _epb(order, 2, 1_700_000_002 * 1024 + 512, raw)
    )
    path = tmp_path / "multi.pcapng"
    path.write_bytes(blob)
    counters = Counters()
    frames = list(iter_frames(str(path), counters))
    assert [f[0] for f in frames] == [1, 113, 101]
    assert [f[1] for f in frames] == [
        1_700_000_000_123_456_000,
        1_700_000_001_123_456_789,
        1_700_000_102_500_000_000,
    ]
    pkts = list(read_packets(str(path), Counters()))
    assert [p.src for p in pkts] == ["10.1.2.3", "2001:db8::1", "10.1.2.3"]
    if TSHARK:
        assert [r[1] for r in tshark_tcp_rows(path)] == [p.ts_ns for p in pkts]


def test_pcapng_second_section_resets_interfaces_and_byte_order(tmp_path: Path) -> None:
    blob = (
        _shb("<")
        + _idb("<", 1, 6)
        + _epb("<", 0, 5_000_000, bytes(Ether() / V4))
        + _shb(">")
        + _idb(">", 101, 9)
        + _epb(">", 0, 7_000_000_000, bytes(V6))
        + _epb(">", 1, 1, bytes(V6))  # no interface 1 in this section: read as interface 0
    )
    path = tmp_path / "two.pcapng"
    path.write_bytes(blob)
    counters = Counters()
    pkts = list(read_packets(str(path), counters))
    assert [(p.ts_ns, p.src) for p in pkts] == [
        (5 * 10**9, "10.1.2.3"),
        (7 * 10**9, "2001:db8::1"),
        (1, "2001:db8::1"),
    ]
    assert counters["pcapng_unknown_interface"] == 1


@pytest.mark.parametrize("cut", [1, 7, 15, 30])
def test_truncated_pcap_ends_with_counter(tmp_path: Path, cut: int) -> None:
    frames = _v4_frames(3)
    whole = tmp_path / "whole.pcap"
    _write_pcap(whole, 1, frames)
    data = whole.read_bytes()
    part = tmp_path / "part.pcap"
    part.write_bytes(data[:-cut])
    counters = Counters()
    pkts = list(read_packets(str(part), counters))
    # The last record is partial (its 16-byte header plus a frame longer than 30 bytes).
    assert [p.payload for p in pkts] == [b"A", b"B"]
    assert counters["truncated_file"] == 1


def test_truncated_real_pcapng(tmp_path: Path) -> None:
    src = _shared("ndpi-kafka.pcapng")
    data = src.read_bytes()
    part = tmp_path / "part.pcapng"
    part.write_bytes(data[: len(data) - 50])
    counters = Counters()
    pkts = list(read_packets(str(part), counters))
    assert counters["truncated_file"] == 1
    full = list(read_packets(str(src), Counters()))
    assert pkts == full[: len(pkts)]
    assert len(full) - 2 <= len(pkts) < len(full)


def test_impossible_record_length_stops_reading(tmp_path: Path) -> None:
    path = tmp_path / "bad.pcap"
    _write_pcap(path, 1, _v4_frames(2))
    data = path.read_bytes() + struct.pack("<IIII", 1, 0, 0x7FFFFFFF, 60) + b"\x00" * 64
    path.write_bytes(data)
    counters = Counters()
    assert len(list(read_packets(str(path), counters))) == 2
    assert counters["bad_record"] == 1


def test_gzip_capture(tmp_path: Path) -> None:
    plain = tmp_path / "x.pcap"
    _write_pcap(plain, 1, _v4_frames(3))
    packed = tmp_path / "x.pcap.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert list(read_packets(str(packed), Counters())) == list(read_packets(str(plain), Counters()))


def test_truncated_gzip_capture(tmp_path: Path) -> None:
    plain = tmp_path / "x.pcap"
    _write_pcap(plain, 1, _v4_frames(200))
    packed = gzip.compress(plain.read_bytes())
    cut = tmp_path / "cut.pcap.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    counters = Counters()
    pkts = list(read_packets(str(cut), counters))
    assert 0 < len(pkts) < 200
    assert counters["read_error"] == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a pcap or pcapng capture"),
        (b"\xd4\xc3\xb2\xa1\x02\x00", "header is truncated"),
        (b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x11\x22\x33\x44", "bad byte order"),
    ],
    ids=["empty", "text", "short-pcap-header", "pcapng-bad-bom"],
)
def test_not_a_capture(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "x.pcap"
    path.write_bytes(content)
    with pytest.raises(CaptureError, match=message):
        read_packets(str(path), Counters())


def test_missing_file_is_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="cannot open"):
        read_packets(str(tmp_path / "absent.pcap"), Counters())


def test_decode_frames_is_the_live_entry_point() -> None:
    frames = [(1, 10, f) for f in _v4_frames(2)] + [(1, 11, bytes(Ether() / ARP()))]
    counters = Counters()
    pkts = list(decode_frames(iter(frames), counters))
    assert [p.frame for p in pkts] == [1, 2]
    assert counters.as_dict() == {"frames": 3, "non_ip": 1, "tcp_packets": 2}


def test_syn_flag_constant_matches_wire() -> None:
    frame = bytes(Ether() / IP() / TCP(flags="S"))
    pkt = parse_frame(1, frame, 1, 0, Counters())
    assert pkt is not None
    assert pkt.flags == SYN


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_corrupted_capture_never_raises(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Flipped bytes anywhere (headers, lengths, frames) are counted, never raised."""
    name = data.draw(st.sampled_from(["ndpi-kafka.pcapng", "go-sniffer-kafka.pcap"]))
    original = bytearray(_shared(name).read_bytes())
    positions = data.draw(st.lists(st.integers(12, len(original) - 1), min_size=1, max_size=8))
    for pos in positions:
        original[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(len(original) // 2, len(original)))
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(bytes(original[:cut]))
    counters = Counters()
    pkts = list(read_packets(str(path), counters))
    assert counters["tcp_packets"] == len(pkts)
    events = list(reassemble(pkts, counters))
    assert sum(isinstance(e, StreamOpen) for e in events) == sum(
        isinstance(e, StreamClose) for e in events
    )
