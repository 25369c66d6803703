"""Which capture library keeps up on loopback: pcapy-ng (libpcap) or scapy's sniffing.

A child process sends UDP datagrams to a sink on 127.0.0.1 at a fixed rate; the
capture under test counts what it sees with a BPF filter for that port. Each run
reports packets captured, packets lost (sent minus captured, an independent count)
and the drops the capture layer itself reports. UDP keeps the arithmetic exact:
one send is one packet on ``lo`` (TCP would add ACKs and coalesce writes).

    python benchmarks/capture_libraries.py            # default rates, all backends
    python benchmarks/capture_libraries.py --rates 20000,80000 --seconds 1 --backends pcapy-batch

Why ``live`` reads libpcap (now inside the native core) and not scapy. The product
itself, replayed real Kafka traffic through ``kafka-dissector live``, is measured by
``benchmarks/live_capture.py``.

Backends:
  pcapy-batch  pcapy-ng ``next_batch`` (one C call per batch), 32 MiB ring
  pcapy-next   pcapy-ng ``next`` (one C call per packet), 32 MiB ring
  scapy-sniff  ``scapy.sendrecv.sniff`` with its default dissection, as shipped
  scapy-raw    scapy's ``L2ListenSocket.recv_raw`` without dissection, as shipped

"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

IFACE = "lo"
PAYLOAD = 200
RING_BYTES = 32 * 1024 * 1024
# PACKET_STATISTICS (linux/if_packet.h): tp_packets, tp_drops; reading resets them.
SOL_PACKET = 263
PACKET_STATISTICS = 6


@dataclass
class Result:
    backend: str
    rate: int
    sent: int
    captured: int  # distinct datagrams seen
    frames: int  # frames the library delivered (scapy on lo sees each packet twice)
    reported_drops: int
    seconds: float
    achieved: float  # the rate the sender really reached (a loaded host may not reach ``rate``)

    @property
    def lost(self) -> int:
        return max(self.sent - self.captured, 0)


def _blast(port: int, count: int, rate: int, ready: Any, took: Any) -> None:
    """Send ``count`` datagrams at ``rate`` per second, in small paced bursts."""
    ready.wait(10)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = b"k" * (PAYLOAD - 4)
    burst = max(rate // 1000, 1)  # one burst per millisecond
    start = time.perf_counter()
    sent = 0
    while sent < count:
        for seq in range(sent, min(sent + burst, count)):
            sock.sendto(seq.to_bytes(4, "big") + pad, ("127.0.0.1", port))
        sent += burst
        ahead = sent / rate - (time.perf_counter() - start)
        if ahead > 0:
            time.sleep(ahead)
    took.value = time.perf_counter() - start
    sock.close()


def _sink() -> tuple[socket.socket, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    return sock, sock.getsockname()[1]


Capture = Callable[[str, int, float, threading.Event], tuple[set[int], int, int]]
"""(bpf, packets wanted, deadline, ready) -> (sequence numbers seen, frames read,
drops the library reports)."""


def _seq(data: bytes) -> int:
    return int.from_bytes(data[-PAYLOAD : -PAYLOAD + 4], "big")


def _pcapy_open(bpf: str) -> Any:  # pcapy has no type stubs
    import pcapy

    cap = pcapy.create(IFACE)
    cap.set_snaplen(65535)
    cap.set_promisc(False)
    cap.set_timeout(50)
    cap.set_buffer_size(RING_BYTES)
    cap.activate()
    cap.setfilter(bpf)
    # Non-blocking plus select: a blocking TPACKET_V3 read can wait forever when idle.
    cap.setnonblock(1)
    return cap


def _wait(cap: Any) -> None:
    select.select([cap.getfd()], [], [], 0.05)


def pcapy_batch(
    bpf: str, want: int, deadline: float, ready: threading.Event
) -> tuple[set[int], int, int]:
    cap = _pcapy_open(bpf)
    unpack = struct.Struct("=IIII").unpack_from
    ready.set()
    seen: set[int] = set()
    frames = 0
    while len(seen) < want and time.monotonic() < deadline:
        data, meta = cap.next_batch(1024)
        if not meta:
            _wait(cap)
        for i in range(0, len(meta), 16):
            _sec, _usec, off, caplen = unpack(meta, i)
            frames += 1
            seen.add(_seq(data[off : off + caplen]))
    drops = cap.stats()[1]
    cap.close()
    return seen, frames, drops


def pcapy_next(
    bpf: str, want: int, deadline: float, ready: threading.Event
) -> tuple[set[int], int, int]:
    cap = _pcapy_open(bpf)
    ready.set()
    seen: set[int] = set()
    frames = 0
    while len(seen) < want and time.monotonic() < deadline:
        hdr, data = cap.next()
        if hdr is not None and data:
            frames += 1
            seen.add(_seq(data))
        else:
            _wait(cap)
    drops = cap.stats()[1]
    cap.close()
    return seen, frames, drops


def _packet_socket_drops(sock: socket.socket) -> int:
    raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
    return struct.unpack("=II", raw)[1]


def scapy_sniff(
    bpf: str, want: int, deadline: float, ready: threading.Event
) -> tuple[set[int], int, int]:
    from scapy.compat import raw
    from scapy.config import conf
    from scapy.sendrecv import sniff

    sock = conf.L2listen(iface=IFACE, filter=bpf)
    seen: set[int] = set()
    frames = 0

    def count(pkt: object) -> None:
        nonlocal frames
        frames += 1
        seen.add(_seq(raw(pkt)))

    ready.set()
    sniff(
        opened_socket=sock,
        prn=count,
        store=False,
        stop_filter=lambda _p: len(seen) >= want,
        timeout=max(deadline - time.monotonic(), 0.1),
    )
    drops = _packet_socket_drops(sock.ins)
    sock.close()
    return seen, frames, drops


def scapy_raw(
    bpf: str, want: int, deadline: float, ready: threading.Event
) -> tuple[set[int], int, int]:
    from scapy.config import conf

    sock = conf.L2listen(iface=IFACE, filter=bpf)
    ready.set()
    seen: set[int] = set()
    frames = 0
    while len(seen) < want and time.monotonic() < deadline:
        if not select.select([sock.ins], [], [], 0.05)[0]:
            continue
        _cls, data, _ts = sock.recv_raw()
        if data is not None:
            frames += 1
            seen.add(_seq(data))
    drops = _packet_socket_drops(sock.ins)
    sock.close()
    return seen, frames, drops


BACKENDS: dict[str, Capture] = {
    "pcapy-batch": pcapy_batch,
    "pcapy-next": pcapy_next,
    "scapy-sniff": scapy_sniff,
    "scapy-raw": scapy_raw,
}


def run(backend: str, rate: int, seconds: float) -> Result:
    sink, port = _sink()
    count = int(rate * seconds)
    bpf = f"udp and dst port {port}"
    ready = threading.Event()
    go = multiprocessing.Event()
    took = multiprocessing.Value("d", 0.0)
    sender = multiprocessing.Process(target=_blast, args=(port, count, rate, go, took), daemon=True)
    sender.start()
    stop_drain = threading.Event()

    def drain() -> None:
        # Keep the sink's buffer empty so the kernel never refuses datagrams.
        sink.settimeout(0.05)
        while not stop_drain.is_set():
            with contextlib.suppress(TimeoutError):
                sink.recv(65536)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    out: dict[str, tuple[set[int], int, int]] = {}
    start = time.monotonic()
    # Long enough to drain a full ring: loss must come from drops, not from this limit.
    deadline = start + max(15.0, seconds * 10)

    def capture() -> None:
        out["r"] = BACKENDS[backend](bpf, count, deadline, ready)

    capturer = threading.Thread(target=capture)
    capturer.start()
    ready.wait(10)
    time.sleep(0.2)  # the socket/filter is attached; let it settle
    go.set()
    sender.join(max(15.0, seconds * 10) + 5)
    capturer.join(max(15.0, seconds * 10) + 5)
    elapsed = time.monotonic() - start
    stop_drain.set()
    drainer.join(1)
    sink.close()
    if sender.is_alive():
        sender.kill()
    seen, frames, drops = out.get("r", (set(), 0, 0))
    achieved = count / took.value if took.value > 0 else 0.0
    return Result(backend, rate, count, len(seen), frames, drops, elapsed, achieved)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="10000,30000,60000,100000")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    print(
        f"{'backend':<12} {'rate/s':>8} {'sent/s':>8} {'sent':>8} {'captured':>9} {'lost':>7} "
        f"{'lost%':>6} {'frames':>8} {'lib drops':>9}"
    )
    for backend in args.backends.split(","):
        for rate in rates:
            r = run(backend, rate, args.seconds)
            pct = 100 * r.lost / r.sent if r.sent else 0.0
            print(
                f"{r.backend:<12} {r.rate:>8} {r.achieved:>8.0f} {r.sent:>8} {r.captured:>9} "
                f"{r.lost:>7} {pct:>6.1f} {r.frames:>8} {r.reported_drops:>9}",
                flush=True,
            )


if __name__ == "__main__":
    main()
