"""``kafka-dissector live`` at line rate: replayed real Kafka traffic on loopback.

The product path as a user runs it: the CLI (``live -i lo -o x.parquet``, view on, plain
lines) captures while tcpreplay sends a real capture onto ``lo`` at a fixed packet rate
(``--pps``: a paced sender), looped with ``--unique-ip`` so that every loop is an
address-shifted copy (new connections, same bytes). Each run then compares the pairs
live wrote, pair by pair, with ``dissector.analyze`` of the replayed file: every loop
must hold exactly the offline pairs (content columns: endpoints' ports, API, version,
correlation id, client id, sizes, status, errors, topics, records, flags; not the times,
which are the replay's). A run at a rate is clean when no pair is lost or different and
libpcap dropped nothing. tcpdump is run in the same setup for its ceiling.

    python benchmarks/live_capture.py --capture CAP --rates 200000,300000,400000 --seconds 30
    python benchmarks/live_capture.py --capture CAP --rates 300000 --tcpdump   # also tcpdump
    python benchmarks/live_capture.py --capture CAP --rates 300000 --seconds 600 --rss

CAP is a real capture of Kafka traffic with one broker port (``--port``, found from the
capture when not given), e.g. one recorded with ``python -m scripts.testbed.longpoll``
(too large to commit). It is rewritten once to a private port (``tcprewrite
--portmap``), so that other loopback traffic does not mix in. Per run it prints the rate
asked and reached, packets sent and captured, libpcap's drops, pairs expected, written,
matched, lost and different, flagged rows, the CPU of each core and of the live process,
tcpreplay's CPU, the peak RSS of live (``--rss``: every 10 s), and the load and the
busiest other processes meanwhile (the machine may be shared). ``--repeat`` runs each
rate several times; the summary gives the highest clean rate (min and median over the
repeats). Needs root, tcpreplay and tcprewrite (``apt-get install tcpreplay``), tcpdump
for ``--tcpdump``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout

PORT = 39392  # replayed broker port: unlikely to carry anything else on lo
# Runs longer than this (soaks) play rounds of this many seconds of copies, each round's
# written while the one before plays and deleted once played (a copy is 35 MB on disk).
SOAK_COPY_S = 30.0
START_TIMEOUT_S = 60.0
END_TIMEOUT_S = 120.0
# What a pair is, independent of when the replay sent it.
CONTENT = [
    "client_port",
    "broker_port",
    "api_key",
    "api_name",
    "api_version",
    "correlation_id",
    "client_id",
    "request_size",
    "response_size",
    "status",
    "error_code",
    "error_name",
    "error_count",
    "topics",
    "partitions",
    "records",
    "record_bytes",
    "compression",
    "throttle_ms",
    "decode_error",
    "flags",
]


# ---------------------------------------------------------------- machine


def cpu_times() -> dict[str, tuple[int, int]]:
    """(busy, total) jiffies per CPU from /proc/stat."""
    out = {}
    with open("/proc/stat") as fh:
        for line in fh:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *vals = line.split()
            nums = [int(v) for v in vals]
            idle = nums[3] + nums[4]  # idle + iowait
            out[name] = (sum(nums) - idle, sum(nums))
    return out


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds per thread name of a process (the core's threads are named
    kd-capture and kd-rows; the Python main thread has the process's name)."""
    out: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                name = fh.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        out[name] = out.get(name, 0.0) + cpu
    return out


def all_proc_cpu() -> dict[int, tuple[str, float]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as fh:
                    name = fh.read().strip()
            except OSError:
                continue
            out[int(entry)] = (name, proc_cpu(int(entry)))
    return out


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Usage:
    """CPU use over one run."""

    cores: dict[str, float] = field(default_factory=dict)  # busy % per CPU
    others: list[tuple[str, float]] = field(default_factory=list)  # busiest other commands
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def measure_usage(
    before: dict[str, tuple[int, int]],
    procs_before: dict[int, tuple[str, float]],
    ours: set[int],
) -> Usage:
    after = cpu_times()
    cores = {}
    for name, (busy, total) in after.items():
        b0, t0 = before.get(name, (0, 0))
        cores[name] = 100.0 * (busy - b0) / max(total - t0, 1)
    by_name: dict[str, float] = {}
    for pid, (name, cpu) in all_proc_cpu().items():
        if pid in ours:
            continue
        used = cpu - procs_before.get(pid, (name, 0.0))[1]
        if used > 0.05:
            by_name[name] = by_name.get(name, 0.0) + used
    others = sorted(by_name.items(), key=lambda kv: -kv[1])[:5]
    return Usage(cores, others, os.getloadavg())


# ---------------------------------------------------------------- the replayed file


@dataclass
class Replay:
    paths: list[Path]  # address-shifted copies of the capture, broker port PORT (pcap)
    base: Path  # the capture with the broker port PORT, before any address shift
    packets: int  # packets of one copy
    oracle: Any  # pandas Series: count of each (copy, content row hash) offline
    pairs: int  # pairs of one copy

    def copies_for(self, rate: int, seconds: float) -> list[Path]:
        n = max(1, math.ceil(rate * seconds / self.packets))
        if n > len(self.paths):
            raise SystemExit(f"{n} copies needed, {len(self.paths)} prepared")
        return self.paths[:n]


def broker_port(capture: str) -> int:
    import dissector

    df = dissector.analyze(capture)
    ports = df["broker_port"].dropna().astype(int).value_counts()
    if ports.empty:
        raise SystemExit(f"{capture}: no Kafka pairs found")
    return int(ports.index[0])


def content_hashes(table: Any) -> Any:
    """One 64-bit hash per row over the content columns (lists joined)."""
    import pandas as pd
    import pyarrow.compute as pc

    cols = {}
    for name in CONTENT:
        col = table.column(name)
        if name in ("topics", "flags"):
            col = pc.binary_join(col.fill_null([]) if col.null_count else col, ";")
        cols[name] = col.cast("string").fill_null("\x00").to_numpy(zero_copy_only=False)
    frame = pd.DataFrame(cols)
    return pd.util.hash_pandas_object(frame, index=False).to_numpy()


def capture_packets(path: str) -> int:
    out = subprocess.run(
        ["capinfos", "-c", "-M", "-T", path], capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[-1])


def copy_address(k: int) -> str:
    """The 127.0.0.0/24 of copy k (1-based): 127.a.b.0/24, never 127.0.0.0/24."""
    return f"127.{k // 250 + 1}.{k % 250}.0/24"


def shifted_copies(base: Path, work: Path, numbers: range) -> list[Path]:
    paths = []
    for k in numbers:
        path = work / f"copy-{k}.pcap"
        subprocess.run(
            ["tcprewrite", f"--pnat=127.0.0.0/24:{copy_address(k)}", "-i", str(base),
             "-o", str(path)],
            check=True,
        )  # fmt: skip
        paths.append(path)
    return paths


def prepare(capture: str, port: int | None, work: Path, copies: int) -> Replay:
    """The capture rewritten ``copies`` times: broker port PORT, loopback addresses
    127.0.0.x moved to a /24 of its own per copy (both directions alike, so every copy
    is the same connections between other addresses)."""
    import pandas as pd
    import pyarrow.parquet as pq

    import dissector
    from dissector.table.frame import write_pairs_parquet

    port = port or broker_port(capture)
    plain = work / "plain.pcap"
    base = work / "base.pcap"
    subprocess.run(["editcap", "-F", "pcap", capture, str(plain)], check=True)
    subprocess.run(
        ["tcprewrite", f"--portmap={port}:{PORT}", "-i", str(plain), "-o", str(base)], check=True
    )
    plain.unlink()
    packets = capture_packets(str(base))
    paths = shifted_copies(base, work, range(1, copies + 1))
    # The oracle: the offline analysis of the copies as replayed, one file (state such
    # as topic names learnt carries over from one copy to the next, as it does live).
    whole = work / "replayed.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(whole), *map(str, paths)], check=True)
    offline = work / "offline.parquet"
    write_pairs_parquet(dissector.analyze(str(whole), ports=[PORT]), offline)
    whole.unlink()
    table = pq.read_table(offline)
    offline.unlink()
    keys = pd.DataFrame({"copy": copy_of(table), "hash": content_hashes(table)})
    oracle = keys.groupby(["copy", "hash"]).size().rename("offline")
    return Replay(paths, base, packets, oracle, table.num_rows // copies)


def copy_of(table: Any) -> Any:
    """Each row's copy: the /24 of its client address."""
    import pyarrow.compute as pc

    ip = table.column("client_ip").cast("string")
    return pc.replace_substring_regex(ip, r"\.\d+$", "").to_numpy(zero_copy_only=False)


# ---------------------------------------------------------------- one run


@dataclass
class Run:
    tool: str
    rate: int
    seconds: float
    loops: int
    reached_pps: float = 0.0
    sent: int = 0
    captured: int = 0
    kernel_drops: int = 0
    expected: int = 0
    written: int = 0
    matched: int = 0
    flagged: int = 0
    live_cpu_s: float = 0.0
    threads: dict[str, float] = field(default_factory=dict)  # live's CPU s per thread
    replay_cpu_s: float = 0.0
    wall_s: float = 0.0
    rss_peak_mib: float = 0.0
    rss: list[tuple[float, float]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    note: str = ""

    @property
    def lost(self) -> int:
        return self.expected - self.matched

    @property
    def clean(self) -> bool:
        return (
            self.lost == 0
            and self.different == 0
            and self.kernel_drops == 0
            and not self.note.startswith("live")
        )

    @property
    def different(self) -> int:
        return self.written - self.matched


def tcpreplay(paths: list[Path], rate: int, loops: int = 1) -> subprocess.Popen[str]:
    """The copies in order at ``rate`` packets/s."""
    # Preloaded, and 100 packets per pacing step: the sender's own cost per packet is
    # what limits the rate on a small machine.
    args = ["tcpreplay", "-i", "lo", "--pps", str(rate), "--pps-multi", "100", "--preload-pcap",
            "--no-flow-stats"]  # fmt: skip
    if loops > 1:
        args += ["--loop", str(loops)]
    args += [str(p) for p in paths]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def replay_stats(output: str) -> tuple[int, float]:
    sent = re.search(r"Successful packets:\s+(\d+)", output)
    pps = re.search(r"Rated: .*?([\d.]+) pps", output)
    return (int(sent.group(1)) if sent else 0, float(pps.group(1)) if pps else 0.0)


def wait_line(stream_lines: list[str], pattern: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(pattern in line for line in list(stream_lines)):
            return
        if proc.poll() is not None:
            raise SystemExit("the capture ended before it started:\n" + "".join(stream_lines))
        time.sleep(0.05)
    raise SystemExit(f"no {pattern!r} line after {START_TIMEOUT_S} s")


def reader(stream: Any, into: list[str]) -> threading.Thread:
    def read() -> None:
        for line in stream:
            into.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def run_live(
    replay: Replay,
    rate: int,
    seconds: float,
    buffer_mib: int,
    work: Path,
    rss_every: float,
    *,
    drain: bool = False,
) -> Run:
    """One live run at ``rate``; with ``drain`` live is stopped (SIGSTOP) while
    tcpreplay fills the kernel ring as fast as it can, then continued: the rate at which
    it empties the ring is live's own, whatever the sender reaches."""
    import pyarrow.parquet as pq

    copies = replay.copies_for(rate, min(seconds, SOAK_COPY_S))
    loops = max(1, math.ceil(seconds / SOAK_COPY_S))
    run = Run("live-drain" if drain else "live", rate, seconds, len(copies) * loops)
    out = work / "live.parquet"
    cli = [
        sys.executable,
        "-m",
        "dissector.cli",
        "live",
        "-i",
        "lo",
        "--ports",
        str(PORT),
        "-o",
        str(out),
        "--view",
        "plain",
        "--buffer-size",
        str(buffer_mib),
        "--interval",
        "0.2" if drain else "1",
    ]
    live = subprocess.Popen(
        cli, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    err: list[str] = []
    std: list[str] = []
    threads = [reader(live.stderr, err), reader(live.stdout, std)]
    wait_line(err, "capturing on", live)
    cpu0, procs0, live_cpu0 = cpu_times(), all_proc_cpu(), proc_cpu(live.pid)
    threads0 = thread_cpu(live.pid)
    if drain:
        time.sleep(1.0)  # the first view lines are out
        live.send_signal(signal.SIGSTOP)
    started = time.monotonic()
    soak = Soak(replay, work, copies, loops) if loops > 1 else None
    sender = tcpreplay(copies, rate)
    next_rss = started
    replay_cpu_before = 0.0  # tcpreplay CPU of the soak's earlier rounds
    while sender.poll() is None or (soak is not None and soak.round < soak.rounds):
        if soak is not None and sender.poll() is not None:
            soak.finished(sender.communicate()[0])
            replay_cpu_before = run.replay_cpu_s
            sender = soak.sender(rate)
        run.replay_cpu_s = max(run.replay_cpu_s, replay_cpu_before + proc_cpu(sender.pid))
        # (Sampled while it runs: a reaped or zombie process shows no CPU time.)
        now = time.monotonic()
        mib = rss_mib(live.pid)
        run.rss_peak_mib = max(run.rss_peak_mib, mib)
        if rss_every and now >= next_rss:
            run.rss.append((now - started, mib))
            next_rss = now + rss_every
        time.sleep(0.2)
    output = sender.communicate()[0]
    run.wall_s = time.monotonic() - started
    run.sent, run.reached_pps = replay_stats(output)
    if soak is not None:
        run.sent = soak.sent + run.sent
        run.reached_pps = run.sent / run.wall_s
    if drain:
        run.note = drain_ring(live, err, run)
    time.sleep(1.0)  # the last frames through the ring
    run.live_cpu_s = proc_cpu(live.pid) - live_cpu0
    run.threads = {
        name: cpu - threads0.get(name, 0.0)
        for name, cpu in thread_cpu(live.pid).items()
        if cpu - threads0.get(name, 0.0) >= 0.05
    }
    run.usage = measure_usage(cpu0, procs0, {live.pid, sender.pid, os.getpid()})
    live.send_signal(signal.SIGINT)
    try:
        live.wait(END_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        live.kill()
        live.wait(10)
        run.note = "live did not stop"
    for t in threads:
        t.join(10)
    summary = "".join(std)
    m = re.search(r"(\d+) packets analysed; libpcap dropped (\d+)", summary)
    if m is None:
        run.note = run.note or "no summary: " + "".join(err[-5:])
        return run
    run.captured, run.kernel_drops = int(m.group(1)), int(m.group(2))
    table = pq.read_table(out)
    run.written = table.num_rows
    if loops == 1:
        compare(run, replay, table, len(copies))
    else:  # a soak: every round's copies are new connections; pairs are counted only
        run.expected = replay.pairs * len(copies) * loops
        run.matched = min(run.written, run.expected)
        run.note = f"soak: {loops} rounds of {len(copies)} new copies, pairs counted only"
    out.unlink()
    return run


class Soak:
    """Rounds of new address-shifted copies for a long run: the next round's copies are
    written while the current one plays, the played ones deleted (a copy played twice
    would be the same connections again, which TCP takes for retransmissions)."""

    def __init__(self, replay: Replay, work: Path, first: list[Path], rounds: int) -> None:
        self.replay, self.work, self.per_round = replay, work, len(first)
        self.rounds, self.round, self.sent = rounds, 1, 0
        self.playing = first
        self._next: list[Path] = []
        self._maker = self._make(1)

    def _make(self, r: int) -> threading.Thread:
        def make() -> None:
            start = len(self.replay.paths) + (r - 1) * self.per_round + 1
            numbers = range(start, start + self.per_round)
            self._next = shifted_copies(self.replay.base, self.work, numbers)

        t = threading.Thread(target=make, daemon=True)
        t.start()
        return t

    def sender(self, rate: int) -> subprocess.Popen[str]:
        self.round += 1
        self._maker.join()
        for path in self.playing:
            if path not in self.replay.paths:
                path.unlink()
        self.playing = self._next
        if self.round < self.rounds:
            self._maker = self._make(self.round)
        return tcpreplay(self.playing, rate)

    def finished(self, output: str) -> None:
        self.sent += replay_stats(output)[0]


def drain_ring(live: subprocess.Popen[str], err: list[str], run: Run) -> str:
    """Continue live and time how long its view takes to count every packet that was
    sent (or, when the ring overflowed, until the count stops moving)."""
    started = time.monotonic()
    live.send_signal(signal.SIGCONT)
    deadline = started + END_TIMEOUT_S
    last, last_change = -1, started
    while time.monotonic() < deadline:
        counts = [int(m.group(1)) for m in map(PACKETS.search, list(err)[-60:]) if m]
        now = time.monotonic()
        if counts and counts[-1] != last:
            last, last_change = counts[-1], now
        if last >= run.sent or (last > 0 and now - last_change > 2.0):
            run.wall_s = last_change - started
            run.reached_pps = last / max(run.wall_s, 1e-9)  # live's own rate
            return ""
        time.sleep(0.02)
    return "the ring was not drained in time"


PACKETS = re.compile(r": packets (\d+) \|")


def compare(run: Run, replay: Replay, table: Any, loops: int) -> None:
    """Pairs of each copy (its own client address) against the offline pairs."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from dissector.live.view import gap_rows

    hashes = content_hashes(table)
    frame = pd.DataFrame({"copy": copy_of(table), "hash": hashes})
    counts = frame.groupby(["copy", "hash"]).size().rename("live")
    replayed = {copy_address(k)[: -len(".0/24")] for k in range(1, loops + 1)}
    offline = replay.oracle[replay.oracle.index.get_level_values("copy").isin(replayed)]
    run.expected = int(offline.sum())
    merged = pd.concat([counts, offline], axis=1).fillna(0)
    run.matched = int(np.minimum(merged["live"], merged["offline"]).sum())
    extra = merged[merged["live"] > merged["offline"]]
    if len(extra):  # say which rows differ from the offline ones
        odd = extra.index.get_level_values("hash").to_numpy()
        rows = table.filter(pa.array(np.isin(hashes, odd)))
        shown = ["client_ip", "client_port", "api_name", "correlation_id", "status", "flags"]
        print(f"         rows not in the offline analysis ({rows.num_rows}), first 5:")
        print(rows.select(shown).slice(0, 5).to_pandas().to_string())
    run.flagged = int(gap_rows(table).sum())
    if frame["copy"].nunique() > loops:
        run.note = f"{frame['copy'].nunique()} client networks for {loops} copies"


def run_tcpdump(replay: Replay, rate: int, seconds: float, buffer_mib: int) -> Run:
    copies = replay.copies_for(rate, min(seconds, SOAK_COPY_S))
    loops = max(1, math.ceil(seconds / SOAK_COPY_S))
    run = Run("tcpdump", rate, seconds, len(copies) * loops)
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-n", "-s", "262144", "-B", str(buffer_mib * 1024),
         "-w", "/dev/null", f"tcp port {PORT}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    err: list[str] = []
    t = reader(dump.stderr, err)
    wait_line(err, "listening on", dump)
    cpu0, procs0, dump_cpu0 = cpu_times(), all_proc_cpu(), proc_cpu(dump.pid)
    started = time.monotonic()
    sender = tcpreplay(copies, rate, loops)
    while sender.poll() is None:
        run.replay_cpu_s = max(run.replay_cpu_s, proc_cpu(sender.pid))
        time.sleep(0.2)
    output = sender.communicate()[0]
    run.wall_s = time.monotonic() - started
    run.sent, run.reached_pps = replay_stats(output)
    time.sleep(1.0)
    run.live_cpu_s = proc_cpu(dump.pid) - dump_cpu0
    run.usage = measure_usage(cpu0, procs0, {dump.pid, sender.pid, os.getpid()})
    dump.send_signal(signal.SIGINT)
    dump.wait(END_TIMEOUT_S)
    t.join(10)
    text = "".join(err)
    captured = re.search(r"(\d+) packets captured", text)
    dropped = re.search(r"(\d+) packets dropped by kernel", text)
    run.captured = int(captured.group(1)) if captured else 0
    run.kernel_drops = int(dropped.group(1)) if dropped else 0
    if run.captured < run.sent:
        run.note = f"{run.sent - run.captured} packets not captured"
    return run


# ---------------------------------------------------------------- report


def report(r: Run) -> None:
    cores = " ".join(f"{name} {pct:.0f}%" for name, pct in sorted(r.usage.cores.items()))
    others = ", ".join(f"{name} {cpu:.1f} s" for name, cpu in r.usage.others) or "none"
    line = (
        f"{r.tool:<8} rate {r.rate:>8}/s reached {r.reached_pps:>9.0f}/s  "
        f"sent {r.sent:>9} captured {r.captured:>9} kernel drops {r.kernel_drops:>7}"
    )
    if r.tool.startswith("live"):
        line += (
            f"  pairs expected {r.expected} written {r.written} matched {r.matched} "
            f"lost {r.lost} different {r.different} flagged {r.flagged}"
        )
    print(line)
    print(
        f"         {r.wall_s:.1f} s: {r.tool} CPU {r.live_cpu_s:.1f} s "
        f"({100 * r.live_cpu_s / max(r.wall_s, 1e-9):.0f}% of one core), tcpreplay CPU "
        f"{r.replay_cpu_s:.1f} s; cores: {cores}; load {r.usage.load[0]:.1f}; "
        f"others: {others}"
        + (f"; peak RSS {r.rss_peak_mib:.0f} MiB" if r.tool.startswith("live") else "")
        + (f"; {r.note}" if r.note else "")
        + ("  CLEAN" if r.clean else "  LOSS"),
        flush=True,
    )
    if r.threads:
        per_packet = {k: 1e6 * v / max(r.captured or r.sent, 1) for k, v in r.threads.items()}
        print(
            "         live threads: "
            + ", ".join(
                f"{name} {cpu:.1f} s ({per_packet[name]:.2f} us/packet)"
                for name, cpu in sorted(r.threads.items())
            )
        )
    if r.rss:
        print("         RSS (s, MiB): " + ", ".join(f"{t:.0f}:{m:.0f}" for t, m in r.rss))


def ceiling(runs: list[Run]) -> str:
    """Highest clean rate per round (the rate tcpreplay reached, which a busy machine
    may hold below the rate asked): min and median over the rounds."""
    rates = sorted({r.rate for r in runs})
    rounds = [runs[i : i + len(rates)] for i in range(0, len(runs), len(rates))]
    best = [max((r.reached_pps for r in rnd if r.clean), default=0.0) for rnd in rounds]
    return (
        f"highest clean rate reached over {len(rounds)} round(s): min {min(best):.0f}/s, "
        f"median {statistics.median(best):.0f}/s (each round: "
        + ", ".join(f"{b:.0f}" for b in best)
        + ")"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--capture", required=True, help="a real Kafka capture to replay")
    ap.add_argument("--port", type=int, help="its broker port (default: found in it)")
    ap.add_argument("--rates", default="200000,300000,400000", help="packets/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=30.0, help="replay length per run")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over the rates")
    ap.add_argument("--buffer-mib", type=int, default=64, help="kernel ring (live and tcpdump)")
    ap.add_argument("--tcpdump", action="store_true", help="also tcpdump at each rate")
    ap.add_argument("--rss", action="store_true", help="print live's RSS every 10 s")
    ap.add_argument(
        "--drain",
        action="store_true",
        help="live's own rate: the ring filled while live is stopped, then emptied "
        "(use a --buffer-mib large enough for rate x seconds x ~330 bytes)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("capturing on lo needs root")
    for tool in ("tcpreplay", "tcprewrite", "editcap", "capinfos") + (
        ("tcpdump",) if args.tcpdump else ()
    ):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install tcpreplay tcpdump tshark)")
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="live-bench-") as tmp:
        work = Path(tmp)
        span = min(args.seconds, SOAK_COPY_S)
        copies = math.ceil(max(rates) * span / capture_packets(args.capture))
        replay = prepare(args.capture, args.port, work, copies)
        print(
            f"{args.capture}: {replay.packets} packets, {replay.pairs} pairs per loop; "
            f"runs of {args.seconds:.0f} s; ring {args.buffer_mib} MiB; "
            f"{os.cpu_count()} cores; load before {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        live_runs: list[Run] = []
        dump_runs: list[Run] = []
        for _ in range(args.repeat):
            for rate in rates:
                r = run_live(
                    replay,
                    rate,
                    args.seconds,
                    args.buffer_mib,
                    work,
                    10.0 if args.rss else 0.0,
                    drain=args.drain,
                )
                report(r)
                live_runs.append(r)
                if args.tcpdump:
                    d = run_tcpdump(replay, rate, args.seconds, args.buffer_mib)
                    report(d)
                    dump_runs.append(d)
        print(f"live: {ceiling(live_runs)}")
        if dump_runs:
            print(f"tcpdump: {ceiling(dump_runs)}")
        reached = [r.reached_pps for r in live_runs + dump_runs]
        print(f"tcpreplay reached at most {max(reached):.0f} packets/s in this setup")


if __name__ == "__main__":
    main()
