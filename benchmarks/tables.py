"""The analytics tables' cost against ``analyze``, timed in one run with contenders alternating.

    python benchmarks/tables.py [CAPTURE] [--runs R] [--baseline DIR]

Contenders, each a new process, run R times in turn (A B C A B C ...), min and median
reported:

* ``analyze``: ``kafka-dissector analyze FILE --quiet`` (the pairs only);
* ``pairs``: the same writing the pairs to Parquet (``-o pairs.parquet``);
* ``tables``: ``kafka-dissector analyze FILE --quiet --partitions p.parquet --groups
  g.parquet`` (the pairs, the partitions and groups tables: one pass);
* ``report``: ``kafka-dissector report FILE -o r.html`` (the pairs and every table in one
  pass, then the report's statistics, charts and HTML);
* ``report-pass``: the report's pass alone, in a process of its own
  (``analytics.report.run.analyze`` as ``report`` calls it: the pairs frame and its
  tables, no page). ``report`` minus this is the page's cost; this against ``analyze``
  is what no work on the page alone can go below.

Printed per contender: wall time, CPU time (user + system of the child: less sensitive
than wall time to other work on the machine; the load average is printed too) and peak
RSS (the child's own ``VmHWM``, read at its exit: ``ru_maxrss`` survives exec on Linux
and can report the parent's peak); then ``tables`` and ``report`` as ratios of
``analyze`` (median wall and median CPU).

``--baseline DIR``: the same commands also run on the package in DIR (a checkout's
``dissector`` folder's parent, with its native core built in), e.g. the main branch
before a change, alternating with this one's. Commands run the package's ``dissector.cli``
with ``PYTHONPATH`` naming the package, each with a start-up cache of its own, warmed by
one untimed run. When DIR has its own virtual environment (``DIR/.venv``), its Python
runs the baseline: an editable install's import hook would otherwise take the
package from this environment's checkout whatever ``PYTHONPATH`` says (each block's
heading shows where its package was imported from).

Captures: by default the large long-poll capture recorded by
``python -m scripts.testbed.longpoll --out out/longpoll.pcapng`` (not committed: too
large), else the shared tansu capture.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LONGPOLL = REPO / "out" / "longpoll.pcapng"
SHARED = REPO.parent / "shared" / "captures" / "local-tansu-confluent-kafka.pcapng"
COMMANDS = ("analyze", "pairs", "tables", "report", "report-pass")
# At its exit, the process writes its own peak RSS (VmHWM, KiB) to the file named by
# KD_BENCH_HWM.
PEAK_RSS_AT_EXIT = """
import atexit, os, sys

def hwm():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["KD_BENCH_HWM"], "w") as out:
        out.write(kib)

atexit.register(hwm)
"""
# `python -m dissector.cli ARGS` in this process.
CLI = (
    PEAK_RSS_AT_EXIT
    + """
import runpy

sys.argv = ["kafka-dissector", *sys.argv[1:]]
runpy.run_module("dissector.cli", run_name="__main__", alter_sys=True)
"""
)
# The report's pass on the captures ARGS: ``report_file`` without ``write_report``.
REPORT_PASS = (
    PEAK_RSS_AT_EXIT
    + """
from dissector.analytics.report.run import analyze, report_partition_columns

analyze(sys.argv[1:], partition_columns=report_partition_columns())
"""
)


@dataclass
class Contender:
    name: str
    cmd: list[str]
    env: dict[str, str]
    # `python -m` puts the working directory first on sys.path: run elsewhere than a
    # checkout, so that PYTHONPATH names the package measured
    cwd: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)

    def run(self) -> None:
        hwm = Path(self.cwd) / f"hwm-{self.name}"
        hwm.unlink(missing_ok=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            self.cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**self.env, "KD_BENCH_HWM": str(hwm)},
            cwd=self.cwd,
        )
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed: {' '.join(self.cmd)}\n{err.decode(errors='replace')}")
        self.wall.append(took)
        self.cpu.append(usage.ru_utime + usage.ru_stime)
        self.rss.append(int(hwm.read_text()) * 1024)


def commands(capture: Path, out: Path, python: str) -> dict[str, list[str]]:
    cli = [python, "-c", CLI]
    return {
        "analyze": [*cli, "analyze", str(capture), "--quiet"],
        "pairs": [*cli, "analyze", str(capture), "--quiet", "-o", str(out / "pairs.parquet")],
        "tables": [
            *cli, "analyze", str(capture), "--quiet",
            "--partitions", str(out / "p.parquet"), "--groups", str(out / "g.parquet"),
        ],
        "report": [*cli, "report", str(capture), "-o", str(out / "r.html")],
        "report-pass": [python, "-c", REPORT_PASS, str(capture)],
    }  # fmt: skip


def environment(package: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(package)
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def interpreter(package: Path) -> str:
    """The baseline's own Python when its checkout has a virtual environment, else this one."""
    own = package / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def imported(c: Contender) -> str:
    """Where the package a contender runs is imported from (the check that PYTHONPATH
    took effect)."""
    probe = [c.cmd[0], "-c", "import dissector; print(dissector.__file__)"]
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(probe, env=c.env, cwd=cwd, capture_output=True, text=True)
    return out.stdout.strip() or out.stderr.strip()


def _stats(xs: list[float], unit: str = "s") -> str:
    return f"min {min(xs):6.2f} {unit}, median {statistics.median(xs):6.2f} {unit}"


def report(label: str, contenders: dict[str, Contender]) -> None:
    print(f"{label}:")
    for c in contenders.values():
        print(
            f"  {c.name:11} wall {_stats(c.wall)}; CPU {_stats(c.cpu)}; "
            f"peak RSS {max(c.rss) / 2**20:5.0f} MiB"
        )
    base = contenders["analyze"]
    for name in COMMANDS[1:]:
        c = contenders[name]
        wall = statistics.median(c.wall) / statistics.median(base.wall)
        cpu = statistics.median(c.cpu) / statistics.median(base.cpu)
        print(f"  {name}/analyze: wall {wall:.1f}x, CPU {cpu:.1f}x (medians)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path)
    ap.add_argument("--runs", type=int, default=3, help="runs of each contender (default 3)")
    ap.add_argument("--baseline", type=Path, help="another package's parent folder to compare")
    args = ap.parse_args()
    capture = args.capture or (LONGPOLL if LONGPOLL.exists() else SHARED)
    if not capture.exists():
        print(f"capture not found: {capture}", file=sys.stderr)
        return 2
    capture = capture.resolve()
    packages = {"this": REPO}
    if args.baseline is not None:
        packages["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        runs: dict[str, dict[str, Contender]] = {}
        for label, package in packages.items():
            out = Path(tmp) / label
            out.mkdir()
            env = environment(package, Path(tmp) / f"cache-{label}")
            python = sys.executable if label == "this" else interpreter(package)
            cmds = commands(capture, out, python)
            runs[label] = {name: Contender(name, cmds[name], env, tmp) for name in COMMANDS}
        for contenders in runs.values():  # warm the page cache and each start-up cache
            for c in contenders.values():
                c.run()
                c.wall.clear(), c.cpu.clear(), c.rss.clear()
        for _ in range(args.runs):
            for contenders in runs.values():
                for c in contenders.values():
                    c.run()
    size = capture.stat().st_size / 1e6
    print(f"capture: {capture.name}, {size:.1f} MB; {args.runs} runs each, alternating; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for label, contenders in runs.items():
        report(f"{label} ({imported(contenders['analyze'])})", contenders)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
