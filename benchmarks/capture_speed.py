"""Speed of stages 1 and 2: packets/s and MB/s, next to tshark.

    python benchmarks/capture_speed.py [CAPTURE] [--copies N] [--runs R] [--no-tshark] [--pcapng]

Without CAPTURE, the shared local-tansu capture is enlarged to N copies (default 300,
about 95k packets / 26 MB) in a temporary pcap; each copy's IPv4 addresses get their
own 127.x.y.z block, so copies are separate connections. With CAPTURE, that file is
measured as is (use --copies to enlarge it too; enlarging needs Ethernet/IPv4 frames).

Rows measured (best of R runs):
  frames       file records only (our pcap/pcapng reader)
  packets      read_packets: frames decoded to TCP Packets
  dpkt-parse   the same decode done with dpkt objects, for comparison
  reassemble   read_packets + Reassembler (all events)
  tshark       tshark -r FILE -T fields -e tcp.stream (if tshark is installed)
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dissector.accounting import Counters  # noqa: E402
from tests.oracle.capture import iter_frames, read_packets  # noqa: E402
from tests.oracle.tcp import Reassembler  # noqa: E402

DEFAULT = REPO.parent / "shared" / "captures" / "local-tansu-confluent-kafka.pcapng"


def enlarge(src: Path, copies: int, dst: Path, pcapng: bool = False) -> int:
    """Write ``copies`` copies of ``src`` as a nanosecond pcap (or pcapng); returns frames."""
    counters = Counters()
    frames = list(iter_frames(str(src), counters))
    linktypes = {lt for lt, _ts, _data in frames}
    if linktypes != {1}:
        raise SystemExit(f"--copies needs an Ethernet capture, {src} has link types {linktypes}")
    first = frames[0][1] if frames else 0
    span = (frames[-1][1] - first) + 1_000_000_000 if frames else 1
    n = 0
    with open(dst, "wb") as out:
        if pcapng:
            out.write(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
            tsresol = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
            out.write(_block(1, struct.pack("<HHI", 1, 0, 262144) + tsresol))
        else:
            out.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for k in range(copies):
            for _lt, ts, data in frames:
                buf = _readdress(data, k)
                t = ts + k * span
                if pcapng:
                    head = struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, len(buf), len(buf))
                    out.write(_block(6, head + buf))
                else:
                    sec, ns = divmod(t, 1_000_000_000)
                    out.write(struct.pack("<IIII", sec, ns, len(buf), len(buf)))
                    out.write(buf)
                n += 1
    return n


def _block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _readdress(buf: bytes, k: int) -> bytes:
    """Move both IPv4 addresses into copy ``k``'s own 127.x.y.z block (checksum untouched)."""
    if k == 0 or len(buf) < 34 or buf[12:14] != b"\x08\x00":
        return buf
    hi, lo = divmod(k, 256)
    src = bytes((127, hi + 1, lo, buf[29]))
    dst = bytes((127, hi + 1, lo, buf[33]))
    return buf[:26] + src + dst + buf[34:]


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    best = float("inf")
    n = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - t0)
    return best, n


def count_frames(path: str) -> int:
    return sum(1 for _ in iter_frames(path, Counters()))


def count_packets(path: str) -> int:
    return sum(1 for _ in read_packets(path, Counters()))


def count_events(path: str) -> int:
    counters = Counters()
    r = Reassembler(counters)
    n = 0
    for pkt in read_packets(path, counters):
        r.feed(pkt)
        n += 1
    r.flush()
    return n


def dpkt_parse(path: str) -> int:
    """Decode Ethernet/SLL -> IP -> TCP with dpkt objects (what we avoid on the hot path)."""
    import socket

    import dpkt

    n = 0
    for lt, _ts, data in iter_frames(path, Counters()):
        link = dpkt.ethernet.Ethernet(data) if lt == 1 else dpkt.sll.SLL(data)
        ip = link.data
        if isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6) and isinstance(ip.data, dpkt.tcp.TCP):
            tcp = ip.data
            family = socket.AF_INET if isinstance(ip, dpkt.ip.IP) else socket.AF_INET6
            socket.inet_ntop(family, ip.src)
            socket.inet_ntop(family, ip.dst)
            _ = (tcp.sport, tcp.dport, tcp.seq, tcp.ack, tcp.flags, bytes(tcp.data))
            n += 1
    return n


def time_tshark(path: str, runs: int) -> float | None:
    tshark = shutil.which("tshark")
    if tshark is None:
        return None

    def run() -> int:
        subprocess.run(
            [tshark, "-r", path, "-T", "fields", "-e", "tcp.stream"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return 0

    return best_of(runs, run)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("capture", nargs="?", help="capture file (default: enlarged shared capture)")
    ap.add_argument("--copies", type=int, default=None, help="enlarge the capture N times")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--pcapng", action="store_true", help="write the enlarged file as pcapng")
    args = ap.parse_args()

    src = Path(args.capture) if args.capture else DEFAULT
    if not src.exists():
        raise SystemExit(f"capture not found: {src}")
    copies = args.copies if args.copies is not None else (None if args.capture else 300)
    tmpdir = None
    path = str(src)
    if copies:
        tmpdir = tempfile.mkdtemp(prefix="capture_speed_")
        path = os.path.join(tmpdir, "enlarged.pcapng" if args.pcapng else "enlarged.pcap")
        n = enlarge(src, copies, Path(path), pcapng=args.pcapng)
        print(f"enlarged {src.name} x{copies}: {n} frames -> {path}")
    try:
        size_mb = os.path.getsize(path) / 1e6
        rows: list[tuple[str, float, int]] = []
        for name, fn in (
            ("frames", count_frames),
            ("packets", count_packets),
            ("dpkt-parse", dpkt_parse),
            ("reassemble", count_events),
        ):
            secs, n = best_of(args.runs, lambda fn=fn: fn(path))
            rows.append((name, secs, n))
        packets = rows[1][2]
        print(f"file: {size_mb:.1f} MB, {rows[0][2]} frames, {packets} TCP packets")
        print(f"{'stage':<12}{'seconds':>10}{'packets/s':>14}{'MB/s':>10}")
        for name, secs, _n in rows:
            print(f"{name:<12}{secs:>10.3f}{packets / secs:>14,.0f}{size_mb / secs:>10.1f}")
        if not args.no_tshark:
            secs_ts = time_tshark(path, max(1, min(args.runs, 2)))
            if secs_ts is None:
                print("tshark: not installed")
            else:
                print(
                    f"{'tshark':<12}{secs_ts:>10.3f}{packets / secs_ts:>14,.0f}"
                    f"{size_mb / secs_ts:>10.1f}"
                )
                ours = rows[3][1]
                print(f"read+reassemble is {secs_ts / ours:.1f}x tshark -T fields -e tcp.stream")
    finally:
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
