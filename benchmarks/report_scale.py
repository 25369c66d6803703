"""``report`` on the issue #21 sizes: time and the child's peak memory.

    python benchmarks/report_scale.py [--pairs 1500000] [--partition-rows 1000000] [--runs 2]

Two captures, made here: ``writers.make_capture``'s ``--pairs`` small pipelined
ApiVersions pairs (1.5M pairs: 46 MB), and pairs of 1,000 partitions each, ListOffsets
(log ends) and OffsetCommit (a group's offsets) in turn (``--partition-rows`` rows of the
partitions table, every one read by the consumer lag: 1M rows take 30 MB). Per capture,
each in a fresh process (``kafka-dissector ...`` run in-process by a small probe, so its
peak is its own ``VmHWM``, Linux), contenders alternating, ``--runs`` rounds:

* ``pass``: ``analyze FILE -o x.parquet --quiet`` (the pairs written batch by batch: the
  pass alone), and for the partitions capture ``analyze FILE --partitions p.parquet``;
* ``report``: ``report FILE -o r.html``.

Printed: min and median wall time, CPU time (user + system) and the peak RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from writers import BROKER, CLIENT, _segment, make_capture

PARTITIONS_PER_PAIR = 1000
SEGMENT = 60_000  # TCP payload per packet: a frame of 1,000 partitions takes one or two

_PROBE = """
import sys
from dissector.cli.app import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(kib * 1024)
"""


def make_partitions_capture(path: Path, rows: int) -> int:
    """Pairs of ``PARTITIONS_PER_PAIR`` partitions of one topic each, in one connection,
    every other one a ListOffsets v1 asking the latest offsets (log ends) and an
    OffsetCommit v2 of a group (committed offsets): ``rows`` rows of the partitions
    table, and a consumer lag of every partition. Returns the file size."""
    topic, group = b"t", b"g"
    client_seq, broker_seq = 1000, 5000
    t_us = 1_700_000_000 * 1_000_000
    parts = range(PARTITIONS_PER_PAIR)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))

        def send(src: tuple[bytes, int], dst: tuple[bytes, int], seq: int, ack: int,
                 frame: bytes) -> int:  # fmt: skip
            nonlocal t_us
            for start in range(0, len(frame), SEGMENT):
                data = _segment(src, dst, seq + start, ack, frame[start : start + SEGMENT])
                t_us += 100
                fh.write(struct.pack("<IIII", t_us // 10**6, t_us % 10**6, len(data), len(data)))
                fh.write(data)
            return seq + len(frame)

        named = struct.pack(">ih", 1, len(topic)) + topic + struct.pack(">i", len(parts))
        for cid in range(-(-rows // PARTITIONS_PER_PAIR)):
            if cid % 2 == 0:
                # ListOffsets v1 (client id ""): replica_id -1, latest (-1) of each
                request = struct.pack(">hhihi", 2, 1, cid, 0, -1) + named
                request += b"".join(struct.pack(">iq", p, -1) for p in parts)
                # error 0, timestamp -1, offset
                response = struct.pack(">i", cid) + named
                response += b"".join(struct.pack(">ihqq", p, 0, -1, 1000 + cid) for p in parts)
            else:
                # OffsetCommit v2: group, generation 1, member "", retention -1; per
                # partition the offset and no metadata
                request = struct.pack(">hhih", 8, 2, cid, 0)
                request += struct.pack(">h", len(group)) + group + struct.pack(">ihq", 1, 0, -1)
                request += named + b"".join(struct.pack(">iqh", p, 900 + cid, -1) for p in parts)
                response = struct.pack(">i", cid) + named
                response += b"".join(struct.pack(">ih", p, 0) for p in parts)
            client_seq = send(
                CLIENT, BROKER, client_seq, broker_seq, struct.pack(">i", len(request)) + request
            )
            broker_seq = send(
                BROKER, CLIENT, broker_seq, client_seq, struct.pack(">i", len(response)) + response
            )
    return path.stat().st_size


def run(command: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds and the peak RSS (bytes) of ``kafka-dissector COMMAND``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, *command],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: kafka-dissector {' '.join(command)}")
    return wall, usage.ru_utime + usage.ru_stime, int(out.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_500_000)
    ap.add_argument("--partition-rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        pairs, rows = out / "pairs.pcap", out / "partitions.pcap"
        sizes = (
            make_capture(pairs, args.pairs),
            make_partitions_capture(rows, args.partition_rows),
        )
        cases = {
            f"{args.pairs:,} pairs ({sizes[0] / 1e6:.1f} MB)": {
                "pass": ["analyze", str(pairs), "-o", str(out / "x.parquet"), "--quiet"],
                "report": ["report", str(pairs), "-o", str(out / "r.html")],
            },
            f"{args.partition_rows:,} partition rows ({sizes[1] / 1e6:.1f} MB)": {
                "pass": ["analyze", str(rows), "--partitions", str(out / "p.parquet"), "--quiet"],
                "report": ["report", str(rows), "-o", str(out / "r.html")],
            },
        }
        print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} runs each, alternating")
        for case, commands in cases.items():
            figures: dict[str, list[tuple[float, float, int]]] = {c: [] for c in commands}
            for _ in range(args.runs):
                for name, command in commands.items():
                    figures[name].append(run(command))
            print(case)
            for name, runs in figures.items():
                wall, cpu, peak = zip(*runs, strict=True)
                median = statistics.median
                print(
                    f"  {name:7} wall min {min(wall):6.1f} s, median {median(wall):6.1f} s; "
                    f"CPU median {median(cpu):6.1f} s; peak {max(peak) / 2**20:5.0f} MiB"
                )
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
