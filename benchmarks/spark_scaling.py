"""Spark fleet job on N copies of one capture, with 1 and 2 cores: the speed-up.

    python benchmarks/spark_scaling.py [CAPTURE] [--copies N] [--enlarge K] [--cores 1,2]
                                       [--runs R] [--no-job]

Without CAPTURE the project's captures/kafka-4-mixed.pcapng is used (else the shared
local-tansu capture). With ``--enlarge K`` (default 8) the capture is first made K
times longer (``capture_speed.enlarge``: K re-addressed, time-shifted copies in one
file), so that a task's decoding outweighs Spark's fixed cost per task, as with real
broker captures; ``--enlarge 1`` uses the file as is. The N copies go to a temporary
directory. For each core count a
fresh ``local[C]`` session is started and warmed up (Python workers started and the
decoder imported, on two copies), then timed, best of R runs (default 2):

  decode   ``sparkfleet.load``: every copy decoded by its own task, rows cached
  job      ``spark_job.run_job``: decode plus every Parquet table written

The offline pipeline's serial time (``dissector.analyze`` per copy, one process) is
printed for comparison. The machine is shared: the load average is printed before and
after, and for each decode run how many cores the job's processes (driver, JVM, Python
workers) kept busy on average: CPU seconds over wall seconds, from /proc.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from capture_speed import enlarge  # noqa: E402

import dissector  # noqa: E402
from dissector.spark import load  # noqa: E402
from dissector.spark.job import build_session, run_job  # noqa: E402

CANDIDATES = (
    REPO / "captures" / "kafka-4-mixed.pcapng",
    REPO.parent / "shared" / "captures" / "local-tansu-confluent-kafka.pcapng",
)
WARMUP_COPIES = 2


def make_copies(capture: Path, n: int, folder: Path) -> list[str]:
    paths = []
    for i in range(n):
        target = folder / f"copy-{i:04d}{''.join(capture.suffixes)}"
        shutil.copyfile(capture, target)
        paths.append(str(target))
    return paths


def serial_seconds(paths: list[str]) -> tuple[float, int]:
    dissector.analyze(paths[0])  # imports and spec compilation are not the point
    started = time.perf_counter()
    rows = sum(len(dissector.analyze(p)) for p in paths)
    return time.perf_counter() - started, rows


def tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds used so far by ``root`` and its descendants (the JVM, Python workers).

    Linux /proc only; None elsewhere. Includes children that exited and were reaped.
    """
    proc = Path("/proc")
    if not (proc / str(root) / "stat").exists():
        return None
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        # utime, stime, cutime, cstime (fields 14-17 of proc(5)).
        ticks[pid] = sum(int(f) for f in fields[11:15])
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def timed_run(
    cores: int, paths: list[str], out: Path | None, runs: int
) -> tuple[float, float | None, int]:
    """Best of ``runs`` (the machine is shared) for the decode and for the whole job."""
    spark = build_session(f"local[{cores}]", app_name=f"spark-scaling-{cores}", quiet=True)
    try:
        load(spark, paths[:WARMUP_COPIES]).unpersist()
        decode = math.inf
        pairs = 0
        for _ in range(runs):
            cpu_before = tree_cpu_seconds(os.getpid())
            started = time.perf_counter()
            fleet = load(spark, paths)
            pairs = fleet.pairs.count()
            wall = time.perf_counter() - started
            cpu_after = tree_cpu_seconds(os.getpid())
            fleet.unpersist()
            if cpu_before is not None and cpu_after is not None:
                busy = (cpu_after - cpu_before) / wall
                print(f"  local[{cores}] decode run: {wall:.2f} s, {busy:.2f} cores busy")
            decode = min(decode, wall)
        job = None
        if out is not None:
            job = math.inf
            for _ in range(runs):
                started = time.perf_counter()
                run_job(spark, paths, str(out / f"cores-{cores}"))
                job = min(job, time.perf_counter() - started)
        return decode, job, pairs
    finally:
        spark.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path)
    parser.add_argument("--copies", type=int, default=16)
    parser.add_argument("--enlarge", type=int, default=8, help="make the capture K times longer")
    parser.add_argument("--cores", default="1,2", help="core counts to compare, e.g. 1,2")
    parser.add_argument("--runs", type=int, default=2, help="best of R runs for each timing")
    parser.add_argument("--no-job", action="store_true", help="time the decode only")
    args = parser.parse_args()
    capture = args.capture or next((p for p in CANDIDATES if p.is_file()), None)
    if capture is None or not capture.is_file():
        parser.error("no capture found: pass one")
    if args.copies < WARMUP_COPIES:
        parser.error(f"--copies must be at least {WARMUP_COPIES}")
    if args.enlarge < 1:
        parser.error("--enlarge must be at least 1")
    cores = [int(c) for c in args.cores.split(",")]

    with tempfile.TemporaryDirectory(prefix="spark-scaling-") as tmp:
        folder = Path(tmp)
        (folder / "in").mkdir()
        if args.enlarge > 1:
            big = folder / f"enlarged-{capture.stem}.pcap"
            enlarge(capture, args.enlarge, big)
            capture = big
        paths = make_copies(capture, args.copies, folder / "in")
        serial, rows = serial_seconds(paths)
        print(f"capture {capture.name} ({capture.stat().st_size} bytes) x {args.copies} copies")
        print("load average before: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
        print(f"offline pipeline, serial: {serial:.2f} s, {rows} pairs")
        results = {}
        for c in cores:
            out = None if args.no_job else folder / "out"
            decode, job, pairs = timed_run(c, paths, out, max(args.runs, 1))
            if pairs != rows:
                print(f"MISMATCH: Spark found {pairs} pairs, the offline pipeline {rows}")
                return 1
            results[c] = (decode, job)
            job_text = f", job {job:.2f} s" if job is not None else ""
            print(f"local[{c}]: decode {decode:.2f} s{job_text}")
        print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
        base = results[cores[0]]
        for c in cores[1:]:
            decode, job = results[c]
            line = f"speed-up {cores[0]} -> {c} cores: decode x{base[0] / decode:.2f}"
            if job is not None and base[1] is not None:
                line += f", job x{base[1] / job:.2f}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
