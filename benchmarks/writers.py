"""The pairs writers on a million-pair capture: time and peak memory per output format.

    python benchmarks/writers.py [--pairs 1500000] [--runs 2] [--formats parquet,jsonl,json,csv]

The capture is made here: one TCP connection carrying ``--pairs`` ApiVersions v0
requests and responses, pipelined 50 to a 1,400-byte segment (28 bytes of Kafka a pair:
1.5M pairs take 42 MB, issue #21's size). Each format is written by a fresh process
(``kafka-dissector analyze FILE -o out.EXT --quiet`` run in-process by a small probe, so
its peak is its own ``VmHWM``, Linux), formats alternating, ``--runs`` rounds; min and
median wall time, median CPU time (user + system), the peak, and the output's size are
printed with the load average.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PER_SEGMENT = 50
CLIENT, BROKER = (bytes([10, 0, 0, 1]), 40000), (bytes([10, 0, 0, 2]), 9092)

_PROBE = """
import sys
from dissector.cli.app import main
try:
    main(["analyze", sys.argv[1], "-o", sys.argv[2], "--quiet"], standalone_mode=False)
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(kib * 1024)
"""


def _segment(
    src: tuple[bytes, int], dst: tuple[bytes, int], seq: int, ack: int, data: bytes
) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", src[1], dst[1], seq, ack, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(data), 0, 0x4000, 64, 6, 0, src[0], dst[0]
    )
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp + data


def make_capture(path: Path, pairs: int) -> int:
    """ApiVersions v0 pairs in one connection; returns the file size."""
    client_seq, broker_seq = 1000, 5000
    t_us = 1_700_000_000 * 1_000_000
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

        def packet(frame: bytes) -> None:
            nonlocal t_us
            t_us += 10
            fh.write(
                struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame))
            )
            fh.write(frame)

        for first in range(0, pairs, PER_SEGMENT):
            ids = range(first, min(first + PER_SEGMENT, pairs))
            # request: size, api key 18, version 0, correlation id, client id "" (int16 0)
            requests = b"".join(struct.pack(">ihhih", 10, 18, 0, i, 0) for i in ids)
            # response: size, correlation id, error_code 0, api_keys []
            responses = b"".join(struct.pack(">iihi", 10, i, 0, 0) for i in ids)
            packet(_segment(CLIENT, BROKER, client_seq, broker_seq, requests))
            client_seq += len(requests)
            packet(_segment(BROKER, CLIENT, broker_seq, client_seq, responses))
            broker_seq += len(responses)
    return path.stat().st_size


def write_once(capture: Path, out: Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and the writer process's peak RSS (bytes)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(capture), str(out)],
        capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child is reaped: counted
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, int(done.stdout.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_500_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--formats", default="parquet,jsonl,json,csv")
    args = ap.parse_args()
    formats = args.formats.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "pairs.pcap"
        size = make_capture(capture, args.pairs)
        print(f"capture: {args.pairs:,} pairs, {size / 1e6:.1f} MB")
        times: dict[str, list[float]] = {f: [] for f in formats}
        cpus: dict[str, list[float]] = {f: [] for f in formats}
        peaks: dict[str, int] = {f: 0 for f in formats}
        sizes: dict[str, int] = {}
        for _ in range(args.runs):
            for fmt in formats:
                out = Path(tmp) / f"out.{fmt}"
                seconds, cpu, rss = write_once(capture, out)
                times[fmt].append(seconds)
                cpus[fmt].append(cpu)
                peaks[fmt] = max(peaks[fmt], rss)
                sizes[fmt] = out.stat().st_size
                out.unlink()
        print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
        for fmt in formats:
            t = times[fmt]
            print(
                f"{fmt:8} min {min(t):6.1f} s  median {statistics.median(t):6.1f} s  "
                f"cpu {statistics.median(cpus[fmt]):6.1f} s  "
                f"peak {peaks[fmt] / 2**20:7.0f} MiB  output {sizes[fmt] / 1e6:7.1f} MB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
