"""Whole-pipeline throughput against tshark, timed in one run with contenders alternating.

    python benchmarks/throughput.py [CAPTURE] [--repeat N] [--runs R] [--port P]
    python benchmarks/throughput.py TLS_CAPTURE --tls-keylog KEYS --port P [--mss 1448]
    python benchmarks/throughput.py [CAPTURE] --baseline OTHER_CHECKOUT [--no-tshark]

Contenders, each run R times in turn (A B C A B C ...), min and median reported:

* ``cli``: ``kafka-dissector analyze FILE -o x.parquet --quiet`` (a new process: start-up,
  spec model, native core, Parquet);
* ``api``: ``dissector.analyze(FILE)`` in this process (the pandas DataFrame);
* ``base`` (with ``--baseline DIR``): the same command by the ``kafka-dissector`` of another
  checkout (``DIR/.venv/bin``, built there), to show a change does not slow ``analyze``:
  ratios base/cli of wall and CPU time are printed;
* ``tshark``: ``tshark -n -r FILE -d tcp.port==P,kafka -T fields -e frame.number
  -e kafka.api_key -e kafka.correlation_id -e kafka.error`` (its Kafka dissector, one
  pass, output discarded).

With ``--tls-keylog`` the capture is Kafka over TLS: ours decrypt with the key log
(``--tls-keylog``), tshark with ``-o tls.keylog_file:KEYS -d tls.port==P,kafka``; the
decrypted plaintext per second is printed too.

Ratios are tshark time / ours. Also printed: packets/s, pairs/s, the CLI's CPU time
(user + system of the child: less sensitive than wall time to other work on the
machine, so the load average is printed beside it), peak RSS of the CLI (ru_maxrss of
the child) and of the in-process run (growth of this process's peak), and the
DataFrame's bytes per pair (``memory_usage(deep=True)``).

The CLI runs as an installed package does: its bytecode is written by the untimed
warm-up run even where ``PYTHONDONTWRITEBYTECODE`` is set, and its start-up cache (a
folder of its own, also filled by the warm-up run) is not evicted by other checkouts.

Captures: by default the large long-poll capture recorded by
``python -m scripts.testbed.longpoll --out out/longpoll.pcapng`` (not committed: too
large), else the shared tansu capture. ``--repeat N`` enlarges a small capture to N
copies with shifted client ports (separate connections).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LONGPOLL = REPO / "out" / "longpoll.pcapng"
SHARED = REPO.parent / "shared" / "captures" / "local-tansu-confluent-kafka.pcapng"


def enlarge(src: Path, copies: int, dst: Path, port: int) -> int:
    """Write ``copies`` copies of an Ethernet/IPv4 capture, client ports shifted per copy."""
    import dpkt

    with open(src, "rb") as fh:
        reader = dpkt.pcapng.Reader(fh) if src.suffix == ".pcapng" else dpkt.pcap.Reader(fh)
        # float: a nanosecond pcap gives Decimal times (sub-microsecond loss is harmless here)
        frames = [(float(ts), bytes(buf)) for ts, buf in reader]
    span = (frames[-1][0] - frames[0][0]) + 1.0 if frames else 1.0
    n = 0
    with open(dst, "wb") as out:
        writer = dpkt.pcap.Writer(out, nano=True)
        for k in range(copies):
            for ts, buf in frames:
                writer.writepkt(_shift_client_port(buf, k, port), ts + k * span)
                n += 1
    return n


def resegment(src: Path, mss: int, dst: Path) -> int:
    """Write ``src`` with every TCP payload longer than ``mss`` cut into ``mss``-byte
    segments (consecutive sequence numbers, 1 ns apart): a loopback capture (64 KiB
    segments) as a 1500-byte-MTU network carries it. Returns the packets written."""
    import dpkt

    with open(src, "rb") as fh:
        reader = dpkt.pcapng.Reader(fh) if src.suffix == ".pcapng" else dpkt.pcap.Reader(fh)
        frames = [(float(ts), bytes(buf)) for ts, buf in reader]
    n = 0
    with open(dst, "wb") as out:
        writer = dpkt.pcap.Writer(out, nano=True)
        for ts, buf in frames:
            eth = dpkt.ethernet.Ethernet(buf)
            ip, tcp = eth.data, getattr(eth.data, "data", None)
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(tcp, dpkt.tcp.TCP):
                writer.writepkt(buf, ts)
                n += 1
                continue
            payload = bytes(tcp.data)
            for i, at in enumerate(range(0, max(len(payload), 1), mss)):
                piece = payload[at : at + mss]
                seg = dpkt.tcp.TCP(bytes(tcp))
                seg.seq = (tcp.seq + at) & 0xFFFFFFFF
                seg.data, seg.sum = piece, 0
                part = dpkt.ip.IP(bytes(ip))
                part.data, part.sum = seg, 0
                part.len = part.__hdr_len__ + len(part.opts) + len(bytes(seg))
                frame = dpkt.ethernet.Ethernet(bytes(eth))
                frame.data = part
                writer.writepkt(bytes(frame), ts + i * 1e-9)
                n += 1
    return n


def _shift_client_port(buf: bytes, k: int, port: int) -> bytes:
    if k == 0 or len(buf) < 14 + 20 + 4 or buf[12:14] != b"\x08\x00":
        return buf
    ihl = (buf[14] & 0x0F) * 4
    t = 14 + ihl
    sport, dport = struct.unpack_from(">HH", buf, t)
    # The client side is the one that is not the broker port.
    if dport == port:
        sport = (sport + 97 * k) % 65536
    elif sport == port:
        dport = (dport + 97 * k) % 65536
    return buf[:t] + struct.pack(">HH", sport, dport) + buf[t + 4 :]


def _child(cmd: list[str], cache: Path | None = None) -> tuple[float, int, float]:
    """Wall time, peak RSS (bytes) and CPU time (user + system) of one child process;
    ``cache``: the start-up cache folder it gets (``XDG_CACHE_HOME``)."""
    # As an installed package runs: its bytecode written once (the warm-up run), not
    # compiled again by every run when the environment says not to write it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if cache is not None:
        # A start-up cache of its own: checkouts of other sources share the user's and
        # evict its entries, which would add a spec build (0.7 s) to some runs. Bytecode
        # goes there too: nothing is written into the checkout measured (a baseline's).
        env["XDG_CACHE_HOME"] = str(cache)
        env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return took, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def cli_command(path: Path, out: Path, keylog: Path | None = None) -> list[str]:
    exe = shutil.which("kafka-dissector") or str(Path(sys.executable).parent / "kafka-dissector")
    tls = ["--tls-keylog", str(keylog)] if keylog else []
    return [exe, "analyze", str(path), "-o", str(out), "--quiet", *tls]


def tshark_command(path: Path, port: int, keylog: Path | None = None) -> list[str] | None:
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    fields = ["frame.number", "kafka.api_key", "kafka.correlation_id", "kafka.error"]
    decode = ["-d", f"tcp.port=={port},kafka"]
    if keylog:
        decode = ["-o", f"tls.keylog_file:{keylog}", "-d", f"tls.port=={port},kafka"]
    cmd = [tshark, "-n", "-r", str(path), *decode, "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    return cmd


def run_api(path: Path, keylog: Path | None = None) -> tuple[float, int, int, float, int]:
    import dissector

    gc.collect()
    t0 = time.perf_counter()
    df = dissector.analyze(path, tls_keylog=keylog or ())
    took = time.perf_counter() - t0
    per_pair = df.memory_usage(deep=True).sum() / max(len(df), 1)
    counters = df.attrs["counters"]
    plain = int(counters.get("tls_plaintext_bytes", 0))
    return took, len(df), int(counters.get("frames", 0)), per_pair, plain


def _stats(xs: list[float]) -> str:
    return f"min {min(xs):.3f} s, median {statistics.median(xs):.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path)
    ap.add_argument("--repeat", type=int, default=1, help="copies of the capture (default 1)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each contender (default 5)")
    ap.add_argument("--port", type=int, default=9092, help="broker port for tshark")
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--tls-keylog", type=Path, help="the capture is TLS: decrypt with this key log")
    ap.add_argument("--mss", type=int, help="cut TCP payloads to this size first (e.g. 1448)")
    ap.add_argument(
        "--baseline", type=Path, help="another checkout: its CLI (DIR/.venv/bin) runs as 'base'"
    )
    args = ap.parse_args()
    base_exe = args.baseline / ".venv" / "bin" / "kafka-dissector" if args.baseline else None
    if base_exe is not None and not base_exe.exists():
        print(
            f"no kafka-dissector in {base_exe.parent}: install that checkout first", file=sys.stderr
        )
        return 2
    capture = args.capture or (LONGPOLL if LONGPOLL.exists() else SHARED)
    if not capture.exists():
        print(f"capture not found: {capture}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        path = capture
        if args.repeat > 1:
            path = Path(tmp) / "bench.pcap"
            enlarge(capture, args.repeat, path, args.port)
        if args.mss:
            cut = Path(tmp) / "mss.pcap"
            resegment(path, args.mss, cut)
            path = cut
        out = Path(tmp) / "pairs.parquet"
        size = os.path.getsize(path)
        keylog = args.tls_keylog
        cli_cmd = cli_command(path, out, keylog)
        ts_cmd = None if args.no_tshark else tshark_command(path, args.port, keylog)
        cache = Path(tmp) / "cache"
        # warm the page cache and the spec-model cache once, untimed
        _child(cli_cmd, cache)
        base_cmd = base_cache = None
        if base_exe is not None:
            base_cmd = [str(base_exe), *cli_cmd[1:]]
            base_cmd[base_cmd.index(str(out))] = str(Path(tmp) / "base.parquet")
            base_cache = Path(tmp) / "base-cache"
            _child(base_cmd, base_cache)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        times: dict[str, list[float]] = {"cli": [], "api": [], "tshark": [], "base": []}
        cli_rss: list[int] = []
        cli_cpu: list[float] = []
        base_cpu: list[float] = []
        tshark_cpu: list[float] = []
        rows = packets = 0
        per_pair = 0.0
        plain = 0
        for _ in range(args.runs):
            took, rss, cpu = _child(cli_cmd, cache)
            times["cli"].append(took)
            cli_rss.append(rss)
            cli_cpu.append(cpu)
            took, rows, packets, per_pair, plain = run_api(path, keylog)
            times["api"].append(took)
            if base_cmd is not None:
                took, _, cpu = _child(base_cmd, base_cache)
                times["base"].append(took)
                base_cpu.append(cpu)
            if ts_cmd is not None:
                took, _, cpu = _child(ts_cmd)
                times["tshark"].append(took)
                tshark_cpu.append(cpu)
        api_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before

    print(f"capture: {capture.name} x{args.repeat}: {packets:,} packets, {rows:,} pairs, "
          f"{size / 1e6:.1f} MB; {args.runs} runs each, alternating")  # fmt: skip
    for name in ("cli", "api"):
        t = times[name]
        print(f"{name:7} {_stats(t)}; {packets / min(t):,.0f} packets/s, "
              f"{rows / min(t):,.0f} pairs/s")  # fmt: skip
    print(f"cli CPU (user + system) {_stats(cli_cpu)}; load average {os.getloadavg()[0]:.1f}")
    if keylog:
        t = min(times["api"])
        print(f"TLS: {plain / 1e6:.1f} MB of plaintext decrypted; api {size / 1e6 / t:.0f} MB/s of "
              f"capture, {plain / 1e6 / t:.0f} MB/s of plaintext")  # fmt: skip
    print(f"cli peak RSS {max(cli_rss) / 2**20:.0f} MiB; in-process peak growth "
          f"{max(api_rss, 0) / 2**20:.0f} MiB; DataFrame {per_pair:.0f} bytes/pair")  # fmt: skip
    if times["base"]:
        b, c = times["base"], times["cli"]
        print(f"base    {_stats(b)}; CPU {_stats(base_cpu)} ({args.baseline})")
        print(f"ratio base/cli wall time: min-to-min {min(b) / min(c):.2f}x, "
              f"median {statistics.median(b) / statistics.median(c):.2f}x; CPU time: "
              f"min-to-min {min(base_cpu) / min(cli_cpu):.2f}x, "
              f"median {statistics.median(base_cpu) / statistics.median(cli_cpu):.2f}x "
              "(above 1: this checkout is faster)")  # fmt: skip
    if times["tshark"]:
        ts = times["tshark"]
        print(f"tshark  {_stats(ts)}; CPU {_stats(tshark_cpu)}")
        cpu_med = statistics.median(tshark_cpu) / statistics.median(cli_cpu)
        print(f"ratio tshark/cli CPU time: min-to-min {min(tshark_cpu) / min(cli_cpu):.1f}x, "
              f"median {cpu_med:.1f}x")  # fmt: skip
        for name in ("cli", "api"):
            t = times[name]
            print(f"ratio tshark/{name}: min-to-min {min(ts) / min(t):.1f}x, "
                  f"median {statistics.median(ts) / statistics.median(t):.1f}x")  # fmt: skip
    else:
        print("tshark not run: no comparison")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
