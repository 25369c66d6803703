"""The numbers each chart draws, from a pairs DataFrame: small pure functions returning
typed series (numpy arrays), with no drawing library.

The report renders them as inline SVG (``analytics.charts``); ``analytics.plots`` draws
the same charts with matplotlib for notebooks and shares the choices made here (which
APIs get a colour, the colours, the time and rate units), so that both show one story.
The aggregations themselves are ``analytics.stats``' (the tables use them too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dissector.analytics import stats

if TYPE_CHECKING:
    import pandas as pd

STATUS_COLORS: Mapping[str, str] = {
    "ok": "#2ca02c",
    "error": "#d62728",
    "malformed": "#9467bd",
    "unanswered": "#ff7f0e",
    "no_response": "#7f7f7f",
    "orphan_response": "#8c564b",
}
UNKNOWN_STATUS_COLOR = "#999999"
BYTES_IN_COLOR = "#1f77b4"
BYTES_OUT_COLOR = "#ff7f0e"
OTHER_COLOR = "#b0b0b0"
MAX_SERIES = 10
"""Charts with one series per API show the busiest ones; the rest are 'other'."""
OTHER = "other"
MAX_ERROR_SERIES = 8
CHART_TITLES: dict[str, str] = {
    "latency-cdf": "Latency CDF per API",
    "latency-time": "Latency over time per API",
    "latency-percentiles": "p50 and p99 over time per API and broker",
    "broker-api": "p99 latency, API x broker",
    "traffic": "Request rate and bytes over time",
    "errors": "Status and errors",
    "error-timeline": "Errors over time by error code",
    "throttle": "Throttling over time",
    "connections": "Connection churn",
    "sizes": "Request and response sizes",
    "groups": "Group coordination activity",
}
"""Every chart by its stable id (the report's figure ids), with its title: the report's
SVG charts (``charts.CHARTS``) and the notebooks' matplotlib ones (``plots.CHARTS``)."""
LATENCY_PICKS = 5
"""Latency-over-time shows the busiest APIs and, as many again, the slowest (by p99):
the slow ones are what the chart is looked at for."""
PERCENTILE_APIS = 8
"""Series per panel of the percentiles-over-time chart."""
MATRIX_APIS = 24
MATRIX_BROKERS = 12
LATENCY_FLOOR_MS = 1e-3
"""Log axes: a 0 ms latency is drawn at this value (it would vanish)."""

PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#17becf",
    "#393b79",
)
"""Distinct colours for the busiest APIs; grey is kept for 'other'."""

# matplotlib's tab20, tab20b and tab20c qualitative maps, as hex (its colours, without
# importing it: the report draws its charts without matplotlib).
TAB20: tuple[str, ...] = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip
TAB20B: tuple[str, ...] = (
    "#393b79", "#5254a3", "#6b6ecf", "#9c9ede", "#637939", "#8ca252", "#b5cf6b", "#cedb9c",
    "#8c6d31", "#bd9e39", "#e7ba52", "#e7cb94", "#843c39", "#ad494a", "#d6616b", "#e7969c",
    "#7b4173", "#a55194", "#ce6dbd", "#de9ed6",
)  # fmt: skip
TAB20C: tuple[str, ...] = (
    "#3182bd", "#6baed6", "#9ecae1", "#c6dbef", "#e6550d", "#fd8d3c", "#fdae6b", "#fdd0a2",
    "#31a354", "#74c476", "#a1d99b", "#c7e9c0", "#756bb1", "#9e9ac8", "#bcbddc", "#dadaeb",
    "#636363", "#969696", "#bdbdbd", "#d9d9d9",
)  # fmt: skip


def _shades() -> list[str]:
    extra = [*TAB20[1::2], *TAB20B, *TAB20C]
    return [*PALETTE, *(c for c in dict.fromkeys(extra) if c not in PALETTE)]


def api_colors(names_by_rank: Iterable[str]) -> dict[str, str]:
    """A fixed colour per API: ``PALETTE`` for the first ones given (busiest first),
    then tab20's lighter shades, tab20b and tab20c (59 distinct colours before any
    repeats), grey for 'other'."""
    shades = _shades()
    colors: dict[str, str] = {}
    for i, name in enumerate(n for n in dict.fromkeys(names_by_rank) if n != OTHER):
        colors[name] = shades[i % len(shades)]
    colors[OTHER] = OTHER_COLOR
    return colors


def activity_colors() -> dict[str, str]:
    """One colour per group activity, fixed by ``stats.GROUP_ACTIVITY`` order: the
    same activity has the same colour in every report."""
    shades = [*TAB20[0::2], *TAB20[1::2]]
    activities = dict.fromkeys(v[1] for v in stats.GROUP_ACTIVITY.values())
    return {name: shades[i % len(shades)] for i, name in enumerate(activities)}


def busiest(labels: pd.Series, limit: int = MAX_SERIES) -> list[str]:
    """The most frequent labels, most first (ties by name)."""
    counts = labels.value_counts()
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [str(name) for name, _ in ranked[:limit]]


def all_api_colors(df: pd.DataFrame) -> dict[str, str]:
    """Every API of ``df`` its colour, busiest first: one API, one colour per report."""
    return api_colors(busiest(stats.api_labels(df), limit=len(df)))


def notable_apis(df: pd.DataFrame, limit: int = MAX_SERIES) -> list[str]:
    """APIs worth a colour of their own in a latency chart: the slowest by p99 of
    ``service_ms`` and the busiest, alternately, at most ``limit``."""
    service = stats.service_latency(df)["service_ms"]
    labels = stats.api_labels(df)
    timed = service.notna()
    p99 = service[timed].groupby(labels[timed]).quantile(0.99)
    slowest = [str(n) for n, _ in sorted(p99.items(), key=lambda kv: (-kv[1], kv[0]))]
    ranked = busiest(labels[timed], limit=len(df))
    picked: list[str] = []
    # One name at a time: when the slowest API is also the busiest, a pair of the two
    # would otherwise add it twice (a legend listing the same API twice).
    alternated = [n for pair in zip(slowest[:LATENCY_PICKS], ranked, strict=False) for n in pair]
    for name in [*alternated, *ranked]:
        if name not in picked:
            picked.append(name)
    return picked[:limit]


# ---------------------------------------------------------------------------
# Units
# ---------------------------------------------------------------------------

TIME_UNITS: tuple[tuple[float, str, float], ...] = (
    (1.0, "seconds", 600.0),
    (60.0, "minutes", 600.0 * 60),
    (3600.0, "hours", 72.0 * 3600),
    (86400.0, "days", math.inf),
)
"""(seconds per unit, unit name, longest span shown in that unit) for time axes."""


def time_unit(span_s: float) -> tuple[float, str]:
    """A time-axis unit that keeps tick labels short for the capture's span."""
    for divisor, unit, limit in TIME_UNITS:
        if span_s <= limit:
            return divisor, unit
    return TIME_UNITS[-1][:2]


def since_label(unit: str, start: pd.Timestamp) -> str:
    return f"{unit} since {start.strftime('%Y-%m-%d %H:%M:%S')} UTC"


def rate_unit(df: pd.DataFrame) -> tuple[float, str]:
    """The report's one rate unit (``stats.rate_unit``), as axis words."""
    factor, label = stats.rate_unit(df)
    return factor, {"per s": "per second", "per min": "per minute", "per h": "per hour"}[label]


def bucket_text(bucket_s: int) -> str:
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if bucket_s >= size and bucket_s % size == 0:
            return f"{bucket_s // size} {unit}"
    return f"{bucket_s} s"


def byte_unit(largest: float) -> tuple[float, str]:
    for divisor, unit in ((1024.0**3, "GiB"), (1024.0**2, "MiB"), (1024.0, "KiB")):
        if largest >= divisor:
            return divisor, unit
    return 1.0, "B"


def start_time(df: pd.DataFrame) -> pd.Timestamp | None:
    times = stats.event_time(df).dropna()
    return times.min() if len(times) else None


# ---------------------------------------------------------------------------
# Series
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Buckets:
    """A time axis of ``width_s`` buckets: their ``edges`` (n + 1) in the axis unit
    since the first bucket's start; ``label`` names the unit and the start."""

    edges: np.ndarray
    width_s: int
    label: str

    @property
    def mids(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2


@dataclass(frozen=True, slots=True)
class Band:
    """One series over time buckets: ``values`` per bucket, in the chart's unit."""

    name: str
    color: str
    values: np.ndarray


def buckets(index: pd.DatetimeIndex, start: pd.Timestamp, width: int, span_s: float) -> Buckets:
    """The buckets of a ``stats`` time series (indexed by bucket start), on an axis in
    the capture's time unit counted from ``start``."""
    divisor, unit = time_unit(span_s)
    x = (index - start.floor(f"{width}s")).total_seconds().to_numpy() / divisor
    edges = np.append(x, x[-1] + width / divisor) if len(x) else np.zeros(1)
    return Buckets(edges=edges, width_s=width, label=since_label(unit, start))


@dataclass(frozen=True, slots=True)
class Traffic:
    buckets: Buckets
    per: str
    """Rate unit words: "per second" (or minute, hour)."""
    requests: tuple[Band, ...]
    """Requests per unit by API, busiest first, then 'other': stacked."""
    byte_unit: str
    bytes: tuple[Band, ...]
    """Bytes in and out per unit, in ``byte_unit``."""


def traffic(df: pd.DataFrame, bucket_s: int | None = None) -> Traffic | None:
    """Requests per unit stacked by API (``MAX_SERIES`` busiest, the rest 'other'),
    and wire bytes per unit in and out; None without timed rows."""
    start = start_time(df)
    if start is None:
        return None
    per_api = stats.timeseries_by(df, "api_name", bucket_s)
    width = int(per_api.attrs["bucket_s"])
    totals = stats.timeseries(df, width)
    axis = buckets(per_api.index, start, width, stats.span_seconds(df))
    factor, per = rate_unit(df)
    top = busiest(stats.api_labels(df))
    colors = all_api_colors(df)
    counts = {name: per_api[name].to_numpy() for name in top if name in per_api}
    rest = [c for c in per_api.columns if c not in top]
    if rest:
        counts[OTHER] = per_api[rest].sum(axis=1).to_numpy()
    requests = tuple(
        Band(name, colors[name], values / width * factor) for name, values in counts.items()
    )
    largest = factor * float(
        max(totals["bytes_in_per_s"].max(), totals["bytes_out_per_s"].max(), 0)
    )
    divisor, unit = byte_unit(largest)
    wire = tuple(
        Band(label, color, totals[column].to_numpy(dtype=float) * factor / divisor)
        for column, color, label in (
            ("bytes_in_per_s", BYTES_IN_COLOR, "in: requests, client to broker"),
            ("bytes_out_per_s", BYTES_OUT_COLOR, "out: responses, broker to client"),
        )
    )
    return Traffic(axis, per, requests, unit, wire)


@dataclass(frozen=True, slots=True)
class Cdf:
    """One API's latencies, sorted (0 ms drawn at ``LATENCY_FLOOR_MS``)."""

    name: str
    color: str
    values: np.ndarray
    p99: float

    @property
    def label(self) -> str:
        return f"{self.name} (n={len(self.values)}, p99 {self.p99:.3g} ms)"


def latency_cdfs(df: pd.DataFrame) -> tuple[Cdf, ...]:
    """The latency distribution of each of the busiest APIs (``MAX_SERIES``)."""
    # the whole frame's per-row columns (once per report: ``memoized``), rows picked
    latency = stats.as_float(df[stats.LATENCY_COLUMN])
    timed = latency.notna().to_numpy()
    if not timed.any():
        return ()
    named = stats.api_labels(df)[timed]
    labels = named.to_numpy()
    colors = all_api_colors(df)
    latency = latency.to_numpy()[timed]
    out = []
    for name in busiest(named):
        values = np.clip(np.sort(latency[labels == name]), LATENCY_FLOOR_MS, None)
        out.append(Cdf(name, colors[name], values, float(np.percentile(values, 99))))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Points:
    """Pairs drawn as dots: x in the time unit, latency in ms."""

    name: str
    color: str
    x: np.ndarray
    y: np.ndarray
    hollow: bool = False
    label: str | None = None
    """The legend's words; None: not in the legend (its filled twin is)."""


@dataclass(frozen=True, slots=True)
class LatencyPoints:
    x_label: str
    series: tuple[Points, ...]
    """Per shown API (then 'other'): filled dots, then hollow ones (empty long polls)."""
    errors: Points
    polls: bool
    """Some dots are hollow (the legend says what hollow means)."""


def latency_points(df: pd.DataFrame) -> LatencyPoints | None:
    """Each answered pair's latency at its request time: the busiest and slowest APIs
    (``notable_apis``) by name, the others 'other'; errors apart; None without any."""
    # Each per-row column of the whole frame (computed once per report: ``memoized``),
    # then the rows with a latency picked: not a copy of every column of those rows.
    latency = stats.as_float(df[stats.LATENCY_COLUMN])
    timed = latency.notna().to_numpy()
    start = start_time(df)
    if not timed.any() or start is None:
        return None
    # the APIs of the rows with a service time, which all have a latency
    shown = notable_apis(df)
    labels = stats.api_labels(df)
    labels = labels.where(labels.isin(shown), OTHER).to_numpy()[timed]
    colors = all_api_colors(df)
    divisor, unit = time_unit(stats.span_seconds(df))
    x = ((stats.event_time(df) - start).dt.total_seconds() / divisor).to_numpy()[timed]
    y = latency.clip(lower=LATENCY_FLOOR_MS).to_numpy()[timed]
    fetch_wait = stats.service_latency(df)["fetch_wait"]
    polls = fetch_wait.eq(stats.FETCH_WAIT_EMPTY_POLL).fillna(False).astype(bool).to_numpy()[timed]
    series = []
    for name in [*shown, OTHER]:
        named = labels == name
        for hollow in (False, True):
            mask = named & (polls == hollow)
            if not mask.any():
                continue
            # The hollow twin of a series with filled dots stays out of the legend.
            label = None if hollow and (named & ~polls).any() else name
            series.append(Points(name, colors[name], x[mask], y[mask], hollow, label))
    failed = df["status"].isin(stats.ERROR_STATUSES).fillna(False).astype(bool).to_numpy()[timed]
    errors = Points(
        "error", STATUS_COLORS["error"], x[failed], y[failed], True, f"error ({int(failed.sum())})"
    )
    return LatencyPoints(since_label(unit, start), tuple(series), errors, bool(polls.any()))


@dataclass(frozen=True, slots=True)
class PercentileLine:
    """p50 and p99 of service latency per bucket of one API or broker (NaN: none)."""

    name: str
    color: str
    x: np.ndarray
    p50: np.ndarray
    p99: np.ndarray


@dataclass(frozen=True, slots=True)
class Percentiles:
    x_label: str
    x_range: tuple[float, float]
    width_s: int
    apis: tuple[PercentileLine, ...]
    brokers: tuple[PercentileLine, ...]


def latency_percentiles(df: pd.DataFrame, bucket_s: int | None = None) -> Percentiles | None:
    """p50 and p99 service latency per bucket (at the bucket's middle), per API (the
    notable ones, ``PERCENTILE_APIS``) and per broker (``MAX_SERIES``, by name)."""
    start = start_time(df)
    per_api = stats.latency_timeseries(df, "api", bucket_s)
    if start is None or per_api.empty:
        return None
    width = int(per_api.attrs["bucket_s"])
    per_broker = stats.latency_timeseries(df, "broker", width)
    divisor, unit = time_unit(stats.span_seconds(df))
    origin = start.floor(f"{width}s")

    def lines(table: pd.DataFrame, keys: list[str], colors: Mapping[str, str]) -> tuple:
        # each column once, then each key's rows picked (not a filter of the table each)
        x = (table["time"] - origin).dt.total_seconds().to_numpy() / divisor
        x = x + width / divisor / 2
        p50 = table["p50_ms"].to_numpy(dtype=float)
        p99 = table["p99_ms"].to_numpy(dtype=float)
        rows_of = table.groupby("key", sort=False).indices if len(table) else {}
        out = []
        for key in keys:
            rows = rows_of.get(key)
            if rows is None or not len(rows):
                continue
            out.append(PercentileLine(key, colors[key], x[rows], p50[rows], p99[rows]))
        return tuple(out)

    present = set(per_api["key"])
    apis = [a for a in notable_apis(df, limit=PERCENTILE_APIS) if a in present]
    brokers = sorted(set(per_broker["key"]))[:MAX_SERIES]
    events = stats.event_time(df).dropna()
    first = (events.min() - origin).total_seconds() / divisor
    last = (events.max() - origin).total_seconds() / divisor + width / divisor
    return Percentiles(
        since_label(unit, start),
        (float(first), float(last)),
        width,
        lines(per_api, apis, all_api_colors(df)),
        lines(per_broker, brokers, api_colors(brokers)),
    )


@dataclass(frozen=True, slots=True)
class Matrix:
    """p99 service latency (ms) per API (rows, busiest first) and broker (columns);
    NaN where that broker answered none of that API."""

    apis: tuple[str, ...]
    brokers: tuple[str, ...]
    values: np.ndarray


def latency_matrix(df: pd.DataFrame) -> Matrix | None:
    matrix = stats.latency_matrix(df, "p99_ms")
    if matrix.empty:
        return None
    matrix = matrix.iloc[:MATRIX_APIS, :MATRIX_BROKERS]
    return Matrix(
        tuple(str(a) for a in matrix.index),
        tuple(str(b) for b in matrix.columns),
        matrix.to_numpy(dtype=float),
    )


@dataclass(frozen=True, slots=True)
class Bar:
    name: str
    color: str
    value: float


@dataclass(frozen=True, slots=True)
class ErrorBars:
    """Rows per status, and the most frequent errors (rows) split by API."""

    statuses: tuple[Bar, ...]
    errors: tuple[str, ...]
    by_api: tuple[Band, ...]
    """Per API, its rows of each of ``errors`` (stacked along the bars)."""


def error_bars(df: pd.DataFrame, n: int = 12) -> ErrorBars | None:
    if df.empty:
        return None
    counts = df["status"].value_counts()
    names = [s for s in STATUS_COLORS if s in counts]
    names += [str(s) for s in counts.index if s not in STATUS_COLORS]
    statuses = tuple(
        Bar(s, STATUS_COLORS.get(s, UNKNOWN_STATUS_COLOR), float(counts[s])) for s in names
    )
    top = stats.top_errors(df, n)
    if top.empty:
        return ErrorBars(statuses, (), ())
    rows = stats.error_table(df)
    api = rows["api"]
    table = api.groupby(rows["error"]).value_counts().unstack(fill_value=0).reindex(top["error"])
    colors = all_api_colors(df)
    by_api = tuple(
        Band(str(name), colors.get(str(name), UNKNOWN_STATUS_COLOR), table[name].to_numpy(float))
        for name in table.columns
    )
    return ErrorBars(statuses, tuple(str(e) for e in table.index), by_api)


@dataclass(frozen=True, slots=True)
class Stacked:
    """Bands over time buckets, stacked; ``per`` is the y unit's words."""

    buckets: Buckets
    per: str
    bands: tuple[Band, ...]


def error_timeline(df: pd.DataFrame, bucket_s: int | None = None) -> Stacked | None:
    """Error rows per bucket by error name (``MAX_ERROR_SERIES`` most frequent, the
    rest 'other'); None without errors."""
    counts = stats.error_timeseries(df, bucket_s)
    start = start_time(df)
    if start is None or counts.empty or int(counts.to_numpy().sum()) == 0:
        return None
    width = int(counts.attrs["bucket_s"])
    axis = buckets(counts.index, start, width, stats.span_seconds(df))
    names = [str(c) for c in counts.columns[:MAX_ERROR_SERIES]]
    values = {name: counts[name].to_numpy(dtype=float) for name in names}
    if len(counts.columns) > MAX_ERROR_SERIES:
        values[OTHER] = counts[counts.columns[MAX_ERROR_SERIES:]].sum(axis=1).to_numpy(float)
    colors = api_colors(names)
    bands = tuple(Band(name, colors[name], v) for name, v in values.items())
    return Stacked(axis, f"per {bucket_text(width)} bucket", bands)


@dataclass(frozen=True, slots=True)
class Throttle:
    buckets: Buckets
    throttled: np.ndarray
    """Responses with throttle_time_ms > 0, per bucket."""
    max_ms: np.ndarray
    """The longest throttle asked in the bucket (0: none)."""


def throttle(df: pd.DataFrame, bucket_s: int | None = None) -> Throttle | None:
    table = stats.throttle_timeseries(df, bucket_s)
    start = start_time(df)
    if start is None or table.empty:
        return None
    width = int(table.attrs["bucket_s"])
    axis = buckets(table.index, start, width, stats.span_seconds(df))
    return Throttle(
        axis, table["throttled"].to_numpy(dtype=float), table["max_throttle_ms"].to_numpy(float)
    )


@dataclass(frozen=True, slots=True)
class Churn:
    buckets: Buckets
    opened: np.ndarray
    closed: np.ndarray
    active: np.ndarray


def connection_churn(df: pd.DataFrame, bucket_s: int | None = None) -> Churn | None:
    table = stats.connection_timeseries(df, bucket_s)
    start = start_time(df)
    if start is None or table.empty:
        return None
    width = int(table.attrs["bucket_s"])
    axis = buckets(table.index, start, width, stats.span_seconds(df))
    return Churn(
        axis,
        table["opened"].to_numpy(dtype=float),
        table["closed"].to_numpy(dtype=float),
        table["active"].to_numpy(dtype=float),
    )


@dataclass(frozen=True, slots=True)
class Histogram:
    """Rows per log-spaced size bin (``edges``: n + 1 bytes)."""

    title: str
    color: str
    edges: np.ndarray
    counts: np.ndarray
    median: float
    largest: float


SIZE_BINS = 30


def size_histograms(df: pd.DataFrame) -> tuple[Histogram | str, Histogram | str]:
    """Request and response sizes on the wire, each a histogram (or, when there are no
    sizes, the words saying so)."""
    specs = (
        (stats.BYTES_IN_COLUMN, "Requests (client to broker)", BYTES_IN_COLOR),
        (stats.BYTES_OUT_COLUMN, "Responses (broker to client)", BYTES_OUT_COLOR),
    )
    out: list[Histogram | str] = []
    for column, title, color in specs:
        sizes = stats.as_float(df[column]).dropna()
        sizes = sizes[sizes > 0].to_numpy()
        if not len(sizes):
            out.append(f"No {column.replace('_', ' ')}s")
            continue
        lo, hi = float(sizes.min()), float(sizes.max())
        edges = (
            np.geomspace(lo, hi * 1.01, SIZE_BINS) if hi > lo else np.array([lo * 0.9, lo * 1.1])
        )
        counts, _ = np.histogram(sizes, bins=edges)
        out.append(Histogram(title, color, edges, counts, float(np.median(sizes)), hi))
    return out[0], out[1]


@dataclass(frozen=True, slots=True)
class GroupActivity:
    stacked: Stacked
    rebalance: np.ndarray
    """Per bucket, responses saying a rebalance is in progress."""


def group_activity(df: pd.DataFrame, bucket_s: int | None = None) -> GroupActivity | None:
    """Consumer-group and share-group calls per unit, by activity; None without any."""
    counts = stats.group_activity(df, bucket_s)
    start = start_time(df)
    if counts.empty or start is None or int(counts.to_numpy().sum()) == 0:
        return None
    width = int(counts.attrs["bucket_s"])
    axis = buckets(counts.index, start, width, stats.span_seconds(df))
    factor, per = rate_unit(df)
    palette = activity_colors()
    bands = tuple(
        Band(str(name), palette[str(name)], counts[name].to_numpy() / width * factor)
        for name in counts.columns
        if name != stats.REBALANCE_LABEL
    )
    rebalance = counts[stats.REBALANCE_LABEL].to_numpy(dtype=float)
    return GroupActivity(Stacked(axis, per, bands), rebalance)
