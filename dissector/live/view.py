"""What the live terminal view shows: per-API rates, latency, errors, open requests.

``LiveStats`` is fed the pairs table as the core builds it, one Arrow table at a time
(``add_table``), and keeps two views of it: the current refresh interval (reset by
``roll``) and the whole run. Every count is vectorised over the table (numpy and
pyarrow.compute): no Python object per pair. Memory stays bounded on long captures:
latencies are a fixed-size uniform sample per API and view (exact until the sample
fills: Vitter's algorithm R, applied to a whole batch at once), error names a counter.
``render`` turns a snapshot into a rich renderable; nothing here touches the
network, so the numbers are testable without a terminal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dissector.schema import ERROR_STATUSES as _ERRORS
from dissector.schema import UNANSWERED_STATUSES as _UNANSWERED
from dissector.schema import Status
from dissector.stages import (
    CAPTURE_GAP as CAPTURE_GAP_NOTE,  # first frame after a hole in the capture
)

if TYPE_CHECKING:
    import pyarrow as pa
    from rich.console import RenderableType

LATENCY_SAMPLE = 50_000  # per API and view; percentiles are exact below this many pairs
ERROR_STATUSES = frozenset(_ERRORS)
UNANSWERED_STATUSES = frozenset(_UNANSWERED)
ORPHAN_LABEL = "(response without request)"
UNKNOWN_LABEL = "(unknown)"


@dataclass
class ApiWindow:
    """Counts for one API over one span of time (an interval or the whole run)."""

    requests: int = 0
    errors: int = 0
    unanswered: int = 0
    flagged: int = 0  # pairs marked as affected by lost packets
    latencies: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    error_names: Counter[str] = field(default_factory=Counter)
    _seen_latencies: int = 0

    def add_latencies(self, values: np.ndarray, rng: np.random.Generator) -> None:
        """Algorithm R over a batch: the sample stays a uniform sample of every latency
        seen, exactly as if the values had come one by one."""
        free = max(LATENCY_SAMPLE - len(self.latencies), 0)
        if free:
            head = values[:free]
            self.latencies = np.concatenate([self.latencies, head])
            self._seen_latencies += len(head)
            values = values[free:]
        if not len(values):
            return
        # Value i of the rest is number seen+i (0-based): it takes a uniform slot in
        # [0, seen+i] and stays when that slot is inside the sample.
        numbers = self._seen_latencies + np.arange(len(values), dtype=np.int64)
        slots = rng.integers(0, numbers + 1)
        kept = np.flatnonzero(slots < LATENCY_SAMPLE)
        if len(kept):
            landed = slots[kept]
            # One by one, the last value to land on a slot is the one left there.
            _, first_from_end = np.unique(landed[::-1], return_index=True)
            last = len(landed) - 1 - first_from_end
            self.latencies[landed[last]] = values[kept[last]]
        self._seen_latencies += len(values)


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """Linear-interpolated percentile (as numpy's and pandas' default); None for no values."""
    if not len(values):
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q * 100))


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


def _column(table: pa.Table, name: str) -> Any:
    """A column as one array (the tables of a live run have one chunk or a few)."""
    return table.column(name).combine_chunks()


def _strings(column: Any) -> Any:
    import pyarrow as pa

    return column.cast(pa.string()) if pa.types.is_dictionary(column.type) else column


def _mask(values: Any) -> np.ndarray:
    """A boolean Arrow array as numpy, nulls as False."""
    return np.asarray(values.fill_null(False), dtype=bool)


def complete_rows(table: pa.Table) -> np.ndarray:
    """Rows with both a request and a response time: the pairs ``count`` counts."""
    import pyarrow.compute as pc

    return _mask(
        pc.and_(
            pc.is_valid(_column(table, "request_time")),
            pc.is_valid(_column(table, "response_time")),
        )
    )


def gap_rows(table: pa.Table) -> np.ndarray:
    """Rows whose flags carry the capture-gap note (lost packets)."""
    import pyarrow.compute as pc

    flags = _column(table, "flags")
    mask = np.zeros(table.num_rows, dtype=bool)
    flat = pc.list_flatten(flags)
    if len(flat):
        parents = np.asarray(pc.list_parent_indices(flags))
        mask[parents[_mask(pc.equal(_strings(flat), CAPTURE_GAP_NOTE))]] = True
    return mask


def _status_mask(status: Any, statuses: frozenset[str]) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    return _mask(pc.is_in(status, value_set=pa.array(sorted(statuses), pa.string())))


def _labels(table: pa.Table, orphan: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each row's API label as a code into the returned names (API names, then the
    labels of rows without one)."""
    import pyarrow.compute as pc

    api = _column(table, "api_name")
    if not hasattr(api, "indices"):
        api = pc.dictionary_encode(api)
    names = [str(w) for w in api.dictionary.to_pylist()]
    codes = np.asarray(api.indices.fill_null(-1), dtype=np.int64)
    if api.null_count:
        unnamed = codes < 0
        codes[unnamed & orphan] = len(names)
        codes[unnamed & ~orphan] = len(names) + 1
    return codes, [*names, ORPHAN_LABEL, UNKNOWN_LABEL]


@dataclass
class LiveStats:
    """Aggregates pair tables for the interval view and the final summary."""

    seed: int = 0
    interval: dict[str, ApiWindow] = field(default_factory=dict)
    total: dict[str, ApiWindow] = field(default_factory=dict)
    pairs: int = 0

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    def add_table(self, table: pa.Table) -> None:
        """Count a table of pairs (the contract columns; strings plain or dictionary)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = table.num_rows
        if not n:
            return
        status = _strings(_column(table, "status"))
        errors = _status_mask(status, ERROR_STATUSES)
        unanswered = _status_mask(status, UNANSWERED_STATUSES)
        flagged = gap_rows(table)
        orphan = _mask(pc.equal(status, Status.ORPHAN_RESPONSE.value))
        codes, names = _labels(table, orphan)
        latency = np.asarray(
            _column(table, "latency_ms").cast(pa.float64()).fill_null(np.nan), dtype=np.float64
        )
        error_names = self._error_names(table, codes, names, errors, status)
        self.pairs += n
        for code in np.unique(codes):
            label = names[code]
            rows = codes == code
            lat = latency[rows]
            lat = lat[~np.isnan(lat)]
            for windows in (self.interval, self.total):
                w = windows.setdefault(label, ApiWindow())
                w.requests += int(rows.sum())
                w.errors += int((rows & errors).sum())
                w.unanswered += int((rows & unanswered).sum())
                w.flagged += int((rows & flagged).sum())
                w.add_latencies(lat, self._rng)
                w.error_names.update(error_names.get(label, {}))

    @staticmethod
    def _error_names(
        table: pa.Table, codes: np.ndarray, names: list[str], errors: np.ndarray, status: Any
    ) -> dict[str, Counter[str]]:
        """Per API label, how often each error name (or status, when unnamed) occurs."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not errors.any():
            return {}
        keep = pa.array(errors)
        named = pc.coalesce(_strings(_column(table, "error_name")), status)
        groups = (
            pa.table({"code": pa.array(codes).filter(keep), "name": named.filter(keep)})
            .group_by(["code", "name"])
            .aggregate([([], "count_all")])
        )
        out: dict[str, Counter[str]] = {}
        for code, name, count in zip(
            groups.column("code").to_pylist(),
            groups.column("name").to_pylist(),
            groups.column("count_all").to_pylist(),
            strict=True,
        ):
            out.setdefault(names[code], Counter())[str(name)] += int(count)
        return out

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
