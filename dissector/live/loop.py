"""The live capture loop: a network interface through the same pipeline as capture files.

``kafka-dissector live -i IFACE`` and ``dissector.live(iface)`` read link-layer
frames with libpcap and feed them to the native core (``core.LiveSession``), the same
link parser, reassembly, framing, correlation and summary that offline analysis uses:
each exists once. Rows are ``stages.PairRecord``, so a live row and an offline row of
the same bytes are equal (``capture`` names ``live:IFACE``).

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
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dissector.accounting import Counters
from dissector.live.source import (
    BLOCK_TIMEOUT_MS,
    DEFAULT_BUFFER_MIB,
    DEFAULT_SNAPLEN,
    CaptureStats,
    LiveError,
    PcapSource,
    default_filter,
)
from dissector.live.view import CAPTURE_GAP_NOTE, CaptureHealth, LiveStats, Snapshot
from dissector.live.writer import PcapWriter
from dissector.options import Options
from dissector.stages import PairRecord
from dissector.wire.core import LiveSession

# A connection silent for this long is closed (its open requests become
# unanswered) so that a long live run does not hold every connection it saw.
LIVE_IDLE_TIMEOUT_S = 600.0

if TYPE_CHECKING:
    import pandas as pd

    from dissector.tls import KeyLogs
DEFAULT_INTERVAL = 1.0
POLL_S = 0.1  # longest wait for packets before checking stop conditions
# Safety bound on reading what was buffered before a stop. The drain ends by itself at
# the first frame newer than the stop or an empty read, so at most a ring's worth is
# read; this only matters when decoding that ring is very slow.
DRAIN_LIMIT_S = 30.0


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
    # TLS key logs, read on as they grow (``dissector.tls.key_logs(..., follow=True)``).
    tls: KeyLogs | None = None

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
        options = Options(ports=opts.ports, idle_timeout_s=LIVE_IDLE_TIMEOUT_S, tls=opts.tls)
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
    tls_keylog: Iterable[str | os.PathLike[str]] = (),
) -> Iterator[PairRecord] | Iterator[pd.DataFrame]:
    """Capture Kafka traffic on ``iface`` and yield pair records as they complete.

    With ``interval`` (seconds) yield one pandas DataFrame per interval instead
    (possibly empty, same columns as ``dissector.analyze``), and a last one at the end.
    Stops after ``duration`` seconds, after ``count`` complete request/response pairs,
    when ``stop`` is set, or on Ctrl-C; requests still open are then yielded as
    ``unanswered`` rows. Errors opening the capture raise ``LiveError`` at the call.
    ``tls_keylog``: key logs to decrypt Kafka over TLS with, read on as they grow.
    """
    from dissector.tls import key_logs

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
        # TLS key logs are read on as they grow (a client appends a line per handshake).
        tls=key_logs(tls_keylog, follow=True),
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
