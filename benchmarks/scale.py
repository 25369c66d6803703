"""``decode`` of a million pairs and ``analyze --partitions`` of a million partition rows:
time, CPU and peak memory of each (issue #21's bound: under 30 s and 1 GB on inputs
under 50 MB).

    python benchmarks/scale.py [--pairs 1000000] [--partition-rows 1000000] [--runs 2]
                               [--cases decode,partitions.parquet,partitions.jsonl,partitions.csv]

Two captures are made here. ``decode``: one connection of ``--pairs`` small pipelined
ApiVersions pairs (``writers.make_capture``: 1M pairs take 31 MB), decoded to a file
(stdout). ``partitions.EXT``: one connection of OffsetFetch v1 pairs, each asking for
``--per-pair`` partitions of one topic and answered with an offset for each (20 bytes
of Kafka a row: 1M rows take 22 MB), written with ``analyze --quiet --partitions
out.EXT``. Each run is a fresh process running the command in-process (its peak is its
own ``VmHWM``, Linux; its CPU time from ``wait4``), cases alternating, ``--runs``
rounds; min and median wall time, median CPU time, the peak and the output's size and
lines are printed with the load average.
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
from dataclasses import dataclass, field
from pathlib import Path

from writers import BROKER, CLIENT, _segment, make_capture

MSS = 1_400

_PROBE = """
import sys
from dissector.cli.app import main
command, capture, out = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    if command == "decode":
        with open(out, "w", encoding="utf-8") as sink:
            sys.stdout = sink
            main(["decode", capture], standalone_mode=False)
        sys.stdout = sys.__stdout__
    else:
        main(["analyze", capture, "--quiet", "--partitions", out], standalone_mode=False)
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(kib * 1024)
"""


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def make_partitions_capture(path: Path, rows: int, per_pair: int = 200) -> int:
    """OffsetFetch v1 pairs of ``per_pair`` partitions each (``rows`` in all), in one
    connection, cut into ``MSS``-byte segments; returns the file size."""
    seq = {CLIENT: 1000, BROKER: 5000}
    t_us = 1_700_000_000 * 1_000_000
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))

        def send(src: tuple[bytes, int], dst: tuple[bytes, int], frame: bytes) -> None:
            nonlocal t_us
            for start in range(0, len(frame), MSS):
                data = frame[start : start + MSS]
                t_us += 10
                packet = _segment(src, dst, seq[src], seq[dst], data)
                seq[src] += len(data)
                fh.write(struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000,
                                     len(packet), len(packet)))  # fmt: skip
                fh.write(packet)

        for correlation_id, first in enumerate(range(0, rows, per_pair)):
            partitions = range(first, min(first + per_pair, rows))
            topic = _string(f"topic-{correlation_id % 50}")
            # request header v1: api key 9 (OffsetFetch), version 1, correlation id, client id
            request = struct.pack(">hhi", 9, 1, correlation_id) + _string("bench")
            request += _string("group") + struct.pack(">i", 1) + topic
            request += struct.pack(">i", len(partitions))
            request += b"".join(struct.pack(">i", p) for p in partitions)
            # response header v0 (correlation id); topics [name, partitions [index,
            # committed offset, metadata "", error code 0]]
            response = struct.pack(">i", correlation_id) + struct.pack(">i", 1) + topic
            response += struct.pack(">i", len(partitions))
            response += b"".join(struct.pack(">iqhh", p, 1000 + p, 0, 0) for p in partitions)
            send(CLIENT, BROKER, struct.pack(">i", len(request)) + request)
            send(BROKER, CLIENT, struct.pack(">i", len(response)) + response)
    return path.stat().st_size


@dataclass
class Case:
    name: str
    command: str
    capture: Path
    ext: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    peak: int = 0
    size: int = 0
    lines: int = 0


def run_once(case: Case, out: Path) -> None:
    """One fresh process: wall and CPU seconds, its own peak RSS, the output's size."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, case.command, str(case.capture), str(out)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child is reaped: counted
    if done.returncode:
        raise SystemExit(f"{case.name} failed:\n{done.stderr[-2000:]}")
    case.walls.append(wall)
    case.cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    case.peak = max(case.peak, int(done.stdout.split()[-1]))
    case.size = out.stat().st_size
    with open(out, "rb") as fh:
        case.lines = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    out.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--partition-rows", type=int, default=1_000_000)
    ap.add_argument("--per-pair", type=int, default=200)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--cases", default="decode,partitions.parquet,partitions.jsonl,partitions.csv")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pairs, parts = Path(tmp) / "pairs.pcap", Path(tmp) / "partitions.pcap"
        cases = []
        for name in args.cases.split(","):
            command, _, ext = name.partition(".")
            if command == "decode":
                if not pairs.exists():
                    size = make_capture(pairs, args.pairs)
                    print(f"decode capture: {args.pairs:,} pairs, {size / 1e6:.1f} MB")
                cases.append(Case(name, "decode", pairs, "jsonl"))
            else:
                if not parts.exists():
                    size = make_partitions_capture(parts, args.partition_rows, args.per_pair)
                    print(
                        f"partitions capture: {args.partition_rows:,} rows, "
                        f"{args.per_pair} a pair, {size / 1e6:.1f} MB"
                    )
                cases.append(Case(name, "partitions", parts, ext))
        for _ in range(args.runs):
            for case in cases:
                run_once(case, Path(tmp) / f"out.{case.ext}")
        print(f"load average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} CPUs")
        for case in cases:
            cpu = f"cpu {statistics.median(case.cpus):6.1f} s  "
            print(
                f"{case.name:20} min {min(case.walls):6.1f} s  median "
                f"{statistics.median(case.walls):6.1f} s  {cpu}peak {case.peak / 2**20:6.0f} MiB"
                f"  output {case.size / 1e6:7.1f} MB, {case.lines:,} lines"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
