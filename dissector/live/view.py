"""What the live terminal view shows: per-API rates, latency, errors, open requests.

``LiveStats`` is fed every pair record as it completes and keeps two views of
them: the current refresh interval (reset by ``roll``) and the whole run. Memory
stays bounded on long captures: latencies are a fixed-size uniform sample per API
and view (exact until the sample fills), error names a counter.
``render`` turns a snapshot into a rich renderable; nothing here touches the
network, so the numbers are testable without a terminal.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dissector.schema import ERROR_STATUSES as _ERRORS
from dissector.schema import UNANSWERED_STATUSES as _UNANSWERED
from dissector.schema import Status
from dissector.stages import (
    CAPTURE_GAP as CAPTURE_GAP_NOTE,  # first frame after a hole in the capture
)
from dissector.stages import PairRecord

if TYPE_CHECKING:
    from rich.console import RenderableType

LATENCY_SAMPLE = 50_000  # per API and run; percentiles are exact below this many pairs
ERROR_STATUSES = frozenset(_ERRORS)
UNANSWERED_STATUSES = frozenset(_UNANSWERED)


@dataclass
class ApiWindow:
    """Counts for one API over one span of time (an interval or the whole run)."""

    requests: int = 0
    errors: int = 0
    unanswered: int = 0
    flagged: int = 0  # pairs marked as affected by lost packets
    latencies: list[float] = field(default_factory=list)
    error_names: Counter[str] = field(default_factory=Counter)
    _seen_latencies: int = 0

    def add(self, rec: PairRecord, rng: random.Random) -> None:
        self.requests += 1
        if rec.status in ERROR_STATUSES:
            self.errors += 1
            self.error_names[rec.error_name or rec.status] += 1
        if rec.status in UNANSWERED_STATUSES:
            self.unanswered += 1
        if CAPTURE_GAP_NOTE in rec.flags:
            self.flagged += 1
        if rec.latency_ms is None:
            return
        self._seen_latencies += 1
        if len(self.latencies) < LATENCY_SAMPLE:
            self.latencies.append(rec.latency_ms)
            return
        # Reservoir sampling keeps a uniform sample of the whole run in fixed memory.
        slot = rng.randrange(self._seen_latencies)
        if slot < LATENCY_SAMPLE:
            self.latencies[slot] = rec.latency_ms


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (as numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class ApiRow:
    api: str
    requests: int
    rate: float  # requests per second over the span
    p50_ms: float | None
    p99_ms: float | None
    errors: int
    top_errors: tuple[tuple[str, int], ...]
    unanswered: int
    open_now: int  # requests sent and not yet answered at the snapshot
    flagged: int


@dataclass(frozen=True, slots=True)
class CaptureHealth:
    """Counts of the capture itself, for the header line."""

    packets: int = 0  # frames read from the capture
    kernel_drops: int = 0  # dropped by the kernel/libpcap buffer (pcap_stats ps_drop)
    interface_drops: int = 0  # dropped by the interface or driver (ps_ifdrop)
    tcp_gaps: int = 0  # holes the reassembler had to skip
    flagged_pairs: int = 0
    open_requests: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    title: str
    seconds: float  # span the rates are computed over
    rows: tuple[ApiRow, ...]
    health: CaptureHealth
    final: bool = False


def _api_label(rec: PairRecord) -> str:
    if rec.api_name:
        return rec.api_name
    if rec.status == Status.ORPHAN_RESPONSE:
        return "(response without request)"
    return "(unknown)"


@dataclass
class LiveStats:
    """Aggregates pair records for the interval view and the final summary."""

    seed: int = 0
    interval: dict[str, ApiWindow] = field(default_factory=dict)
    total: dict[str, ApiWindow] = field(default_factory=dict)
    pairs: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add(self, rec: PairRecord) -> None:
        label = _api_label(rec)
        self.pairs += 1
        self.interval.setdefault(label, ApiWindow()).add(rec, self._rng)
        self.total.setdefault(label, ApiWindow()).add(rec, self._rng)

    def roll(self) -> None:
        """Start a new interval."""
        self.interval = {}

    def snapshot(
        self,
        *,
        title: str,
        seconds: float,
        health: CaptureHealth,
        open_by_api: dict[str, int] | None = None,
        whole_run: bool = False,
        final: bool = False,
    ) -> Snapshot:
        windows = self.total if whole_run else self.interval
        open_by_api = open_by_api or {}
        rows = []
        for api in sorted(set(windows) | set(open_by_api)):
            w = windows.get(api, ApiWindow())
            rows.append(
                ApiRow(
                    api=api,
                    requests=w.requests,
                    rate=w.requests / seconds if seconds > 0 else 0.0,
                    p50_ms=percentile(w.latencies, 0.50),
                    p99_ms=percentile(w.latencies, 0.99),
                    errors=w.errors,
                    top_errors=tuple(w.error_names.most_common(3)),
                    unanswered=w.unanswered,
                    open_now=open_by_api.get(api, 0),
                    flagged=w.flagged,
                )
            )
        return Snapshot(title, seconds, tuple(rows), health, final)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def health_line(h: CaptureHealth) -> str:
    parts = [
        f"packets {h.packets}",
        f"kernel drops {h.kernel_drops}",
        f"interface drops {h.interface_drops}",
        f"tcp gaps {h.tcp_gaps}",
        f"open requests {h.open_requests}",
    ]
    if h.flagged_pairs:
        parts.append(f"pairs flagged for lost packets {h.flagged_pairs}")
    return " | ".join(parts)


def render(snap: Snapshot) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=snap.title, title_justify="left", expand=False)
    for name, justify in (
        ("API", "left"),
        ("req/s", "right"),
        ("requests", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("errors", "right"),
        ("top errors", "left"),
        ("unanswered", "right"),
        ("open", "right"),
        ("flagged", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in snap.rows:
        table.add_row(
            r.api,
            f"{r.rate:.1f}",
            str(r.requests),
            _ms(r.p50_ms),
            _ms(r.p99_ms),
            Text(str(r.errors), style="bold red" if r.errors else ""),
            ", ".join(f"{name} x{n}" for name, n in r.top_errors),
            Text(str(r.unanswered), style="yellow" if r.unanswered else ""),
            str(r.open_now),
            Text(str(r.flagged), style="magenta" if r.flagged else ""),
        )
    lost = snap.health.kernel_drops or snap.health.interface_drops
    health = Text(health_line(snap.health), style="bold red" if lost else "dim")
    return Group(table, health)


def plain_lines(snap: Snapshot) -> list[str]:
    """The same snapshot as plain text lines, for logs and non-terminal output."""
    lines = [f"{snap.title}: {health_line(snap.health)}"]
    for r in snap.rows:
        errs = ", ".join(f"{name} x{n}" for name, n in r.top_errors)
        lines.append(
            f"  {r.api}: {r.rate:.1f} req/s, {r.requests} requests, p50 {_ms(r.p50_ms)} ms, "
            f"p99 {_ms(r.p99_ms)} ms, errors {r.errors}{' (' + errs + ')' if errs else ''}, "
            f"unanswered {r.unanswered}, open {r.open_now}, flagged {r.flagged}"
        )
    return lines
