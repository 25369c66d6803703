"""Live capture: a network interface through the same pipeline as capture files.

``kafka-dissector live -i IFACE`` and ``dissector.live(iface)`` read link-layer
frames with libpcap and feed them to the native core (``core.LiveSession``), the same
link parser, reassembly, framing, correlation and summary that offline analysis uses:
each exists once. Rows are ``rows.PairRecord``, so a live row and an offline row of
the same bytes are equal (``capture`` names ``live:IFACE``).

Why pcapy-ng (libpcap) and not scapy: on loopback (a busy 2-core VM) pcapy-ng with
a 32 MiB ring lost no packet at any rate the sender reached (up to ~48,000 packets/s,
300,000 packets in a row), with or without our per-frame parse, while scapy's
``sniff`` lost 10-55 % at 10,000 packets/s and ~90 % from 30,000/s, and its raw
socket 60-70 % from 30,000/s (it also sees every loopback packet twice). libpcap
reports its own drop counts (``pcap_stats``), sizes the kernel ring and compiles BPF
in-process. Method and numbers: ``benchmarks/live_capture.py``.

How stopping works: ``stop()`` (signal handlers, another thread), ``duration``,
``count`` and Ctrl-C all end the read loop the same way. Frames already in the
kernel buffer from before the stop are drained, the session is finished (requests
still open become ``unanswered`` rows), the pcap is flushed and closed. Only frames
that went through the pipeline are written to ``write_pcap``, so the offline
analysis of that file equals the live result.

Lost packets: libpcap's drop counts are reported with every interval; a pair whose
request or response is the first frame found after a hole in the captured bytes
(lost packets, or a connection already open when the capture started) gets the
``capture_gap`` in ``flags``, and a response whose request was lost is
an ``orphan_response``, so loss is visible rather than silently wrong.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from dissector.accounting import Counters
from dissector.live.view import CAPTURE_GAP_NOTE, CaptureHealth, LiveStats, Snapshot
from dissector.options import DEFAULT_BROKER_PORTS, Options
from dissector.stages import PairRecord
from dissector.wire.core import LiveSession

# A connection silent for this long is closed (its open requests become
# unanswered) so that a long live run does not hold every connection it saw.
LIVE_IDLE_TIMEOUT_S = 600.0

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SNAPLEN = 262_144  # libpcap's default; loopback MTU is 65,536
DEFAULT_BUFFER_MIB = 32  # kernel ring; absorbs bursts while Python decodes
DEFAULT_INTERVAL = 1.0
BATCH = 1024  # frames per read call
BLOCK_TIMEOUT_MS = 50  # TPACKET_V3 hands over a partly filled block after this long
POLL_S = 0.1  # longest wait for packets before checking stop conditions
# Safety bound on reading what was buffered before a stop. The drain ends by itself at
# the first frame newer than the stop or an empty read, so at most a ring's worth is
# read; this only matters when decoding that ring is very slow.
DRAIN_LIMIT_S = 30.0

# libpcap's pcap_activate() results (pcap/pcap.h); pcapy returns them unchanged.
_PCAP_ERRORS = {
    -1: "generic error",
    -5: "no such device",
    -6: "monitor mode not supported",
    -8: "permission denied",
    -9: "interface is not up",
    -11: "permission denied for promiscuous mode",
}
_PCAP_PERM_DENIED = (-8, -11)
_PCAP_NO_SUCH_DEVICE = -5

# DLT values that differ from the LINKTYPE values stored in files (libpcap's table).
_DLT_TO_LINKTYPE = {12: 101, 14: 101}

_PRIVILEGE_HINT = (
    "capturing needs root or the CAP_NET_RAW and CAP_NET_ADMIN capabilities "
    "(e.g. sudo, or: sudo setcap cap_net_raw,cap_net_admin=eip <path of the python binary>)"
)


class LiveError(Exception):
    """The capture cannot start: no such interface, no privileges, a bad filter, ..."""


@dataclass(frozen=True, slots=True)
class CaptureStats:
    """libpcap's counters (pcap_stats): packets received, dropped by the kernel
    buffer, dropped by the interface or driver."""

    received: int = 0
    dropped: int = 0
    if_dropped: int = 0


def default_filter(ports: Iterable[int] | None = None) -> str:
    """The BPF filter for the broker ports (the usual Kafka ports when none are given)."""
    chosen = sorted(set(ports)) if ports else sorted(DEFAULT_BROKER_PORTS)
    return "tcp and (" + " or ".join(f"port {p}" for p in chosen) + ")"


# ---------------------------------------------------------------------------
# Packet source: libpcap through pcapy-ng


def _import_pcapy() -> Any:
    try:
        import pcapy
    except ImportError as exc:
        raise LiveError(
            "live capture needs pcapy-ng (libpcap bindings): pip install 'kafka-dissector[live]'"
        ) from exc
    return pcapy


class PcapSource:
    """One live libpcap handle in non-blocking mode, read in batches with a timeout.

    Non-blocking plus ``select`` because with TPACKET_V3 a blocking read waits for
    the next packet however long that takes, so a quiet interface would never let
    the loop see a stop request.
    """

    def __init__(
        self,
        iface: str,
        bpf: str,
        *,
        snaplen: int = DEFAULT_SNAPLEN,
        buffer_bytes: int = DEFAULT_BUFFER_MIB << 20,
    ) -> None:
        pcapy = _import_pcapy()
        self.iface = iface
        self.bpf = bpf
        self.snaplen = snaplen
        _check_interface(pcapy, iface)
        _check_filter(pcapy, bpf, snaplen)
        cap = pcapy.create(iface)
        cap.set_snaplen(snaplen)
        cap.set_promisc(False)
        cap.set_timeout(BLOCK_TIMEOUT_MS)
        cap.set_buffer_size(buffer_bytes)
        try:
            status = cap.activate()
        except pcapy.PcapError as exc:
            raise _activation_error(pcapy, iface, str(exc)) from exc
        if status is not None and status < 0:
            raise _activation_error(
                pcapy, iface, _PCAP_ERRORS.get(status, f"error {status}"), status
            )
        try:
            cap.setfilter(bpf)
        except pcapy.PcapError as exc:
            cap.close()
            raise LiveError(f"bad capture filter {bpf!r} on {iface}: {exc}") from exc
        cap.setnonblock(1)
        self._cap = cap
        self._error = pcapy.PcapError
        self._fd = cap.getfd()
        self._batched = hasattr(cap, "next_batch")  # pcapy-ng >= 2.0
        self._meta = struct.Struct("=IIII")
        dlt = cap.datalink()
        self.linktype = _DLT_TO_LINKTYPE.get(dlt, dlt)

    def read(self, timeout: float) -> list[tuple[int, bytes]]:
        """Up to ``BATCH`` frames as (ts_ns, bytes); empty after ``timeout`` seconds idle."""
        frames = self._read_now()
        if frames or timeout <= 0:
            return frames
        try:
            ready, _, _ = select.select([self._fd], [], [], timeout)
        except InterruptedError:  # a signal arrived: let the caller look at it
            return []
        return self._read_now() if ready else []

    def _read_now(self) -> list[tuple[int, bytes]]:
        try:
            return self._read_batch()
        except self._error as exc:  # e.g. the interface went away
            raise LiveError(f"capture on {self.iface} failed: {exc}") from exc

    def _read_batch(self) -> list[tuple[int, bytes]]:
        if self._batched:
            data, meta = self._cap.next_batch(BATCH)
            unpack = self._meta.unpack_from
            out = []
            for i in range(0, len(meta), 16):
                sec, usec, off, caplen = unpack(meta, i)
                out.append((sec * 1_000_000_000 + usec * 1000, data[off : off + caplen]))
            return out
        out = []
        for _ in range(BATCH):
            hdr, data = self._cap.next()
            if hdr is None or not hdr.getcaplen():
                break
            sec, usec = hdr.getts()
            out.append((sec * 1_000_000_000 + usec * 1000, data))
        return out

    def stats(self) -> CaptureStats:
        received, dropped, if_dropped = self._cap.stats()
        return CaptureStats(received, dropped, if_dropped)

    def close(self) -> None:
        self._cap.close()


def _check_interface(pcapy: Any, iface: str) -> None:
    try:
        names = pcapy.findalldevs()
    except pcapy.PcapError:
        return  # cannot list (some platforms need privileges): let activation say why
    if iface not in names:
        raise LiveError(
            f"no such network interface: {iface!r} (available: {', '.join(names) or 'none'})"
        )


def _check_filter(pcapy: Any, bpf: str, snaplen: int) -> None:
    """Compile the filter without a handle, so a typo is reported before privileges are."""
    try:
        pcapy.compile(pcapy.DLT_EN10MB, snaplen, bpf, 1, 0)
    except pcapy.PcapError as exc:
        raise LiveError(f"bad capture filter {bpf!r}: {exc}") from exc


def _activation_error(pcapy: Any, iface: str, reason: str, status: int = 0) -> LiveError:
    if status in _PCAP_PERM_DENIED or "permission" in reason.lower():
        return LiveError(f"no permission to capture on {iface}: {_PRIVILEGE_HINT}")
    if status == _PCAP_NO_SUCH_DEVICE or "no such device" in reason.lower():
        return LiveError(f"no such network interface: {iface!r}")
    # pcap_activate's code carries no text; open_live fails the same way with one.
    try:
        pcapy.open_live(iface, 128, 0, 1).close()
    except pcapy.PcapError as exc:
        reason = str(exc)
        if "permission" in reason.lower():
            return LiveError(f"no permission to capture on {iface}: {_PRIVILEGE_HINT}")
    return LiveError(f"cannot capture on {iface}: {reason}")


# ---------------------------------------------------------------------------
# Raw capture file writer (--write-pcap)


class PcapWriter:
    """Writes captured frames as pcapng (``.pcapng``) or pcap (anything else) with dpkt.

    Timestamps are libpcap's microseconds, kept exact. The wire length of a frame
    is not reported by the batch reader, so it is written equal to the captured length.
    """

    def __init__(self, path: str | os.PathLike[str], linktype: int, snaplen: int) -> None:
        import dpkt

        self.path = os.fspath(path)
        try:
            self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise LiveError(f"cannot write {self.path}: {exc.strerror or exc}") from exc
        self._ng = self.path.lower().endswith(".pcapng")
        if self._ng:
            self._writer: Any = dpkt.pcapng.Writer(self._file, snaplen=snaplen, linktype=linktype)
            little = sys.byteorder == "little"
            self._epb = (
                dpkt.pcapng.EnhancedPacketBlockLE if little else dpkt.pcapng.EnhancedPacketBlock
            )
        else:
            self._writer = dpkt.pcap.Writer(self._file, snaplen=snaplen, linktype=linktype)
            self._hdr = struct.Struct(("<" if sys.byteorder == "little" else ">") + "IIII")
        self.frames = 0
        self.error: str | None = None

    def write(self, ts_ns: int, data: bytes) -> None:
        usec = ts_ns // 1000
        if self._ng:
            self._writer.writepkt(
                self._epb(
                    ts_high=usec >> 32,
                    ts_low=usec & 0xFFFFFFFF,
                    caplen=len(data),
                    pkt_len=len(data),
                    pkt_data=data,
                )
            )
        else:
            # dpkt's pcap writer takes float seconds; the header is written directly
            # so microseconds stay exact.
            sec, frac = divmod(usec, 1_000_000)
            self._file.write(self._hdr.pack(sec, frac, len(data), len(data)) + data)
        self.frames += 1

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        """Flush and close; a failure is kept in ``error`` (the capture goes on)."""
        if self._file.closed:
            return
        try:
            self._file.flush()
        except OSError as exc:
            self.error = self.error or f"writing {self.path} failed: {exc}"
        try:
            self._file.close()
        except OSError as exc:  # the buffered bytes it could not flush
            self.error = self.error or f"writing {self.path} failed: {exc}"


# ---------------------------------------------------------------------------
# The capture loop


@dataclass(frozen=True, slots=True)
class Tick:
    """Emitted every ``interval`` seconds and once at the end (``final``)."""

    elapsed: float  # seconds since the capture started
    span: float  # seconds since the previous tick
    final: bool = False


@dataclass(frozen=True, slots=True)
class LiveOptions:
    iface: str
    bpf: str | None = None  # None: derived from ports
    ports: frozenset[int] | None = None  # broker ports; None: the usual Kafka ports
    duration: float | None = None  # seconds
    count: int | None = None  # stop once this many pair records are complete
    interval: float = DEFAULT_INTERVAL
    write_pcap: str | None = None
    snaplen: int = DEFAULT_SNAPLEN
    buffer_mib: int = DEFAULT_BUFFER_MIB

    @property
    def filter(self) -> str:
        return self.bpf if self.bpf else default_filter(self.ports)


@dataclass
class LiveCapture:
    """One live capture run; iterate ``events()`` (records and ticks) or ``records()``.

    Opening happens in the constructor, so a missing interface, missing privileges or
    a bad filter raise ``LiveError`` before anything is read.
    """

    options: LiveOptions
    decoder: Any = None
    counters: Counters = field(default_factory=Counters)
    stats_view: LiveStats = field(default_factory=LiveStats)

    def __post_init__(self) -> None:
        opts = self.options
        if opts.interval <= 0:
            raise LiveError("interval must be positive")
        if opts.duration is not None and opts.duration <= 0:
            raise LiveError("duration must be positive")
        if opts.count is not None and opts.count <= 0:
            raise LiveError("count must be positive")
        if self.decoder is None:
            from dissector import protocol

            self.decoder = protocol
        self.source = PcapSource(
            opts.iface, opts.filter, snaplen=opts.snaplen, buffer_bytes=opts.buffer_mib << 20
        )
        try:
            self.writer = (
                PcapWriter(opts.write_pcap, self.source.linktype, opts.snaplen)
                if opts.write_pcap
                else None
            )
        except LiveError:
            self.source.close()
            raise
        options = Options(ports=opts.ports, idle_timeout_s=LIVE_IDLE_TIMEOUT_S)
        self.label = f"live:{opts.iface}"
        self.session = LiveSession(options, self.decoder, self.label)
        self.stop_reason: str | None = None
        self.pcap_error: str | None = None  # --write-pcap failed: the file is incomplete
        self.pairs = 0
        self.flagged = 0
        self.frames = 0
        self.final_stats = CaptureStats()
        self._stop = threading.Event()
        self._closed = False
        self._ran = False
        self._started = time.monotonic()

    # -- control --------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask the loop to end; safe from signal handlers and other threads."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def capture_stats(self) -> CaptureStats:
        return self.final_stats if self._closed else self.source.stats()

    def health(self) -> CaptureHealth:
        s = self.capture_stats()
        return CaptureHealth(
            packets=self.frames,
            kernel_drops=s.dropped,
            interface_drops=s.if_dropped,
            tcp_gaps=self.counters["tcp_gaps"],
            flagged_pairs=self.flagged,
            open_requests=sum(self.open_requests().values()),
        )

    def open_requests(self) -> dict[str, int]:
        """Requests sent and not answered yet, by API name."""
        return self.session.open_requests()

    # -- iteration ------------------------------------------------------------

    def records(self) -> Iterator[PairRecord]:
        for ev in self.events():
            if isinstance(ev, PairRecord):
                yield ev

    def events(self) -> Iterator[PairRecord | Tick]:
        """Pair records as they complete, and a ``Tick`` every interval and at the end."""
        if self._ran:
            raise LiveError("a LiveCapture runs once: create a new one to capture again")
        self._ran = True
        opts = self.options
        start = self._started = time.monotonic()
        deadline = start + opts.duration if opts.duration is not None else None
        last_tick = start
        next_tick = start + opts.interval
        try:
            try:
                while not self._stop.is_set():
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        self.stop("duration")
                        break
                    if now >= next_tick:
                        yield Tick(now - start, now - last_tick)
                        last_tick = now
                        next_tick = max(next_tick + opts.interval, now)
                        continue
                    wait = min(next_tick, deadline or next_tick) - now
                    frames = self.source.read(min(max(wait, 0.0), POLL_S))
                    yield from self._frames(frames)
                if self.stop_reason != "count":
                    yield from self._drain()
            except KeyboardInterrupt:
                self.stop("interrupted")
            except LiveError as exc:
                # The source failed mid-run: keep what was captured and finish cleanly.
                self.stop(str(exc))
            for rec in self.session.finish():
                yield self._record(rec)
            self._sync_counters()
            self._close()
            now = time.monotonic()
            yield Tick(now - start, now - last_tick, final=True)
        finally:
            self._close()

    def _frames(self, frames: list[tuple[int, bytes]]) -> Iterator[PairRecord]:
        count = self.options.count
        for ts_ns, data in frames:
            self._frame(ts_ns, data)
            if count is not None:
                # --count stops at an exact number of pairs: look after every frame.
                for rec in self.session.records():
                    yield self._record(rec)
                    if self.pairs >= count:
                        self.stop("count")
                        self._sync_counters()
                        return
        for rec in self.session.records():
            yield self._record(rec)
        self._sync_counters()

    def _frame(self, ts_ns: int, data: bytes) -> None:
        self.frames += 1
        if self.writer is not None:
            try:
                self.writer.write(ts_ns, data)
            except OSError as exc:
                # Disk full or similar: stop, keep the analysis, say why.
                self.writer.error = self.writer.error or f"writing {self.writer.path} failed: {exc}"
                self.stop(self.writer.error)
        self.session.feed(self.source.linktype, ts_ns, data)

    def _sync_counters(self) -> None:
        self.counters.counts.clear()
        self.counters.counts.update(self.session.counters())

    def _drain(self) -> Iterator[PairRecord]:
        """Read what the kernel buffered before the stop (bounded in time)."""
        stop_ns = time.time_ns()
        limit = time.monotonic() + DRAIN_LIMIT_S
        while time.monotonic() < limit:
            # A partly filled block is handed over after BLOCK_TIMEOUT_MS: wait that long.
            frames = self.source.read(2 * BLOCK_TIMEOUT_MS / 1000)
            if not frames:
                return
            before = [f for f in frames if f[0] <= stop_ns]
            yield from self._frames(before)
            if len(before) < len(frames):
                return

    def _record(self, rec: PairRecord) -> PairRecord:
        if CAPTURE_GAP_NOTE in rec.flags:
            self.flagged += 1
        if rec.request_time is not None and rec.response_time is not None:
            self.pairs += 1
        self.stats_view.add(rec)
        return rec

    def _close(self) -> None:
        if self._closed:
            return
        # A failing stats call must not stop the pcap from being flushed.
        with contextlib.suppress(Exception):
            self.final_stats = self.source.stats()
        self._closed = True
        if self.writer is not None:
            self.writer.close()
            self.pcap_error = self.writer.error
        self.source.close()

    def close(self) -> None:
        """Release the capture and flush the pcap (also done when iteration ends)."""
        self._close()

    def __enter__(self) -> LiveCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def snapshot(self, tick: Tick, *, whole_run: bool = False) -> Snapshot:
        if whole_run:
            title = f"kafka-dissector live {self.options.iface}: summary of {tick.elapsed:.1f} s"
            if self.stop_reason:
                title += f" (stopped: {self.stop_reason})"
        else:
            title = f"kafka-dissector live {self.options.iface}: {tick.elapsed:.1f} s"
        return self.stats_view.snapshot(
            title=title,
            seconds=tick.elapsed if whole_run else tick.span,
            health=self.health(),
            open_by_api={} if tick.final else self.open_requests(),
            whole_run=whole_run,
            final=tick.final,
        )


# ---------------------------------------------------------------------------
# Python API


def live(
    iface: str,
    *,
    bpf: str | None = None,
    ports: Iterable[int] | None = None,
    duration: float | None = None,
    count: int | None = None,
    interval: float | None = None,
    write_pcap: str | os.PathLike[str] | None = None,
    snaplen: int = DEFAULT_SNAPLEN,
    buffer_mib: int = DEFAULT_BUFFER_MIB,
    stop: threading.Event | None = None,
) -> Iterator[PairRecord] | Iterator[pd.DataFrame]:
    """Capture Kafka traffic on ``iface`` and yield pair records as they complete.

    With ``interval`` (seconds) yield one pandas DataFrame per interval instead
    (possibly empty, same columns as ``dissector.analyze``), and a last one at the end.
    Stops after ``duration`` seconds, after ``count`` complete request/response pairs,
    when ``stop`` is set, or on Ctrl-C; requests still open are then yielded as
    ``unanswered`` rows. Errors opening the capture raise ``LiveError`` at the call.
    """
    opts = LiveOptions(
        iface=iface,
        bpf=bpf,
        ports=frozenset(ports) if ports is not None else None,
        duration=duration,
        count=count,
        interval=interval if interval is not None else DEFAULT_INTERVAL,
        write_pcap=os.fspath(write_pcap) if write_pcap is not None else None,
        snaplen=snaplen,
        buffer_mib=buffer_mib,
    )
    cap = LiveCapture(opts)
    if stop is not None:
        _watch(stop, cap)
    if interval is None:
        return cap.records()
    return _frames_every_interval(cap)


def _watch(event: threading.Event, cap: LiveCapture) -> None:
    def wait() -> None:
        while not cap._closed:
            if event.wait(POLL_S):
                cap.stop("stopped")
                return

    threading.Thread(target=wait, name="kafka-dissector-live-stop", daemon=True).start()


def _frames_every_interval(cap: LiveCapture) -> Iterator[pd.DataFrame]:
    from dissector.table.frame import records_to_frame

    chunk: list[PairRecord] = []
    for ev in cap.events():
        if isinstance(ev, PairRecord):
            chunk.append(ev)
            continue
        df = records_to_frame(chunk)
        df.attrs["counters"] = cap.counters.as_dict()
        stats = cap.capture_stats()
        df.attrs["capture_stats"] = {
            "received": stats.received,
            "dropped": stats.dropped,
            "if_dropped": stats.if_dropped,
        }
        chunk = []
        yield df


# ---------------------------------------------------------------------------
# Output sinks for the command line


class _ParquetSink:
    """Appends each interval's rows to one Parquet file as a row group (flat memory).

    Same schema and metadata as ``analyze -o`` (``frame.open_pairs_parquet``).
    """

    def __init__(self, path: str) -> None:
        from dissector.table.frame import open_pairs_parquet

        self.path = path
        try:
            self._writer = open_pairs_parquet(path)
        except OSError as exc:
            raise LiveError(f"cannot write {path}: {exc}") from exc
        self.rows = 0

    def write(self, records: list[PairRecord]) -> None:
        from dissector.table.frame import pairs_table, records_to_frame

        self._writer.write_table(pairs_table(records_to_frame(records)))
        self.rows += len(records)

    def close(self) -> None:
        self._writer.close()


class _BufferedSink:
    """CSV / JSON lines: the whole table is written at the end by ``frame.export``."""

    def __init__(self, path: str) -> None:
        from dissector.table.frame import EXPORT_FORMATS

        ext = os.path.splitext(path)[1].lower()
        if ext not in EXPORT_FORMATS:
            raise LiveError(
                f"unknown output format {ext!r}: use one of {', '.join(EXPORT_FORMATS)}"
            )
        self.path = path
        self.records: list[PairRecord] = []
        self.rows = 0

    def write(self, records: list[PairRecord]) -> None:
        self.records.extend(records)
        self.rows += len(records)

    def close(self) -> None:
        from dissector.table.frame import export, records_to_frame

        export(records_to_frame(self.records), self.path)


def _open_sink(path: str) -> _ParquetSink | _BufferedSink:
    if path.lower().endswith(".parquet"):
        return _ParquetSink(path)
    return _BufferedSink(path)


# ---------------------------------------------------------------------------
# Command line


def _install_stop_signals(cap: LiveCapture) -> Callable[[], None]:
    """SIGINT and SIGTERM stop the capture cleanly; returns a function restoring them.

    The first signal asks for a clean stop and puts the previous handlers back, so a
    second Ctrl-C interrupts at once if finishing takes too long.
    """
    previous: dict[int, Any] = {}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    def handler(signum: int, _frame: types.FrameType | None) -> None:
        cap.stop(signal.Signals(signum).name)
        restore()

    for s in (signal.SIGINT, signal.SIGTERM):
        previous[s] = signal.signal(s, handler)
    return restore


def _console(*, stderr: bool) -> Any:
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        # Logs and pipes: do not wrap or squeeze the table to 80 columns.
        console = Console(stderr=stderr, width=160, soft_wrap=True)
    return console


def run_cli(opts: LiveOptions, output: str | None, view: str) -> LiveCapture:
    """The ``live`` command's loop: capture, refresh the view, write outputs."""
    from rich.live import Live

    from dissector.live.view import plain_lines, render

    console = _console(stderr=True)
    cap = LiveCapture(opts)
    sink = _open_sink(output) if output else None
    restore = _install_stop_signals(cap)
    pending: list[PairRecord] = []
    screen = Live(console=console, auto_refresh=False, transient=False) if view == "rich" else None
    console.print(
        f"capturing on {opts.iface} with filter {opts.filter!r}"
        + (f", writing {opts.write_pcap}" if opts.write_pcap else ""),
        highlight=False,
    )
    try:
        if screen is not None:
            screen.start()
        for ev in cap.events():
            if isinstance(ev, PairRecord):
                pending.append(ev)
                continue
            if sink is not None and (pending or ev.final):
                sink.write(pending)
            pending = []
            if cap.writer is not None and not ev.final:
                cap.writer.flush()
            if ev.final:
                break
            snap = cap.snapshot(ev)
            cap.stats_view.roll()
            if screen is not None:
                screen.update(render(snap), refresh=True)
            elif view == "plain":
                for line in plain_lines(snap):
                    console.print(line, highlight=False, markup=False)
    finally:
        if screen is not None:
            screen.stop()
        restore()
        cap.close()
        if sink is not None:
            sink.close()
    return cap


def _final_summary(cap: LiveCapture, output: str | None) -> None:
    from dissector.live.view import render

    console = _console(stderr=False)
    elapsed = time.monotonic() - cap._started
    snap = cap.snapshot(Tick(elapsed, elapsed, final=True), whole_run=True)
    console.print(render(snap))
    unanswered = sum(w.unanswered for w in cap.stats_view.total.values())
    console.print(
        f"{cap.pairs} pairs, {unanswered} unanswered, {cap.flagged} flagged for capture gaps; "
        f"{cap.frames} packets analysed; libpcap dropped {cap.final_stats.dropped}, "
        f"interface dropped {cap.final_stats.if_dropped}",
        highlight=False,
    )
    if cap.final_stats.dropped or cap.final_stats.if_dropped:
        console.print(
            "[bold red]packets were lost by the capture: pairs touched by the loss carry the "
            "capture_gap note, responses whose request was lost are orphan_response rows[/]"
        )
    if output:
        console.print(f"wrote {output}", highlight=False)
    if cap.pcap_error:
        console.print(f"[bold red]{cap.pcap_error}: the pcap is incomplete[/]", highlight=False)
    elif cap.options.write_pcap:
        console.print(f"wrote {cap.options.write_pcap} ({cap.frames} frames)", highlight=False)


@click.command("live")
@click.option(
    "-i", "--interface", "iface", required=True, help="network interface, e.g. eth0 or lo"
)
@click.option("-f", "--filter", "bpf", help="BPF capture filter (default: tcp on the broker ports)")
@click.option(
    "--ports",
    help="broker ports, comma-separated (default: the usual Kafka ports); also sets the filter",
)
@click.option("--duration", type=float, help="stop after this many seconds")
@click.option("--count", type=int, help="stop after this many complete request/response pairs")
@click.option(
    "--interval",
    type=float,
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="seconds between view refreshes",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="write the pairs: .parquet (appended every interval), .csv or .jsonl",
)
@click.option(
    "--write-pcap",
    type=click.Path(dir_okay=False),
    help="also save the captured frames: .pcapng, else pcap",
)
@click.option("--snaplen", type=int, default=DEFAULT_SNAPLEN, show_default=True)
@click.option(
    "--buffer-size",
    "buffer_mib",
    type=int,
    default=DEFAULT_BUFFER_MIB,
    show_default=True,
    help="kernel capture buffer, MiB",
)
@click.option(
    "--view",
    type=click.Choice(["auto", "rich", "plain", "none"]),
    default="auto",
    show_default=True,
    help="live view: rich table on a terminal, plain lines otherwise",
)
def live_command(
    iface: str,
    bpf: str | None,
    ports: str | None,
    duration: float | None,
    count: int | None,
    interval: float,
    output: str | None,
    write_pcap: str | None,
    snaplen: int,
    buffer_mib: int,
    view: str,
) -> None:
    """Watch Kafka requests, latency and errors on an interface as they happen.

    Stops on Ctrl-C, SIGTERM, --duration or --count; every completed pair is
    written, requests still open are reported as unanswered.
    """
    from dissector.cli.main import parse_ports

    if view == "auto":
        view = "rich" if sys.stderr.isatty() else "plain"
    opts = LiveOptions(
        iface=iface,
        bpf=bpf,
        ports=parse_ports(ports),
        duration=duration,
        count=count,
        interval=interval,
        write_pcap=write_pcap,
        snaplen=snaplen,
        buffer_mib=buffer_mib,
    )
    try:
        cap = run_cli(opts, output, view)
    except LiveError as exc:
        raise click.ClickException(str(exc)) from exc
    _final_summary(cap, output)
