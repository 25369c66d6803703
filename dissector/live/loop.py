"""The live capture loop: a network interface through the same pipeline as capture files.

``kafka-dissector live -i IFACE`` and ``dissector.live(iface)`` capture with libpcap
inside the native core (``_core.LiveRun``): a capture thread reads the kernel ring
and runs the link parser, reassembly, framing and correlation that offline analysis
uses, a rows thread summarises the pairs into row columns; each stage exists once.
Python takes the rows built so far as Arrow tables (``tables()``), a few times a
second, and hands them to the sinks and the view as they are: no Python object per
pair or per frame. ``records()`` and ``events()`` turn the tables into
``stages.PairRecord`` rows for callers who want them (``capture`` names ``live:IFACE``),
at their cost.

How stopping works: ``stop()`` (signal handlers, another thread), ``duration``,
``count`` and Ctrl-C all end the capture the same way. Frames already in the
kernel ring from before the stop are drained, the session is finished (requests
still open become ``unanswered`` rows), the pcap is flushed and closed. Only frames
that went through the pipeline are written to ``write_pcap``, so the offline
analysis of that file equals the live result.

Lost packets: libpcap's drop counts are reported with every interval and at the end;
a pair whose request or response is the first frame found after a hole in the
captured bytes (lost packets, or a connection already open when the capture started)
gets the ``capture_gap`` in ``flags``, and a response whose request was lost is
an ``orphan_response``, so loss is visible rather than silently wrong. If nobody takes
the rows, the core stops reading (bounded memory) and the kernel ring drops, counted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dissector.accounting import Counters
from dissector.live.source import (
    DEFAULT_BUFFER_MIB,
    DEFAULT_SNAPLEN,
    CaptureStats,
    LiveError,
    PcapSource,
    default_filter,
)
from dissector.live.view import CaptureHealth, LiveStats, Snapshot, complete_rows, gap_rows
from dissector.options import Options
from dissector.stages import PairRecord
from dissector.wire.core import LiveSession

# A connection silent for this long is closed (its open requests become
# unanswered) so that a long live run does not hold every connection it saw.
LIVE_IDLE_TIMEOUT_S = 600.0

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector._core import LiveRun, PcapStats
    from dissector.stages import Decoder

DEFAULT_INTERVAL = 1.0
POLL_S = 0.1  # longest wait for rows before checking stop conditions
TABLE_ROWS = 65_536  # rows taken at once when they come faster than POLL_S
# Safety bound on waiting for the core to end after a stop: its drain ends by itself
# at the first frame newer than the stop or an empty ring (and gives up after 30 s).
END_LIMIT_S = 60.0


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
    """What a live run captures and how long, and ``analysis``: the ``Options`` of its
    pass taken whole (ports, ``max_frame``, TLS key logs, ``max_decompressed``...), as
    ``analyze`` takes them; ``idle_timeout_s`` None there means ``LIVE_IDLE_TIMEOUT_S``."""

    iface: str
    bpf: str | None = None  # None: derived from the analysis' ports
    analysis: Options = field(default_factory=Options)
    duration: float | None = None  # seconds
    count: int | None = None  # stop once this many pair records are complete
    interval: float = DEFAULT_INTERVAL
    write_pcap: str | None = None
    snaplen: int = DEFAULT_SNAPLEN
    buffer_mib: int = DEFAULT_BUFFER_MIB

    @property
    def ports(self) -> frozenset[int] | None:
        """Broker ports; None: the usual Kafka ports."""
        return self.analysis.ports

    @property
    def filter(self) -> str:
        return self.bpf if self.bpf else default_filter(self.ports)

    @property
    def pass_options(self) -> Options:
        """``analysis`` with the live idle timeout when it sets none: a connection that
        never FIN/RSTs would otherwise be held for the whole run."""
        if self.analysis.idle_timeout_s is not None:
            return self.analysis
        return dataclasses.replace(self.analysis, idle_timeout_s=LIVE_IDLE_TIMEOUT_S)


@dataclass
class LiveCapture:
    """One live capture run; iterate ``tables()`` (Arrow tables and ticks), or
    ``events()`` (records and ticks) or ``records()``.

    Opening happens in the constructor, so a missing interface, missing privileges or
    a bad filter raise ``LiveError`` before anything is read; the core starts reading
    then, and keeps what it reads until it is iterated.
    """

    options: LiveOptions
    decoder: Decoder | None = None
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
        if opts.buffer_mib <= 0:
            raise LiveError("buffer size must be positive")
        if self.decoder is None:
            from dissector import protocol

            self.decoder = protocol
        self.source = PcapSource(
            opts.iface, opts.filter, snaplen=opts.snaplen, buffer_bytes=opts.buffer_mib << 20
        )
        options = opts.pass_options
        self.label = f"live:{opts.iface}"
        try:
            if opts.write_pcap:
                _check_writable(opts.write_pcap)
            self.session = LiveSession(options, self.decoder, self.label)
        except BaseException:
            self.source.close()
            raise
        # The core's threads start with the iteration: until then the kernel ring holds
        # what arrives (and drops, counted, once full).
        self._run: LiveRun | None = None
        self.stop_reason: str | None = None
        self.pcap_error: str | None = None  # --write-pcap failed: the file is incomplete
        self.pairs = 0
        self.flagged = 0
        self.final_stats = CaptureStats()
        self._stop = threading.Event()
        self._closed = False
        self._ran = False
        self._started = time.monotonic()

    # -- control --------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Ask the capture to end; safe from signal handlers and other threads."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def frames(self) -> int:
        """Frames read from the interface (and written to ``write_pcap``)."""
        return int(self._run.frames()) if self._run is not None else 0

    def capture_stats(self) -> CaptureStats:
        if self._closed:
            return self.final_stats
        if self._run is None:
            return self.source.stats()
        return _stats(self._run.stats())

    def health(self) -> CaptureHealth:
        s = self.capture_stats()
        counters = self._run.counters() if self._run is not None else {}
        return CaptureHealth(
            packets=self.frames,
            kernel_drops=s.dropped,
            interface_drops=s.if_dropped,
            tcp_gaps=int(counters.get("tcp_gaps", 0)),
            flagged_pairs=self.flagged,
            open_requests=sum(self.open_requests().values()),
        )

    def open_requests(self) -> dict[str, int]:
        """Requests sent and not answered yet, by API name."""
        return self.session.open_requests(self._run) if self._run is not None else {}

    # -- iteration ------------------------------------------------------------

    def records(self) -> Iterator[PairRecord]:
        for ev in self.events():
            if isinstance(ev, PairRecord):
                yield ev

    def events(self) -> Iterator[PairRecord | Tick]:
        """Pair records as they complete, and a ``Tick`` every interval and at the end."""
        from dissector.wire.core import table_records

        for item in self.tables(eager=True):
            if isinstance(item, Tick):
                yield item
            else:
                yield from table_records(item)

    def tables(self, *, eager: bool = False) -> Iterator[pa.Table | Tick]:
        """The pairs as Arrow tables (``wire.core.arrow_schema``), a ``Tick`` every
        interval and at the end; the view (``stats_view``) has counted each table when
        it is yielded. Rows come in one table per interval (or per ``TABLE_ROWS``), or
        with ``eager`` as soon as the core has built them (within ``POLL_S``)."""
        if self._ran:
            raise LiveError("a LiveCapture runs once: create a new one to capture again")
        self._ran = True
        opts = self.options
        try:
            run = self._run = self.session.start(self.source.handle, opts.write_pcap, opts.snaplen)
        except OSError as exc:
            self._close()
            raise LiveError(str(exc)) from None
        start = self._started = time.monotonic()
        deadline = start + opts.duration if opts.duration is not None else None
        last_tick = start
        next_tick = start + opts.interval
        told_at: float | None = None  # when the core was asked to stop
        eager = eager or opts.count is not None  # --count stops at an exact pair
        try:
            while True:
                try:
                    now = time.monotonic()
                    if deadline is not None and now >= deadline:
                        self.stop("duration")
                    if self._stop.is_set() and told_at is None:
                        run.stop(drain=self.stop_reason != "count")
                        told_at = now
                    if now >= next_tick:
                        yield from self._take()
                        yield Tick(now - start, now - last_tick)
                        last_tick = now
                        next_tick = max(next_tick + opts.interval, now)
                        continue
                    until = min(next_tick, deadline) if deadline is not None else next_tick
                    wait = POLL_S if told_at else min(max(until - now, 0.0), POLL_S)
                    ended = run.wait(wait, TABLE_ROWS)
                    # The core stops by itself when writing the pcap or capturing fails.
                    failure = run.error() or run.pcap_error()
                    if failure and not self._stop.is_set():
                        self.stop(failure)
                    # Rows go out at each tick in one table, or sooner when many wait,
                    # or at once for record consumers and --count.
                    if ended or eager or run.rows_waiting() >= TABLE_ROWS:
                        yield from self._take()
                    if ended:
                        break
                    if told_at is not None and time.monotonic() - told_at > END_LIMIT_S:
                        break
                except KeyboardInterrupt:
                    self.stop("interrupted")
            run.join(END_LIMIT_S)
            yield from self._take()
            self._sync_counters()
            self._close()
            now = time.monotonic()
            yield Tick(now - start, now - last_tick, final=True)
        finally:
            self._close()

    def _take(self) -> Iterator[pa.Table]:
        """The rows built since the last call, counted by the view (and cut at
        ``count``)."""
        run = self._run
        assert run is not None
        self._sync_counters()
        if self.options.count is not None and self.pairs >= self.options.count:
            run.take_columns()  # past the count: not reported
            return
        table = self.session.table(run.take_columns())
        if not table.num_rows:
            return
        count = self.options.count
        complete = complete_rows(table)
        if count is not None and self.pairs + int(complete.sum()) >= count:
            # --count stops at an exact number of pairs.
            last = int((self.pairs + complete.cumsum() >= count).argmax())
            table = table.slice(0, last + 1)
            complete = complete[: last + 1]
            self.stop("count")
            run.stop(drain=False)
        self.pairs += int(complete.sum())
        self.flagged += int(gap_rows(table).sum())
        self.stats_view.add_table(table)
        yield table

    def _sync_counters(self) -> None:
        if self._run is not None:
            self.counters.counts.clear()
            self.counters.counts.update(self._run.counters())

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        run = self._run
        if run is None:
            with contextlib.suppress(Exception):
                self.final_stats = self.source.stats()
            self.source.close()
            return
        run.stop(drain=False)
        run.join(END_LIMIT_S)
        self.final_stats = _stats(run.stats())
        self._sync_counters()
        self.pcap_error = run.pcap_error()

    def close(self) -> None:
        """Stop the capture and flush the pcap (also done when iteration ends)."""
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


def _stats(s: PcapStats) -> CaptureStats:
    return CaptureStats(s.received, s.dropped, s.if_dropped)


def _check_writable(path: str) -> None:
    """Create (empty) the pcap file now, so that an unwritable path fails at the start."""
    try:
        with open(path, "wb"):
            pass
    except OSError as exc:
        raise LiveError(f"cannot write {path}: {exc.strerror or exc}") from exc


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
    options: Options | None = None,
) -> Iterator[PairRecord] | Iterator[pd.DataFrame]:
    """Capture Kafka traffic on ``iface`` and yield pair records as they complete.

    With ``interval`` (seconds) yield one pandas DataFrame per interval instead
    (possibly empty, same columns as ``dissector.analyze``), and a last one at the end.
    Stops after ``duration`` seconds, after ``count`` complete request/response pairs,
    when ``stop`` is set, or on Ctrl-C; requests still open are then yielded as
    ``unanswered`` rows. Errors opening the capture raise ``LiveError`` at the call.
    ``tls_keylog``: key logs to decrypt Kafka over TLS with, read on as they grow.
    ``options``: the pass's ``Options`` whole (``max_frame``, ...), ``ports`` and
    ``tls_keylog`` laid over it.
    """
    from dissector.options import keyword_options
    from dissector.tls import key_logs

    # TLS key logs are read on as they grow (a client appends a line per handshake).
    tls = key_logs(tls_keylog, follow=True)
    opts = LiveOptions(
        iface=iface,
        bpf=bpf,
        analysis=keyword_options(options, ports=ports, tls=tls),
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
    import pyarrow as pa

    from dissector.wire.core import arrow_schema, table_to_frame

    chunk: list[pa.Table] = []
    for item in cap.tables():
        if not isinstance(item, Tick):
            chunk.append(item)
            continue
        table = pa.concat_tables(chunk) if chunk else arrow_schema().empty_table()
        df = table_to_frame(table)
        df.attrs["counters"] = cap.counters.as_dict()
        stats = cap.capture_stats()
        df.attrs["capture_stats"] = {
            "received": stats.received,
            "dropped": stats.dropped,
            "if_dropped": stats.if_dropped,
        }
        chunk = []
        yield df
