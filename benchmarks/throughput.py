"""Whole-pipeline throughput: packets/s and MB/s, and the ratio against tshark.

    python benchmarks/throughput.py [CAPTURE] [--repeat N] [--runs R]

With --repeat N the capture is enlarged to N copies (each copy's connections get
their own client ports, so they stay separate connections) in a temporary pcap.
tshark runs on the same file with its Kafka dissector and `-T fields`, decoding
the broker port as Kafka; the ratio is tshark time / our time.
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
from pathlib import Path

import dpkt

REPO = Path(__file__).resolve().parent.parent
DEFAULT = REPO.parent / "shared" / "captures" / "local-tansu-confluent-kafka.pcapng"


def enlarge(src: Path, copies: int, dst: Path) -> int:
    """Write ``copies`` copies of an Ethernet/IPv4 capture, client ports shifted per copy."""
    frames: list[tuple[float, bytes]] = []
    with open(src, "rb") as fh:
        reader = dpkt.pcapng.Reader(fh) if src.suffix == ".pcapng" else dpkt.pcap.Reader(fh)
        frames = [(ts, bytes(buf)) for ts, buf in reader]
    span = (frames[-1][0] - frames[0][0]) + 1.0 if frames else 1.0
    n = 0
    with open(dst, "wb") as out:
        writer = dpkt.pcap.Writer(out, nano=True)
        for k in range(copies):
            for ts, buf in frames:
                writer.writepkt(_shift_client_port(buf, k), ts + k * span)
                n += 1
    return n


def _shift_client_port(buf: bytes, k: int) -> bytes:
    if k == 0 or len(buf) < 14 + 20 + 4 or buf[12:14] != b"\x08\x00":
        return buf
    ihl = (buf[14] & 0x0F) * 4
    t = 14 + ihl
    sport, dport = struct.unpack_from(">HH", buf, t)
    # The client side is the one that is not the broker port.
    if dport == 9092:
        sport = (sport + 97 * k) % 65536
    elif sport == 9092:
        dport = (dport + 97 * k) % 65536
    return buf[:t] + struct.pack(">HH", sport, dport) + buf[t + 4 :]


def time_ours(path: Path, runs: int) -> tuple[float, int, int]:
    import dissector

    best = float("inf")
    rows = 0
    packets = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        df = dissector.analyze(path)
        best = min(best, time.perf_counter() - t0)
        rows = len(df)
        packets = df.attrs["counters"].get("frames", 0)
    return best, rows, packets


def time_tshark(path: Path, runs: int) -> float | None:
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    best = float("inf")
    cmd = [
        tshark,
        "-r",
        str(path),
        "-d",
        "tcp.port==9092,kafka",
        "-Y",
        "kafka",
        "-T",
        "fields",
        "-e",
        "frame.time_epoch",
        "-e",
        "kafka.api_key",
        "-e",
        "kafka.api_version",
        "-e",
        "kafka.correlation_id",
        "-e",
        "kafka.error",
    ]
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=50, help="copies of the capture (default 50)")
    ap.add_argument("--runs", type=int, default=3, help="best of R runs (default 3)")
    args = ap.parse_args()
    if not args.capture.exists():
        print(f"capture not found: {args.capture}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.pcap"
        if args.repeat > 1:
            enlarge(args.capture, args.repeat, path)
        else:
            shutil.copy(args.capture, path)
        size = os.path.getsize(path)
        ours, rows, packets = time_ours(path, args.runs)
        print(
            f"capture: {args.capture.name} x{args.repeat}: {packets} packets, {size / 1e6:.1f} MB"
        )
        print(
            f"kafka-dissector: {ours:.3f} s, {packets / ours:,.0f} packets/s, "
            f"{size / 1e6 / ours:.1f} MB/s, {rows} pairs"
        )
        theirs = time_tshark(path, args.runs)
        if theirs is not None:
            print(f"tshark -T fields (kafka): {theirs:.3f} s, {packets / theirs:,.0f} packets/s")
            print(f"speed ratio (tshark time / ours): {theirs / ours:.2f}x")
        else:
            print("tshark not installed: no comparison")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
