"""Which capture library keeps up on loopback: pcapy-ng (libpcap) or scapy's sniffing.

A child process sends UDP datagrams to a sink on 127.0.0.1 at a fixed rate; the
capture under test counts what it sees with a BPF filter for that port. Each run
reports packets captured, packets lost (sent minus captured, an independent count)
and the drops the capture layer itself reports. UDP keeps the arithmetic exact:
one send is one packet on ``lo`` (TCP would add ACKs and coalesce writes).

    python benchmarks/live_capture.py                 # default rates, all backends
    python benchmarks/live_capture.py --rates 20000,80000 --seconds 1 --backends pcapy-batch

Backends:
  pcapy-batch  pcapy-ng ``next_batch`` (one C call per batch), 32 MiB ring
  pcapy-next   pcapy-ng ``next`` (one C call per packet), 32 MiB ring
  pcapy-live   what ``kafka-dissector live`` does per frame: ``next_batch`` plus the
               link/IP/TCP parser (``capture.parse_frame``) on every frame
  scapy-sniff  ``scapy.sendrecv.sniff`` with its default dissection, as shipped
  scapy-raw    scapy's ``L2ListenSocket.recv_raw`` without dissection, as shipped

Whole pipeline (capture + reassembly + decoding, what ``kafka-dissector live`` does):

    python benchmarks/live_capture.py --times 20 \\
        --pipeline ../shared/captures/local-tansu-confluent-kafka.pcapng

replays the capture's request/response bytes over real loopback connections (a
separate process plays client and broker) and reports pairs/s and drops.
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


def pcapy_live(
    bpf: str, want: int, deadline: float, ready: threading.Event
) -> tuple[set[int], int, int]:
    """next_batch plus the per-frame parse live capture performs (UDP frames are
    counted as non-TCP by the parser, which still walks link and IP headers)."""
    from dissector.accounting import Counters
    from tests.oracle.capture import parse_frame

    counters = Counters()
    cache: dict[bytes, str] = {}
    cap = _pcapy_open(bpf)
    linktype = cap.datalink()
    unpack = struct.Struct("=IIII").unpack_from
    ready.set()
    seen: set[int] = set()
    frames = 0
    while len(seen) < want and time.monotonic() < deadline:
        data, meta = cap.next_batch(1024)
        if not meta:
            _wait(cap)
        for i in range(0, len(meta), 16):
            sec, usec, off, caplen = unpack(meta, i)
            frames += 1
            frame = data[off : off + caplen]
            parse_frame(linktype, frame, frames, sec * 10**9 + usec * 1000, counters, cache)
            seen.add(_seq(frame))
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
    "pcapy-live": pcapy_live,
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


# ---------------------------------------------------------------------------
# Whole live pipeline: a recorded Kafka capture replayed over loopback


def _exchanges_bytes(capture: str) -> list[list[tuple[bytes, bytes]]]:
    """Per connection, each (request, response) as wire bytes with the size prefix."""
    from tests.oracle.pipeline import iter_exchanges

    conns: dict[int, list[tuple[bytes, bytes]]] = {}
    for _path, ex in iter_exchanges(capture):
        if ex.request is None or ex.response is None:
            continue
        req, resp = ex.request.payload, ex.response.payload
        conns.setdefault(ex.stream, []).append(
            (struct.pack(">i", len(req)) + req, struct.pack(">i", len(resp)) + resp)
        )
    return list(conns.values())


def _recv_n(sock: socket.socket, n: int) -> None:
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed")
        n -= len(chunk)


def _replay(port: int, conns: list[list[tuple[bytes, bytes]]], times: int, go: Any) -> None:
    """Client and broker sides in one process: request, response, request, ..."""
    go.wait(10)
    srv = socket.create_server(("127.0.0.1", port))
    for _ in range(times):
        for exchanges in conns:
            client = socket.create_connection(("127.0.0.1", port), timeout=10)
            server, _ = srv.accept()
            server.settimeout(10)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for req, resp in exchanges:
                client.sendall(req)
                _recv_n(server, len(req))
                server.sendall(resp)
                _recv_n(client, len(resp))
            client.close()
            server.close()
    srv.close()


def pipeline(capture: str, times: int, buffer_mib: int) -> None:
    """Replay ``capture``'s exchanges ``times`` times while ``LiveCapture`` decodes them."""
    from dissector.live import LiveCapture, LiveOptions

    conns = _exchanges_bytes(capture)
    expected = sum(len(c) for c in conns) * times
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    cap = LiveCapture(
        LiveOptions("lo", ports=frozenset({port}), duration=600, buffer_mib=buffer_mib)
    )
    go = multiprocessing.Event()
    sender = multiprocessing.Process(target=_replay, args=(port, conns, times, go), daemon=True)
    sender.start()
    pairs = 0
    start = time.monotonic()
    go.set()
    sent_done: float | None = None
    for ev in cap.events():
        if getattr(ev, "status", None) in ("ok", "error"):
            pairs += 1
        if sent_done is None and not sender.is_alive():
            sent_done = time.monotonic()
        if pairs >= expected or (sent_done is not None and time.monotonic() - sent_done > 5):
            cap.stop("done")
    elapsed = time.monotonic() - start
    sender.join(5)
    stats = cap.final_stats
    print(
        f"replayed {expected} pairs ({times} x {capture}); live decoded {pairs} pairs, "
        f"{cap.frames} packets in {elapsed:.2f} s = {pairs / elapsed:.0f} pairs/s, "
        f"{cap.frames / elapsed:.0f} packets/s; libpcap received {stats.received}, "
        f"dropped {stats.dropped}; pairs flagged {cap.flagged}; ring {buffer_mib} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rates", default="10000,30000,60000,100000")
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--pipeline", metavar="CAPTURE", help="replay CAPTURE through live instead")
    ap.add_argument("--times", type=int, default=20, help="replays of CAPTURE (--pipeline)")
    ap.add_argument("--buffer-mib", type=int, default=32, help="ring size (--pipeline)")
    args = ap.parse_args()
    if args.pipeline:
        pipeline(args.pipeline, args.times, args.buffer_mib)
        return
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
