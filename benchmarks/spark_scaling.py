"""The ``spark`` command on 1 and 8 copies of a capture against ``dissector.analyze``.

    python benchmarks/spark_scaling.py [CAPTURE] [--copies 1,8] [--runs R] [--oom-copies 16]
                                       [--master local[2]] [--analytics all] [--workdir DIR]

What a fleet user runs, timed as a whole: ``kafka-dissector spark DIR --master local[2]
-o OUT`` (every table, Spark's default memory settings) in a subprocess, on each number
of copies of CAPTURE, and ``dissector.analyze`` of the largest number of copies serially
in this process. The contenders alternate, ``--runs`` times (default 3); min and median
are printed. From them:

  marginal Spark throughput  (pairs of 8 copies - pairs of 1) / (time of 8 - time of 1),
                             the two taken in the same run: what each more capture costs,
                             the JVM's start and Spark's fixed costs cancelled out
  offline throughput         pairs / second of ``dissector.analyze``, one process

and their ratio (the fleet issue's goal: at least 0.25). ``--analytics none`` times
the pairs and the summaries alone: against the default, what the analytics tables
(partitions, groups, versions, lag) cost each capture. Then the job runs once on
``--oom-copies`` copies (default 16; 0 skips it) with ``--verbose``, to show it ends
without an OutOfMemoryError. For every job the peak resident memory (VmHWM) of the
driver (the command's Python), of the JVM and of the largest Python worker is
printed, and the CPU time of each kind of process, read from /proc while the job runs
(Linux). CPU time is what a loaded machine changes least: the marginal CPU per pair
(8 copies minus 1) is printed against ``dissector.analyze``'s.

CAPTURE should be a real capture of at least 30 MB with long-poll traffic; record one
with the test bed (it starts nothing itself: start the broker first)::

    scripts/kafka-broker start
    python -m scripts.testbed.longpoll --out ../bench/longpoll-30s.pcapng --seconds 30
    scripts/kafka-broker stop

Without CAPTURE the largest capture in ``$KD_BENCH_DIR``, else in ``../bench`` beside
the checkout, is used. The copies are hard links (else copies) in a temporary folder.
The machine may be shared: the load average is printed before and after.

``--decode-scaling`` runs the older measurement instead: decoding alone (``load``)
with ``local[1]`` and ``local[2]`` on ``--copies`` copies (one number), the speed-up.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import dissector  # noqa: E402

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz")
MIN_BENCH_BYTES = 30_000_000
SUMMARY = re.compile(r"(\d+) captures \((\d+) failed to decode\), (\d+) pairs, ([\d.]+) s")
WARMUP = REPO / "captures" / "kafka-4-mixed.pcapng"


def default_capture() -> Path | None:
    folder = Path(os.environ.get("KD_BENCH_DIR") or REPO.parent / "bench")
    if not folder.is_dir():
        return None
    found = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(CAPTURE_SUFFIXES)]
    return max(found, key=lambda p: p.stat().st_size, default=None)


def make_copies(capture: Path, n: int, folder: Path) -> Path:
    """``folder`` holding ``n`` copies of ``capture`` (hard links where possible)."""
    folder.mkdir(parents=True, exist_ok=True)
    suffix = "".join(capture.suffixes) or ".pcap"
    for i in range(n):
        target = folder / f"copy-{i:04d}{suffix}"
        try:
            os.link(capture, target)
        except OSError:
            shutil.copyfile(capture, target)
    return folder


# ---------------------------------------------------------------- memory


@dataclass
class PeakMemory:
    """Peak resident memory (VmHWM, bytes) seen per kind of process of one job, and
    the CPU time (user + system, seconds) each kind used, as last sampled: on a shared
    machine the wall time depends on the other work, the CPU time much less."""

    driver: int = 0
    jvm: int = 0
    worker: int = 0  # the largest single Python worker
    workers: set[int] = field(default_factory=set)
    cpu: dict[int, float] = field(default_factory=dict)  # pid -> CPU s, last sampled
    kinds: dict[int, str] = field(default_factory=dict)  # pid -> kind, when first seen

    def cpu_of(self, kind: str) -> float:
        return sum(s for pid, s in self.cpu.items() if self.kinds.get(pid) == kind)

    @property
    def total_cpu(self) -> float:
        return sum(self.cpu.values())

    def line(self) -> str:
        mb = 1 << 20
        return (
            f"peak RSS: driver {self.driver / mb:.0f} MB, JVM {self.jvm / mb:.0f} MB, "
            f"largest Python worker {self.worker / mb:.0f} MB "
            f"({len(self.workers)} worker processes); CPU {self.total_cpu:.1f} s: driver "
            f"{self.cpu_of('driver'):.1f} s, JVM {self.cpu_of('jvm'):.1f} s, "
            f"Python workers {self.cpu_of('worker'):.1f} s"
        )


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far (its own threads, not its children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status(pid: int) -> tuple[int, int] | None:
    """(parent pid, VmHWM bytes) of a process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    hwm = fields.get("VmHWM", "0 kB").split()
    return int(fields.get("PPid", "0")), int(hwm[0]) * 1024 if hwm else 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def watch_memory(root: int, peak: PeakMemory, stop: threading.Event, every: float = 0.2) -> None:
    """Sample the processes of the job (driver ``root`` and its descendants; with
    ``become_subreaper``, also those orphaned on the way, which become this process's
    children) until ``stop``: peak VmHWM and CPU time per kind. A process's CPU time is
    its last sample: one that ends between two samples loses its last fraction of
    ``every``."""
    if not Path("/proc").is_dir():
        return
    me = os.getpid()
    while not stop.is_set():
        parents: dict[int, int] = {}
        hwm: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                got = _status(int(entry.name))
                if got is not None:
                    parents[int(entry.name)], hwm[int(entry.name)] = got
        tree = {root} | {pid for pid, ppid in parents.items() if ppid == me}
        grew = True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        for pid in tree:
            # spark-submit's shell becomes the JVM (exec): the latest name wins, but an
            # ending process, without a command line any more, keeps its kind.
            kind = _kind(pid, root)
            if kind == "other":
                kind = peak.kinds.get(pid, "other")
            if kind == "other":
                continue  # not the job's
            peak.kinds[pid] = kind
            size = hwm.get(pid, 0)
            if kind == "driver":
                peak.driver = max(peak.driver, size)
            elif kind == "jvm":
                peak.jvm = max(peak.jvm, size)
            else:
                peak.workers.add(pid)
                peak.worker = max(peak.worker, size)
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                peak.cpu[pid] = cpu
        stop.wait(every)


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    command = _cmdline(pid)
    if "java" in command.split(" ", 1)[0]:
        return "jvm"
    if "pyspark" in command or "python" in command:
        return "worker"
    return "other"


# ---------------------------------------------------------------- contenders


@dataclass
class JobRun:
    seconds: float  # wall time of the whole command
    job_seconds: float  # the command's own figure (after the JVM started)
    pairs: int
    captures: int
    code: int
    peak: PeakMemory
    stderr: str

    @property
    def peak_cpu(self) -> float:
        """CPU seconds of every process of the job."""
        return self.peak.total_cpu


def spark_command() -> list[str]:
    script = Path(sys.executable).parent / "kafka-dissector"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dissector.cli"]


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): the driver
    does not wait for its JVM, nor pyspark's daemon for its workers, so without this
    they would leave the job's process tree (to init) while still running, unseen by
    the sampler, and stay unreaped."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def reap_descendants(timeout: float = 60.0) -> None:
    """Wait (at most ``timeout``) for the job's processes that outlived the driver."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left
        if pid == 0:
            time.sleep(0.1)


def run_spark_job(
    folder: Path, out: Path, master: str, analytics: str, *, verbose: bool = False
) -> JobRun:
    """``kafka-dissector spark FOLDER --master MASTER -o OUT``, timed and watched."""
    command = [*spark_command(), "spark", str(folder), "--master", master, "-o", str(out)]
    command += ["--analytics", analytics] + (["--verbose"] if verbose else [])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    peak = PeakMemory()
    stop = threading.Event()
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=out.parent
        )
        sampler = threading.Thread(target=watch_memory, args=(proc.pid, peak, stop), daemon=True)
        sampler.start()
        stdout, _ = proc.communicate()
        seconds = time.perf_counter() - started
        reap_descendants()
        stop.set()
        sampler.join()
        err.seek(0)
        stderr = err.read()
    match = SUMMARY.search(stdout)
    captures, pairs, job = (
        (int(match[1]), int(match[3]), float(match[4])) if match else (0, 0, math.nan)
    )
    return JobRun(seconds, job, pairs, captures, proc.returncode, peak, stderr)


def offline_seconds(folder: Path) -> tuple[float, int, float]:
    """``dissector.analyze`` of every capture in ``folder``, serially, in this process:
    (wall seconds, pairs, CPU seconds of every thread of this process)."""
    paths = sorted(str(p) for p in folder.iterdir())
    started, cpu = time.perf_counter(), time.process_time()
    pairs = sum(len(dissector.analyze(p)) for p in paths)
    return time.perf_counter() - started, pairs, time.process_time() - cpu


def _summary(values: list[float]) -> str:
    return f"min {min(values):.2f} s, median {statistics.median(values):.2f} s"


def job_report(folder: Path, copies: list[int], args: argparse.Namespace) -> int:
    if not become_subreaper():
        print("note: not a subreaper (not Linux?): the CPU times may miss processes")
    folders = {n: make_copies(args.capture, n, folder / f"in-{n}") for n in copies}
    largest = max(copies)
    dissector.analyze(str(WARMUP))  # imports and the spec model are not the point
    offline: list[float] = []
    offline_cpu: list[float] = []
    offline_pairs = 0
    jobs: dict[int, list[JobRun]] = {n: [] for n in copies}
    for r in range(args.runs):
        seconds, offline_pairs, cpu = offline_seconds(folders[largest])
        offline.append(seconds)
        offline_cpu.append(cpu)
        print(
            f"run {r + 1}: dissector.analyze x{largest}: {seconds:.2f} s, CPU {cpu:.2f} s",
            flush=True,
        )
        for n in copies:
            run = run_spark_job(folders[n], folder / f"out-{n}", args.master, args.analytics)
            jobs[n].append(run)
            state = "ok" if run.code == 0 else f"FAILED (exit {run.code})"
            print(
                f"run {r + 1}: spark job x{n}: {run.seconds:.2f} s wall "
                f"({run.job_seconds:.2f} s after the JVM started), {run.pairs} pairs, {state}; "
                f"{run.peak.line()}",
                flush=True,
            )
            if run.code != 0:
                print(run.stderr[-3000:])
                return 1
    print()
    print(f"offline: dissector.analyze x{largest}, one process: {_summary(offline)}")
    rate = offline_pairs / min(offline)
    print(f"  {offline_pairs} pairs, {rate:,.0f} pairs/s (best run)")
    for n in copies:
        walls = [j.seconds for j in jobs[n]]
        tables = "every table" if args.analytics == "all" else f"--analytics {args.analytics}"
        print(f"spark x{n} ({args.master}, {tables}): {_summary(walls)} wall")
        if any(j.pairs != jobs[n][0].pairs for j in jobs[n]):
            print("  MISMATCH: pair counts differ between runs")
            return 1
    small, big = min(copies), largest
    if jobs[big][0].pairs != offline_pairs:
        print(f"MISMATCH: Spark found {jobs[big][0].pairs} pairs, analyze {offline_pairs}")
        return 1
    extra = jobs[big][0].pairs - jobs[small][0].pairs
    # Each run's x8 minus its own x1 (run one after the other, on the same machine load),
    # for the whole command and for the job after the JVM started; min and median.
    for label, measure in (
        ("wall", lambda j: j.seconds),
        ("after the JVM started", lambda j: j.job_seconds),
    ):
        deltas = [measure(b) - measure(s) for b, s in zip(jobs[big], jobs[small], strict=True)]
        bests = min(measure(b) for b in jobs[big]) - min(measure(s) for s in jobs[small])
        # min: the best x8 less the best x1 (a paired difference can go negative when
        # other work slowed one x1); median: of the paired differences.
        for how, delta, best in (
            ("min", bests, min(offline)),
            ("median", statistics.median(deltas), statistics.median(offline)),
        ):
            offline_rate = offline_pairs / best
            marginal = extra / delta if delta > 0 else math.inf
            print(
                f"marginal Spark throughput (x{big} - x{small}, {label}, {how} of {len(deltas)}):"
                f" {marginal:,.0f} pairs/s = {marginal / offline_rate:.2f}x offline"
                f" ({offline_rate:,.0f} pairs/s)"
            )
    # CPU time: what the machine's load does not change much. Each x8 minus its x1.
    cpu_deltas = [b.peak_cpu - s.peak_cpu for b, s in zip(jobs[big], jobs[small], strict=True)]
    per_pair = min(offline_cpu) / offline_pairs
    cpu_delta = statistics.median(cpu_deltas)
    ratio = per_pair * extra / cpu_delta if cpu_delta > 0 else math.inf
    print(
        f"marginal CPU (x{big} - x{small}, median of {len(cpu_deltas)}): {cpu_delta:.1f} s for "
        f"{extra} pairs = {cpu_delta / extra * 1e6:.1f} us/pair against "
        f"{per_pair * 1e6:.1f} us/pair offline: {ratio:.2f}x offline per CPU second"
    )
    for n in copies:
        j = jobs[n][0]
        print(
            f"  x{n} CPU by process: driver {j.peak.cpu_of('driver'):.1f} s, JVM "
            f"{j.peak.cpu_of('jvm'):.1f} s, Python workers {j.peak.cpu_of('worker'):.1f} s"
        )
    # Per added copy and kind of process: where what each more capture costs goes (the
    # Python workers' share is the tasks': the core's pass and the tables in Python).
    shares = []
    for kind, name in (("driver", "driver"), ("jvm", "JVM"), ("worker", "Python workers")):
        paired = [
            b.peak.cpu_of(kind) - s.peak.cpu_of(kind)
            for b, s in zip(jobs[big], jobs[small], strict=True)
        ]
        shares.append(f"{name} {statistics.median(paired) / (big - small):.2f} s")
    print(f"  marginal CPU a copy (median of {len(cpu_deltas)}): {', '.join(shares)}")
    if args.oom_copies:
        oom_in = make_copies(args.capture, args.oom_copies, folder / f"in-{args.oom_copies}")
        out = folder / f"out-{args.oom_copies}"
        run = run_spark_job(oom_in, out, args.master, args.analytics, verbose=True)
        oom = "OutOfMemoryError" in run.stderr
        state = "ok" if run.code == 0 and not oom else f"FAILED (exit {run.code})"
        print(
            f"spark x{args.oom_copies}: {run.seconds:.2f} s wall, {run.pairs} pairs, {state}, "
            f"OutOfMemoryError in its log: {'yes' if oom else 'no'}; {run.peak.line()}"
        )
        if run.code != 0 or oom:
            print(run.stderr[-3000:])
            return 1
    return 0


# ---------------------------------------------------------------- decode scaling


def decode_scaling(folder: Path, copies: int, args: argparse.Namespace) -> int:
    """The decode stage alone (``load`` then a count), local[1] against local[2]."""
    from dissector.spark import load
    from dissector.spark.job import build_session

    paths = [str(p) for p in sorted(make_copies(args.capture, copies, folder / "in").iterdir())]
    dissector.analyze(str(WARMUP))
    serial, rows, _ = offline_seconds(folder / "in")
    print(f"offline pipeline, serial: {serial:.2f} s, {rows} pairs")
    results = {}
    for cores in (1, 2):
        spark = build_session(f"local[{cores}]", app_name=f"spark-scaling-{cores}", quiet=True)
        try:
            load(spark, paths[:2]).unpersist()  # Python workers started, decoder imported
            best = math.inf
            for _ in range(args.runs):
                started = time.perf_counter()
                fleet = load(spark, paths)
                pairs = fleet.pairs.count()
                best = min(best, time.perf_counter() - started)
                fleet.unpersist()
                if pairs != rows:
                    print(f"MISMATCH: Spark found {pairs} pairs, the offline pipeline {rows}")
                    return 1
        finally:
            spark.stop()
        results[cores] = best
        print(f"local[{cores}]: decode {best:.2f} s")
    print(f"speed-up 1 -> 2 cores: decode x{results[1] / results[2]:.2f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path)
    parser.add_argument("--copies", default="1,8", help="copy counts for the job (e.g. 1,8)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each contender")
    parser.add_argument("--oom-copies", type=int, default=16, help="one more job on N copies")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--analytics", default="all", help="as the command's --analytics")
    parser.add_argument("--workdir", type=Path, help="where the temporary folder goes")
    parser.add_argument("--decode-scaling", action="store_true", help="the older measurement")
    args = parser.parse_args()
    args.capture = args.capture or default_capture()
    if args.capture is None or not args.capture.is_file():
        parser.error("no capture: pass one, or record one (see --help)")
    size = args.capture.stat().st_size
    if size < MIN_BENCH_BYTES:
        print(f"note: {args.capture.name} is {size / 1e6:.1f} MB, under the 30 MB the goal names")
    copies = sorted({int(c) for c in args.copies.split(",")})
    print(f"capture {args.capture.name}: {size / 1e6:.1f} MB; copies {copies}; {args.master}")
    print("load average before: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory(prefix="spark-scaling-", dir=args.workdir) as tmp:
        folder = Path(tmp)
        if args.decode_scaling:
            code = decode_scaling(folder, max(copies), args)
        else:
            code = job_report(folder, copies, args)
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    return code


if __name__ == "__main__":
    sys.exit(main())
