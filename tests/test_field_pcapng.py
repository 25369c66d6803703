"""pcapng structure as the field writes it, on a real capture (issue #21).

The packets of ``captures/kafka-4-mixed.pcapng`` are rewritten by a small pcapng writer
in this file (independent of the project's own writer): after 70,000 legal empty blocks
(descriptions of interfaces no packet uses, name resolution and custom blocks); behind
more than 65,535 packets on an interface no block describes; with each packet's
recorded length larger than its wire length (as go-sniffer writes pcap). Each copy must
give the whole original's pairs, row for row, with the counters saying what was odd
about it, and tshark must read the same Kafka messages where it reads the file. Each
copy is read in a child process with a time limit and its peak memory bounded: a reader
that stopped, crawled or held its blocks would fail here.
"""

from __future__ import annotations

import pickle
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

import dissector
from tests import field_transforms as ft
from tests import tshark_kafka as tsk

REPO = Path(__file__).resolve().parents[1]
ORIGINAL = REPO / "captures" / "kafka-4-mixed.pcapng"
TSHARK = shutil.which("tshark")

# Generous bounds for a 2 MB file on a shared machine: a stop or a quadratic walk over
# 70,000 blocks or packets goes far past them; memory beyond a few hundred MiB means
# something is held per block.
TIME_LIMIT_S = 120
PEAK_LIMIT = 1 << 30

# ---------------------------------------------------------------- the writer


def block(btype: int, body: bytes) -> bytes:
    """One pcapng block, little-endian: type, total length, body padded to 32 bits,
    total length again (pcapng spec, section 3.1)."""
    body += b"\x00" * (-len(body) % 4)
    length = len(body) + 12
    return struct.pack("<II", btype, length) + body + struct.pack("<I", length)


def shb() -> bytes:
    """Section header: byte-order magic, version 1.0, section length unknown."""
    return block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(linktype: int = 1, tsresol: int | None = 9) -> bytes:
    """Interface description (type 1); ``tsresol`` 9: nanosecond timestamps."""
    opts = b""
    if tsresol is not None:
        opts = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
    return block(1, struct.pack("<HHI", linktype, 0, 0) + opts)


def nrb() -> bytes:
    """Name resolution block (type 4) holding only its end-of-records record."""
    return block(4, struct.pack("<HH", 0, 0))


def custom() -> bytes:
    """Custom block (type 0x00000BAD, may be copied): an enterprise number, no data."""
    return block(0x00000BAD, struct.pack("<I", 32473))  # 32473: the PEN for examples


def epb(iface: int, ticks: int, data: bytes, wire: int | None = None) -> bytes:
    """Enhanced packet block (type 6): interface, 64-bit time, captured and wire length."""
    wire = len(data) if wire is None else wire
    head = struct.pack("<IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(data), wire)
    return block(6, head + data)


def write(path: Path, blocks: Iterable[bytes]) -> Path:
    with open(path, "wb") as out:
        for b in blocks:
            out.write(b)
    return path


# ---------------------------------------------------------------- reading in a child

_CHILD = """
import pickle, sys
import dissector
df = dissector.analyze(sys.argv[1])
with open("/proc/self/status") as status:
    kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
with open(sys.argv[2], "wb") as out:
    pickle.dump({"pairs": df, "counters": dict(df.attrs["counters"]), "peak": kib * 1024}, out)
"""


def analyze_in_child(path: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """``dissector.analyze`` of ``path`` in a fresh process, within the time limit and
    the memory bound (its own peak RSS, read at its end)."""
    out = path.with_suffix(".pickle")
    subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(out)],
        check=True,
        timeout=TIME_LIMIT_S,
        cwd=REPO,
    )
    with open(out, "rb") as fh:
        got: dict[str, Any] = pickle.load(fh)  # written by the child above
    assert got["peak"] < PEAK_LIMIT, f"peak {got['peak'] >> 20} MiB"
    return got["pairs"], got["counters"]


def bytes_read(path: Path, original: pd.DataFrame) -> int:
    """The ``bytes_read`` counter of a whole read of ``path``: the original's, plus the
    bytes the copy has more."""
    extra = path.stat().st_size - ORIGINAL.stat().st_size
    return int(original.attrs["counters"]["bytes_read"]) + extra


def same_pairs(got: pd.DataFrame, want: pd.DataFrame, exact_times: bool = True) -> None:
    """Row for row, every column but the capture's name (times within a microsecond
    when the copy's timestamps are in microseconds)."""
    assert len(got) == len(want)
    got = got.drop(columns="capture").reset_index(drop=True)
    want = want.drop(columns="capture").reset_index(drop=True)
    if not exact_times:
        timed = ["request_time", "response_time", "latency_ms"]
        timed += [c for c in want.columns if c.endswith("_ms") and c not in timed]
        for col in ("request_time", "response_time"):
            # a nanosecond time written in microsecond ticks: its microsecond, floored
            floored = want[col].dt.floor("us")
            assert got[col].isna().equals(floored.isna()), col
            assert (got[col] == floored)[floored.notna()].all(), col
        for col in timed[2:]:
            diff = (got[col].astype("Float64") - want[col].astype("Float64")).abs()
            assert (diff.fillna(0) <= 0.001 + 1e-9).all(), col
            assert got[col].isna().equals(want[col].isna()), col
        got, want = got.drop(columns=timed), want.drop(columns=timed)
    pd.testing.assert_frame_equal(got, want, check_categorical=False)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def frames() -> list[ft.Frame]:
    return ft.read_frames(ORIGINAL)


@pytest.fixture(scope="module")
def original() -> pd.DataFrame:
    return dissector.analyze(ORIGINAL)


def kafka_messages(path: Path) -> set[tuple[int, int]]:
    """(tcp.stream, correlation id) of every Kafka message tshark reads."""
    assert TSHARK is not None
    seen = tsk.read(TSHARK, path, [9092])
    return set(seen.requests) | set(seen.responses)


needs_tshark = pytest.mark.skipif(TSHARK is None, reason="tshark is the second oracle here")


# ---------------------------------------------------------------- the copies


@needs_tshark
def test_70000_empty_blocks_before_the_traffic(
    frames: list[ft.Frame], original: pd.DataFrame, tmp_path: Path
) -> None:
    """40,000 descriptions of unused interfaces, 20,000 name resolution blocks and
    10,000 custom blocks between the section header and the first packet (all legal:
    a packet names its interface by index, here 0, the first described)."""
    fillers = [idb(tsresol=6)] * 40_000 + [nrb()] * 20_000 + [custom()] * 10_000
    path = write(
        tmp_path / "blocks.pcapng",
        [shb(), idb(), *fillers, *(epb(0, ns, data) for ns, data in frames)],
    )
    got, counters = analyze_in_child(path)
    same_pairs(got, original)
    # Nothing about these blocks is a fault: the counters are the original's (but for
    # the bytes read: the whole file).
    assert counters == dict(original.attrs["counters"], bytes_read=bytes_read(path, original))
    assert kafka_messages(path) == kafka_messages(ORIGINAL)


def _udp_filler() -> bytes:
    """A UDP datagram between two other hosts: a packet, not Kafka."""
    pkt = Ether(**ft.MAC) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=5353, dport=5353)
    return bytes(pkt / Raw(b"\x00" * 20))


@pytest.mark.parametrize("declared", [True, False], ids=["first-described", "none-described"])
def test_more_than_65535_packets_on_an_undeclared_interface(
    frames: list[ft.Frame], original: pd.DataFrame, tmp_path: Path, declared: bool
) -> None:
    """pcapng wants every packet's interface described before it; the closest a file
    comes while breaking that: 64,000 datagrams and then the whole capture on interface
    7, which no block describes, either after one description (interface 0, nanosecond
    times: read as that one) or with none at all (read with pcapng's defaults: Ethernet,
    microsecond times). All of it is read: the packets are counted as on an unknown
    interface and give the original's pairs."""
    filler = _udp_filler()
    start = frames[0][0] - 1_000_000_000
    if declared:
        head, ticks = [shb(), idb()], (lambda ns: ns)
    else:
        head, ticks = [shb()], (lambda ns: ns // 1000)
    fill = (epb(7, ticks(start + i * 1000), filler) for i in range(64_000))
    path = write(
        tmp_path / "undeclared.pcapng",
        [*head, *fill, *(epb(7, ticks(ns), data) for ns, data in frames)],
    )
    got, counters = analyze_in_child(path)
    same_pairs(got, original, exact_times=declared)
    # The whole capture read: the packets counted, each on an unknown interface, and
    # the datagrams as not TCP; nothing else differs from the original.
    want = dict(original.attrs["counters"])
    assert counters == dict(
        want,
        bytes_read=bytes_read(path, original),
        frames=want["frames"] + 64_000,
        non_tcp=want.get("non_tcp", 0) + 64_000,
        pcapng_unknown_interface=64_000 + len(frames),
    )


@needs_tshark
def test_recorded_length_larger_than_wire_length(
    frames: list[ft.Frame], original: pd.DataFrame, tmp_path: Path
) -> None:
    """Each packet recorded with 16 bytes more than its wire length says (go-sniffer's
    pcap does this; here in pcapng): the bytes past the IP packet are not payload, the
    pairs are the original's and every such packet is counted, as for pcap."""
    path = write(
        tmp_path / "oversize.pcapng",
        [shb(), idb(), *(epb(0, ns, data + b"\x00" * 16, len(data)) for ns, data in frames)],
    )
    got, counters = analyze_in_child(path)
    same_pairs(got, original)
    assert counters["caplen_exceeds_wire_len"] == len(frames)
    want = dict(original.attrs["counters"], caplen_exceeds_wire_len=len(frames))
    assert counters == dict(want, bytes_read=bytes_read(path, original))
    assert kafka_messages(path) == kafka_messages(ORIGINAL)
