"""The native capture stage (native/src/capture/) against the Python one.

Oracle: ``tests.oracle.capture.read_packets``, itself tested against tshark and scapy
(tests/test_capture.py). The Rust side is the example binary ``dump_packets``, which
prints every packet and the counters of each capture; both must agree packet for
packet (frame, ts_ns, addresses, ports, seq, ack, flags, payload, missing) and counter
for counter, on every bundled and shared real capture and on captures written here for
each format variant the readers support.
"""

from __future__ import annotations

import gzip
import ipaddress
import os
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
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
from tests.oracle.capture import read_packets

REPO = Path(__file__).resolve().parents[1]
NATIVE = REPO / "native"
BUNDLED = sorted((REPO / "captures").glob("*.pcap*"))
SHARED_DIR = REPO.parent / "shared" / "captures"
SHARED = sorted(SHARED_DIR.glob("*.pcap*")) if SHARED_DIR.is_dir() else []
CARGO = shutil.which("cargo")

pytestmark = pytest.mark.skipif(CARGO is None, reason="cargo is not installed")

Row = tuple[int, int, object, object, int, int, int, int, int, int, str]


@dataclass
class Dump:
    rows: list[Row] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None


@pytest.fixture(scope="module")
def dump_binary() -> Path:
    """The example in cargo's debug profile: ``cargo test`` (the test command's Rust
    checks) has built it already; a release build of it took a minute of the run."""
    assert CARGO is not None
    subprocess.run(
        [CARGO, "build", "--quiet", "--example", "dump_packets"],
        cwd=NATIVE,
        check=True,
        timeout=1800,
    )
    # where cargo put it: CARGO_TARGET_DIR (relative to native/) when set
    target = Path(os.environ.get("CARGO_TARGET_DIR") or "target")
    return (NATIVE / target) / "debug" / "examples" / "dump_packets"


def rust_dumps(binary: Path, paths: list[Path]) -> dict[str, Dump]:
    out = subprocess.run(
        [str(binary), *map(str, paths)], capture_output=True, text=True, check=True, timeout=600
    ).stdout
    dumps: dict[str, Dump] = {}
    cur = Dump()
    for line in out.splitlines():
        cols = line.split("\t")
        if cols[0] == "#file":
            cur = dumps[cols[1]] = Dump()
        elif cols[0] == "#counter":
            cur.counters[cols[1]] = int(cols[2])
        elif cols[0] == "#error":
            cur.error = cols[1]
        elif cols[0] == "#source_bytes":
            continue
        else:
            n = [int(c) for c in cols[:2]] + [ipaddress.ip_address(c) for c in cols[2:4]]
            n += [int(c) for c in cols[4:10]]
            frame, ts, src, dst, sport, dport, seq, ack, flags, missing = n
            rows = (frame, ts, src, dst, sport, dport, seq, ack, flags, missing, cols[10])
            cur.rows.append(rows)  # type: ignore[arg-type]
    return dumps


def python_dump(path: Path) -> Dump:
    counters = Counters()
    rows: list[Row] = [
        (
            p.frame,
            p.ts_ns,
            ipaddress.ip_address(p.src),
            ipaddress.ip_address(p.dst),
            p.sport,
            p.dport,
            p.seq,
            p.ack,
            p.flags,
            p.missing,
            p.payload.hex(),
        )
        for p in read_packets(str(path), counters)
    ]
    return Dump(rows, counters.as_dict())


def assert_same(binary: Path, paths: list[Path]) -> dict[str, Dump]:
    dumps = rust_dumps(binary, paths)
    assert sorted(dumps) == sorted(map(str, paths))
    for path in paths:
        ours, theirs = dumps[str(path)], python_dump(path)
        assert ours.error is None, f"{path.name}: {ours.error}"
        assert len(ours.rows) == len(theirs.rows), path.name
        for mine, ref in zip(ours.rows, theirs.rows, strict=True):
            assert mine == ref, path.name
        assert _shared(ours.counters) == theirs.counters, path.name
    return dumps


def _shared(counters: dict[str, int]) -> dict[str, int]:
    """The counters the Python stage also has. The core reassembles IP fragments (the
    oracle only counts them, as ``ip_fragment`` both do): what became of them is the
    core's own (tested in tests/test_field_tunnels.py and the Rust defrag tests)."""
    own = ("ip_reassembled", "ip_fragments_")
    return {k: v for k, v in counters.items() if not k.startswith(own)}


# ---------------------------------------------------------------------------
# Real captures


def test_bundled_captures_match_python(dump_binary: Path) -> None:
    assert BUNDLED, "no bundled captures found"
    dumps = assert_same(dump_binary, BUNDLED)
    # The comparison is not vacuous: the bundled captures carry Kafka traffic.
    assert sum(len(d.rows) for d in dumps.values()) > 100


@pytest.mark.skipif(not SHARED, reason=f"conformance captures not present: {SHARED_DIR}")
def test_shared_captures_match_python(dump_binary: Path) -> None:
    dumps = assert_same(dump_binary, SHARED)
    assert all(d.rows for d in dumps.values())
    # go-sniffer records more captured than wire bytes on every frame (see its README).
    assert (
        dumps[str(SHARED_DIR / "go-sniffer-kafka.pcap")].counters["caplen_exceeds_wire_len"] == 20
    )


# ---------------------------------------------------------------------------
# Written captures: every format variant, link type and header case


def _tcp(seq: int = 1000, flags: str = "PA") -> TCP:
    return TCP(sport=50000, dport=9092, seq=seq, ack=2000, flags=flags)


V4 = IP(src="10.1.2.3", dst="10.4.5.6") / _tcp() / Raw(b"kafka-bytes")
V6 = IPv6(src="2001:db8::1", dst="2001:db8::2") / _tcp() / Raw(b"kafka-bytes-6")
V6_EXT = (
    IPv6(src="2001:db8::1", dst="2001:db8::2")
    / IPv6ExtHdrHopByHop()
    / IPv6ExtHdrDestOpt()
    / IPv6ExtHdrRouting(addresses=["2001:db8::9"])
    / IPv6ExtHdrFragment(offset=0, m=0)
    / _tcp()
    / Raw(b"ext")
)

# (linktype, frame): good ones and ones each Python counter rejects.
LINK_FRAMES: list[tuple[int, bytes]] = [
    (1, bytes(Ether() / V4)),
    (1, bytes(Ether() / V6)),
    (1, bytes(Ether() / V6_EXT)),
    (1, bytes(Ether() / Dot1Q(vlan=300) / V4)),
    (1, bytes(Ether() / Dot1AD(vlan=10) / Dot1Q(vlan=20) / V4)),
    (1, bytes(Ether(type=0x9100) / Dot1Q(vlan=10) / Dot1Q(vlan=20) / V6)),
    (113, bytes(CookedLinux(proto=0x0800) / V4)),
    (276, bytes(CookedLinuxV2(proto=0x86DD) / V6)),
    (0, struct.pack("<I", 2) + bytes(V4)),
    (0, struct.pack(">I", 28) + bytes(V6)),
    (108, struct.pack(">I", 2) + bytes(V4)),
    (101, bytes(V6)),
    (12, bytes(V4)),
    (14, bytes(V6)),
    (228, bytes(V4)),
    (229, bytes(V6)),
    (1, bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / _tcp(flags="S"))),
    (1, bytes(Ether() / IP() / TCP(flags="A")) + b"\x00" * 6),  # Ethernet padding
    (1, bytes(Ether() / IP(len=0) / _tcp() / Raw(b"tso"))),  # total length 0
    (1, bytes(Ether() / IP(src="10.1.2.3", flags="MF") / _tcp() / Raw(b"x"))),
    (1, bytes(Ether() / IPv6() / IPv6ExtHdrFragment(offset=10, m=0) / Raw(b"x"))),
    (1, bytes(Ether() / ARP())),
    (1, bytes(Ether() / IP() / UDP() / Raw(b"x"))),
    (1, bytes(Ether() / IPv6() / UDP())),
    (1, b"\x00" * 10),
    (1, bytes(Ether() / Dot1Q())[:16]),
    (1, bytes(Ether(type=0x0800)) + b"\x45\x00"),
    (101, b"\x75" + bytes(V4)[1:]),
    (1, bytes(Ether() / IP(proto=6) / Raw(b"\x00" * 10))),
    (1, bytes(Ether() / IP() / TCP(dataofs=3))),
    (0, struct.pack("<I", 7) + bytes(V4)),
    (147, bytes(V4)),
    (1, b""),
]


def _pcap(magic: int, order: str, frames: list[tuple[bytes, int]], rec_extra: int = 0) -> bytes:
    """pcap with linktype 1; frames are (bytes, wire length)."""
    out = struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1)
    for i, (frame, wire) in enumerate(frames):
        out += struct.pack(order + "IIII", 1_700_000_000 + i, 999_999 - i, len(frame), wire)
        out += b"\x00" * rec_extra + frame
    return out


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


def _epb(order: str, iface: int, ticks: int, frame: bytes, wire: int | None = None) -> bytes:
    wire = len(frame) if wire is None else wire
    head = struct.pack(order + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), wire)
    return _block(order, 6, head + frame)


def _pb(order: str, iface: int, ticks: int, frame: bytes) -> bytes:
    head = struct.pack(
        order + "HHIIII", iface, 0, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)
    )
    return _block(order, 2, head + frame)


def _spb(order: str, frame: bytes) -> bytes:
    return _block(order, 3, struct.pack(order + "I", len(frame)) + frame)


def _v4(i: int, size: int = 1) -> bytes:
    seg = _tcp(seq=100 + i) / Raw(bytes([65 + i % 26]) * size)
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / seg)


def _written_captures(tmp: Path) -> list[Path]:
    files: dict[str, bytes] = {}
    good = [(_v4(i), len(_v4(i))) for i in range(5)]
    big = _v4(9, 1000)
    cut = [(big[:100], len(big)), (big[:40], len(big)), (big[: 14 + 20 + 20], len(big))]
    for magic, tag in [(0xA1B2C3D4, "us"), (0xA1B23C4D, "ns")]:
        for order, name in [("<", "le"), (">", "be")]:
            files[f"{tag}-{name}.pcap"] = _pcap(magic, order, good + cut)
    files["modified.pcap"] = _pcap(0xA1B2CD34, "<", good, rec_extra=8)
    # Recorded length larger than the wire length, as go-sniffer writes.
    files["oversize.pcap"] = _pcap(0xA1B2C3D4, "<", [(f + b"\x00" * 16, len(f)) for f, _ in good])
    links = b"".join(
        struct.pack("<IIII", 1, i, len(f), len(f)) + f
        for i, (lt, f) in enumerate(LINK_FRAMES)
        if lt == 1
    )
    files["links-eth.pcap"] = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + links
    for order, name in [("<", "le"), (">", "be")]:
        blob = _shb(order)
        for lt, _frame in LINK_FRAMES:
            blob += _idb(order, lt, 9)
        for i, (_lt, frame) in enumerate(LINK_FRAMES):
            blob += _epb(order, i, 1_700_000_000_000_000_000 + i, frame)
        files[f"links-{name}.pcapng"] = blob
        files[f"multi-{name}.pcapng"] = (
            _shb(order)
            + _idb(order, 1, None)  # default: microseconds
            + _idb(order, 113, 9)  # nanoseconds
            + _idb(order, 101, 0x80 | 10, tsoffset=100)  # 2^-10 s, +100 s
            + _idb(order, 1, 3, tsoffset=-5)  # milliseconds, -5 s
            + _idb(order, 1, 0x80 | 20)  # 2^-20 s
            + _epb(order, 0, 1_700_000_000_123_456, bytes(Ether() / V4))
            + _epb(order, 1, 1_700_000_001_123_456_789, bytes(CookedLinux(proto=0x86DD) / V6))
            + _block(order, 5, struct.pack(order + "III", 0, 0, 0))  # statistics: ignored
            + _epb(order, 2, 1_700_000_002 * 1024 + 512, bytes(V4))
            + _epb(order, 3, 1_700_000_003_789, bytes(Ether() / V6_EXT))
            + _epb(order, 4, (1_700_000_004 << 20) + 12345, bytes(Ether() / V4))
            + _pb(order, 0, 1_700_000_005_000_001, bytes(Ether() / V4))
            + _spb(order, bytes(Ether() / V6))
            + _epb(order, 7, 1, bytes(Ether() / V4))  # no interface 7
            + _epb(order, 0, 1_700_000_006_000_000, big[:80], wire=len(big))  # snaplen
            + _block(order, 0x0BAD, b"custom")  # unknown block: skipped
        )
    files["two-sections.pcapng"] = (
        _shb("<")
        + _idb("<", 1, 6)
        + _epb("<", 0, 5_000_000, bytes(Ether() / V4))
        + _shb(">")
        + _idb(">", 101, 9)
        + _epb(">", 0, 7_000_000_000, bytes(V6))
        + _epb(">", 1, 1, bytes(V6))
    )
    whole = files["us-le.pcap"]
    for cut_at in (1, 7, 15, 30):
        files[f"truncated-{cut_at}.pcap"] = whole[:-cut_at]
    files["truncated.pcapng"] = files["multi-le.pcapng"][:-50]
    files["bad-record.pcap"] = whole + struct.pack("<IIII", 1, 0, 0x7FFFFFFF, 60) + b"\x00" * 64
    files["bad-block.pcapng"] = files["two-sections.pcapng"] + struct.pack("<II", 6, 13)
    files["x.pcap.gz"] = gzip.compress(whole)
    files["x.pcapng.gz"] = gzip.compress(files["multi-be.pcapng"])
    paths = []
    for name, blob in files.items():
        path = tmp / name
        path.write_bytes(blob)
        paths.append(path)
    return paths


def test_written_captures_match_python(dump_binary: Path, tmp_path: Path) -> None:
    paths = _written_captures(tmp_path)
    dumps = assert_same(dump_binary, paths)
    # Each case reached the part of the reader it was written for.
    multi = dumps[str(tmp_path / "multi-le.pcapng")]
    assert multi.counters["pcapng_unknown_interface"] == 1
    assert multi.counters["pcapng_simple_packet_block"] == 1
    assert multi.counters["snaplen_truncated"] == 1
    assert [r[1] for r in multi.rows[:5]] == [
        1_700_000_000_123_456_000,
        1_700_000_001_123_456_789,
        1_700_000_102_500_000_000,
        1_699_999_998_789_000_000,
        1_700_000_004_011_773_109,
    ]
    links = dumps[str(tmp_path / "links-be.pcapng")].counters
    assert links["frames"] == len(LINK_FRAMES)
    for name in ["non_ip", "non_tcp", "bad_link_header", "bad_ip_header", "bad_tcp_header"]:
        assert links[name] >= 1, name
    assert (links["unknown_linktype"], links["ip_fragment"]) == (1, 2)
    assert dumps[str(tmp_path / "truncated-7.pcap")].counters["truncated_file"] == 1
    assert dumps[str(tmp_path / "bad-record.pcap")].counters["bad_record"] == 1
    assert dumps[str(tmp_path / "oversize.pcap")].counters["caplen_exceeds_wire_len"] == 5
    # Cut inside the payload, inside the TCP header (not a packet), after the TCP header.
    cut_rows = dumps[str(tmp_path / "ns-be.pcap")].rows[-2:]
    assert [r[9] for r in cut_rows] == [1000 - 46, 1000]


def test_not_a_capture_is_an_error(dump_binary: Path, tmp_path: Path) -> None:
    cases = {
        "empty": b"",
        "text": b"GET / HTTP/1.1\r\n\r\n",
        "short-pcap": b"\xd4\xc3\xb2\xa1\x02\x00",
        "bad-bom": b"\x0a\x0d\x0d\x0a\x1c\x00\x00\x00\x11\x22\x33\x44",
    }
    paths = []
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        paths.append(tmp_path / name)
    dumps = rust_dumps(dump_binary, [*paths, tmp_path / "absent"])
    messages = ["empty file", "not a pcap or pcapng", "header is truncated", "bad byte order"]
    for path, message in zip(paths, messages, strict=True):
        assert message in (dumps[str(path)].error or ""), path.name
    assert "cannot open" in (dumps[str(tmp_path / "absent")].error or "")
