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


# Nothing below converts between Python and Arrow values (fill_null(False), pa.scalar,
# pa.array of a list, to_numpy of a bit-packed or nullable array): pyarrow imports pandas
# for those, a second of CPU in the middle of a capture. Arrays are read from their
# buffers instead.


def _bits(buffer: Any, offset: int, n: int) -> np.ndarray:
    """Bits offset..offset+n of a bit-packed Arrow buffer (least significant first)."""
    packed = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(packed, bitorder="little")[offset : offset + n].astype(bool)


def _valid(values: Any) -> np.ndarray:
    if not values.null_count:
        return np.ones(len(values), dtype=bool)
    return _bits(values.buffers()[0], values.offset, len(values))


def _mask(values: Any) -> np.ndarray:
    """A boolean Arrow array as numpy, nulls as False."""
    n = len(values)
    if not n:
        return np.zeros(0, dtype=bool)
    return _bits(values.buffers()[1], values.offset, n) & _valid(values)


def _numbers(values: Any, dtype: Any) -> np.ndarray:
    """A fixed-width Arrow array as a numpy copy (null slots hold whatever is there)."""
    raw = np.frombuffer(values.buffers()[1], dtype=dtype)
    return raw[values.offset : values.offset + len(values)].copy()


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
        parents = _numbers(pc.list_parent_indices(flags), np.int64)
        codes, words = _encoded(flat)
        mask[parents[_words_mask(codes, words, frozenset({CAPTURE_GAP_NOTE}))]] = True
    return mask


def _encoded(column: Any) -> tuple[np.ndarray, list[str]]:
    """A string column as dictionary codes (-1 for null) and its words. The core's
    columns come dictionary-encoded: only the few words are Python strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    words = [str(w) for w in column.dictionary.to_pylist()]
    indices = column.indices.cast(pa.int64())
    codes = _numbers(indices, np.int64)
    codes[~_valid(indices)] = -1
    return codes, words


def _words_mask(codes: np.ndarray, words: list[str], chosen: frozenset[str]) -> np.ndarray:
    """Rows whose word is in ``chosen`` (nulls never)."""
    hit = np.array([w in chosen for w in words] + [False], dtype=bool)
    return hit[codes]  # code -1 reads the trailing False


def _labels(api: Any, orphan: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each row's API label as a code into the returned names (API names, then the
    labels of rows without one)."""
    codes, names = _encoded(api)
    unnamed = codes < 0
    if unnamed.any():
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

        n = table.num_rows
        if not n:
            return
        status, statuses = _encoded(_column(table, "status"))
        errors = _words_mask(status, statuses, ERROR_STATUSES)
        unanswered = _words_mask(status, statuses, UNANSWERED_STATUSES)
        orphan = _words_mask(status, statuses, frozenset({Status.ORPHAN_RESPONSE.value}))
        flagged = gap_rows(table)
        codes, names = _labels(_column(table, "api_name"), orphan)
        latency_ms = _column(table, "latency_ms").cast(pa.float64())
        latency = _numbers(latency_ms, np.float64)
        latency[~_valid(latency_ms)] = np.nan
        error_names = self._error_names(table, codes, names, errors, status, statuses)
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
        table: pa.Table,
        codes: np.ndarray,
        names: list[str],
        errors: np.ndarray,
        status: np.ndarray,
        statuses: list[str],
    ) -> dict[str, Counter[str]]:
        """Per API label, how often each error name (or status, when unnamed) occurs."""
        if not errors.any():
            return {}
        err, err_words = _encoded(_column(table, "error_name"))
        # One code space for both: error names, then statuses (for unnamed errors).
        named = np.where(err >= 0, err, len(err_words) + status)[errors]
        words = [*err_words, *statuses]
        pairs, counts = np.unique(
            np.stack([codes[errors], named], axis=1), axis=0, return_counts=True
        )
        out: dict[str, Counter[str]] = {}
        for (code, word), count in zip(pairs.tolist(), counts.tolist(), strict=True):
            out.setdefault(names[code], Counter())[words[word]] += count
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
