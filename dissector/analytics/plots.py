"""Charts of a pairs DataFrame with matplotlib, for the report and notebooks.

Figures are built with ``matplotlib.figure.Figure`` (Agg canvas), never pyplot:
no display, no global figure registry, safe in threads and tests. Every chart
function takes the pairs frame and returns a Figure; ``png_bytes`` renders it.
One style (``STYLE``) and one colour per API (``api_colors``) keep the charts
of one report consistent.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from functools import wraps
from typing import TYPE_CHECKING, Any, ParamSpec

import matplotlib
from matplotlib.figure import Figure

from dissector.analytics import series, stats, svg

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType

P = ParamSpec("P")

# Typed with matplotlib's own key type, so a misspelt rc key fails the type check.
STYLE: dict[RcKeyType, Any] = {
    "figure.figsize": (10.0, 4.2),
    "figure.dpi": 100,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    # No "tight" bbox: measuring every artist's extent again after the layout cost about
    # a sixth of saving a chart (1.4 s -> 1.1 s for the report's 11 on a long capture);
    # constrained layout already fits each chart in its figure (test_report checks it).
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 12,
    "axes.titleweight": "bold",
    "axes.labelsize": 10,
    "axes.grid": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
}

# The series choices and colours are shared with the report's SVG charts.
STATUS_COLORS = series.STATUS_COLORS
BYTES_IN_COLOR = series.BYTES_IN_COLOR
BYTES_OUT_COLOR = series.BYTES_OUT_COLOR
MAX_SERIES = series.MAX_SERIES
OTHER = series.OTHER
PALETTE = series.PALETTE
LATENCY_PICKS = series.LATENCY_PICKS
MAX_ERROR_SERIES = series.MAX_ERROR_SERIES
api_colors = series.api_colors
notable_apis = series.notable_apis
plain_number = svg.plain_number
_busiest = series.busiest
_time_unit = series.time_unit
_since_label = series.since_label
_rate_unit = series.rate_unit
_bucket_text = series.bucket_text
_byte_unit = series.byte_unit
_activity_colors = series.activity_colors
_all_api_colors = series.all_api_colors


def styled(func: Callable[P, Figure]) -> Callable[P, Figure]:
    """Build the figure under ``STYLE`` (axes read rcParams when created)."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with matplotlib.rc_context(STYLE):
            return func(*args, **kwargs)

    return wrapper


def png_bytes(fig: Figure) -> bytes:
    buf = io.BytesIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buf, format="png")
    return buf.getvalue()


def _api_labels(df: pd.DataFrame) -> pd.Series:
    return stats.api_labels(df)


def _empty(fig: Figure, ax: Axes, message: str) -> Figure:
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, color="#555555")
    return fig


def _start(df: pd.DataFrame) -> pd.Timestamp | None:
    times = stats.event_time(df).dropna()
    return times.min() if len(times) else None


def _bucket_axis(
    index: pd.DatetimeIndex, start: pd.Timestamp, width: int, span_s: float
) -> tuple[Any, float, str]:
    """Bucket starts as x values in the axis unit, the bucket width in that unit, and
    the axis label."""
    divisor, unit = _time_unit(span_s)
    x = (index - start.floor(f"{width}s")).total_seconds().to_numpy() / divisor
    return x, width / divisor, _since_label(unit, start)


def plain_log_axis(axis: Any) -> None:
    """Plain tick labels on a log axis (``ax.xaxis`` or ``ax.yaxis``), set after the data
    is drawn. Over less than a decade, a few evenly spaced labelled ticks: the default
    labels every minor tick in powers of ten there (``2.74×10¹ 2.76×10¹``) and they
    overlap. Over a decade or more, labels at the powers of ten only."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    if lo > 0 and hi / lo < 10:
        axis.set_major_locator(MaxNLocator(nbins=5, min_n_ticks=2))
    else:
        axis.set_major_locator(LogLocator(base=10.0, numticks=12))
        axis.set_minor_locator(LogLocator(base=10.0, subs=(2.0, 5.0), numticks=12))
    axis.set_major_formatter(FuncFormatter(plain_number))
    axis.set_minor_formatter(NullFormatter())


@styled
def latency_cdf(df: pd.DataFrame) -> Figure:
    """Cumulative distribution of latency per API (log x): where the curve reaches
    0.99 is that API's p99."""
    import numpy as np

    fig = Figure()
    ax = fig.add_subplot()
    timed = df[df[stats.LATENCY_COLUMN].notna()]
    if timed.empty:
        return _empty(fig, ax, "No request/response pairs with a latency")
    labels = _api_labels(timed)
    colors = _all_api_colors(df)
    latency = stats.as_float(timed[stats.LATENCY_COLUMN])
    for name in _busiest(labels):
        values = np.sort(latency[labels == name].to_numpy())
        values = np.clip(values, 1e-3, None)  # log axis: 0 ms would vanish
        y = np.arange(1, len(values) + 1) / len(values)
        p99 = float(np.percentile(values, 99))
        ax.step(
            values,
            y,
            where="post",
            color=colors[name],
            lw=1.6,
            label=f"{name} (n={len(values)}, p99 {p99:.3g} ms)",
        )
    for q in stats.PERCENTILES:
        ax.axhline(q, color="#888888", lw=0.8, ls=":")
        ax.text(
            1.0,
            q,
            f" p{round(q * 100)}",
            transform=ax.get_yaxis_transform(),
            va="center",
            fontsize=8,
            color="#555555",
        )
    ax.set_xscale("log")
    plain_log_axis(ax.xaxis)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of requests at or below")
    ax.set_title("Latency CDF per API")
    ax.legend(loc="upper left", bbox_to_anchor=(1.06, 1.0))
    return fig


@styled
def latency_over_time(df: pd.DataFrame) -> Figure:
    """Each pair's latency at its request time, one colour per API (log y): the busiest
    and the slowest APIs in colour, errors ringed in red, empty long polls hollow."""
    fig = Figure()
    ax = fig.add_subplot()
    timed = df[df[stats.LATENCY_COLUMN].notna()]
    start = _start(df)
    if timed.empty or start is None:
        return _empty(fig, ax, "No request/response pairs with a latency")
    labels = _api_labels(timed)
    shown = notable_apis(timed)
    labels = labels.where(labels.isin(shown), OTHER)
    colors = _all_api_colors(df)
    divisor, unit = _time_unit(stats.span_seconds(df))
    seconds = (stats.event_time(timed) - start).dt.total_seconds() / divisor
    latency = stats.as_float(timed[stats.LATENCY_COLUMN]).clip(lower=1e-3)
    polls = stats.service_latency(timed)["fetch_wait"].eq(stats.FETCH_WAIT_EMPTY_POLL)
    polls = polls.fillna(False).astype(bool)
    crowded = len(timed) > 5_000
    size = 4 if crowded else 14
    for rank, name in enumerate([*shown, OTHER]):
        for hollow in (False, True):
            mask = (labels == name) & (polls == hollow)
            if not mask.any():
                continue
            ax.scatter(
                seconds[mask],
                latency[mask],
                s=size,
                alpha=0.5 if crowded else 0.75,
                facecolors="none" if hollow else colors[name],
                edgecolors=colors[name] if hollow else "none",
                label=None if hollow and (labels[~polls] == name).any() else name,
                # Rarer APIs on top of busy ones, 'other' underneath everything.
                zorder=1 if name == OTHER else 2 + rank,
            )
    failed = timed["status"].isin(stats.ERROR_STATUSES).fillna(False).astype(bool)
    if failed.any():
        ax.scatter(
            seconds[failed],
            latency[failed],
            s=size * 4,
            facecolors="none",
            edgecolors=STATUS_COLORS["error"],
            linewidths=1.2,
            label=f"error ({int(failed.sum())})",
            zorder=len(shown) + 3,
        )
    if polls.any():
        ax.scatter([], [], s=size, facecolors="none", edgecolors="#555555",
                   label="hollow: empty long poll")  # fmt: skip
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis)
    ax.set_xlabel(_since_label(unit, start))
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_title("Latency over time per API")
    legible_markers(ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0)))
    return fig


LEGEND_MARKER_AREA = 40.0
"""Scatter markers in a legend, points squared: the plot's own may be tiny and faint."""


def legible_markers(legend: Any) -> None:
    """Legend markers of scatter series drawn opaque and at one readable size, whatever
    size and transparency a crowded plot gave its points."""
    handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
    for handle in handles:
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([LEGEND_MARKER_AREA])
        if hasattr(handle, "set_alpha"):
            handle.set_alpha(1.0)


def _stacked_step(
    ax: Axes, x: Any, width: float, base: Any, values: Any, color: Any, label: str
) -> None:
    """One filled step band per series (one artist, not one bar per bucket: a long
    capture has hundreds of buckets)."""
    import numpy as np

    edges = np.append(x, x[-1] + width)
    ax.stairs(base + values, edges, baseline=base, fill=True, color=color, label=label, lw=0)


@styled
def traffic_over_time(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """Requests per second stacked by API, and bytes per second in and out."""
    import numpy as np

    fig = Figure(figsize=(10.0, 6.0))
    top, bottom = fig.subplots(2, 1, sharex=True)
    start = _start(df)
    if start is None:
        bottom.set_axis_off()
        return _empty(fig, top, "No timed rows")
    per_api = stats.timeseries_by(df, "api_name", bucket_s)
    width = int(per_api.attrs["bucket_s"])
    totals = stats.timeseries(df, width)
    x, step, xlabel = _bucket_axis(per_api.index, start, width, stats.span_seconds(df))
    factor, per = _rate_unit(df)
    busiest = _busiest(_api_labels(df))
    colors = _all_api_colors(df)
    rest = [c for c in per_api.columns if c not in busiest]
    series = {name: per_api[name] for name in busiest if name in per_api}
    if rest:
        series[OTHER] = per_api[rest].sum(axis=1)
    base = np.zeros(len(per_api))
    for name, counts in series.items():
        values = counts.to_numpy() / width * factor
        _stacked_step(top, x, step, base, values, colors[name], name)
        base += values
    top.set_ylabel(f"requests {per}")
    top.set_title(f"Request rate and bytes over time ({_bucket_text(width)} buckets)")
    top.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    largest = factor * float(
        max(totals["bytes_in_per_s"].max(), totals["bytes_out_per_s"].max(), 0)
    )
    divisor, unit = _byte_unit(largest)
    edges = np.append(x, x[-1] + step)
    for column, color, label in (
        ("bytes_in_per_s", BYTES_IN_COLOR, "in: requests, client to broker"),
        ("bytes_out_per_s", BYTES_OUT_COLOR, "out: responses, broker to client"),
    ):
        values = totals[column].to_numpy(dtype=float) * factor / divisor
        bottom.stairs(values, edges, color=color, lw=1.6, label=label)
    bottom.set_ylim(bottom=0)
    bottom.set_ylabel(f"{unit} {per}")
    bottom.set_xlabel(xlabel)
    bottom.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


@styled
def error_breakdown(df: pd.DataFrame, n: int = 12) -> Figure:
    """Rows per status, and the most frequent error names by API."""
    import numpy as np

    fig = Figure(figsize=(10.0, 4.2))
    left, right = fig.subplots(1, 2, width_ratios=[1, 1.5])
    if df.empty:
        right.set_axis_off()
        return _empty(fig, left, "No rows")
    counts = df["status"].value_counts()
    statuses = [s for s in STATUS_COLORS if s in counts] + [
        str(s) for s in counts.index if s not in STATUS_COLORS
    ]
    values = [int(counts[s]) for s in statuses]
    positions = list(range(len(statuses)))
    bars = left.barh(
        positions, values, height=0.6, color=[STATUS_COLORS.get(s, "#999999") for s in statuses]
    )
    left.bar_label(bars, padding=2, fontsize=8)
    _bar_axis(left, statuses)
    left.set_title("Rows by status")
    top = stats.top_errors(df, n)
    if top.empty:
        right.set_axis_off()
        right.text(
            0.5,
            0.5,
            "No Kafka errors in this capture",
            ha="center",
            va="center",
            fontsize=12,
            color="#2ca02c",
        )
        return fig
    rows = stats.error_rows(df)
    err = rows["error_name"].astype("object").where(rows["error_name"].notna(), rows["status"])
    api = _api_labels(rows)
    table = api.groupby(err.astype(str)).value_counts().unstack(fill_value=0).reindex(top["error"])
    colors = _all_api_colors(df)
    positions = list(range(len(table)))
    left_edge = np.zeros(len(table))
    for name in table.columns:
        widths = table[name].to_numpy(dtype=float)
        right.barh(
            positions,
            widths,
            left=left_edge,
            height=0.6,
            color=colors.get(name, "#999999"),
            label=name,
        )
        left_edge += widths
    for pos, total in zip(positions, left_edge, strict=True):
        right.text(total, pos, f" {int(total)}", va="center", fontsize=8)
    _bar_axis(right, [str(e) for e in table.index])
    right.set_title("Top errors, by API")
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _bar_axis(ax: Axes, labels: list[str]) -> None:
    """Horizontal bar axis: labels top-down, integer counts, bars never fatter than
    a quarter of the axis."""
    from matplotlib.ticker import MaxNLocator

    ax.set_yticks(range(len(labels)), labels)
    slots = max(len(labels), 4)
    ax.set_ylim(slots - 0.5, -0.5)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("rows")


@styled
def size_distributions(df: pd.DataFrame) -> Figure:
    """Histograms of request and response sizes on the wire (log-spaced bins)."""
    import numpy as np

    fig = Figure(figsize=(10.0, 3.8))
    axes = fig.subplots(1, 2, sharey=True)
    specs = (
        (stats.BYTES_IN_COLUMN, "Requests (client to broker)", BYTES_IN_COLOR),
        (stats.BYTES_OUT_COLUMN, "Responses (broker to client)", BYTES_OUT_COLOR),
    )
    for ax, (column, title, color) in zip(axes, specs, strict=True):
        sizes = stats.as_float(df[column]).dropna()
        sizes = sizes[sizes > 0]
        if sizes.empty:
            _empty(fig, ax, f"No {column.replace('_', ' ')}s")
            continue
        lo, hi = float(sizes.min()), float(sizes.max())
        bins = np.geomspace(lo, hi * 1.01, 30) if hi > lo else np.array([lo * 0.9, lo * 1.1])
        ax.hist(sizes, bins=bins, color=color, alpha=0.85)
        ax.set_xscale("log")
        plain_log_axis(ax.xaxis)
        ax.set_xlabel("bytes on the wire (log scale)")
        ax.set_title(f"{title}\nmedian {sizes.median():,.0f} B, max {hi:,.0f} B")
    axes[0].set_ylabel("rows")
    return fig


@styled
def group_activity(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """Consumer-group and share-group calls per second, stacked by activity."""
    import numpy as np

    fig = Figure(figsize=(10.0, 3.8))
    ax = fig.add_subplot()
    counts = stats.group_activity(df, bucket_s)
    start = _start(df)
    if counts.empty or start is None or int(counts.to_numpy().sum()) == 0:
        return _empty(fig, ax, "No consumer-group or share-group traffic")
    width = int(counts.attrs["bucket_s"])
    x, step, xlabel = _bucket_axis(counts.index, start, width, stats.span_seconds(df))
    factor, per = _rate_unit(df)
    base = np.zeros(len(counts))
    activities = [c for c in counts.columns if c != stats.REBALANCE_LABEL]
    palette = _activity_colors()
    for name in activities:
        values = counts[name].to_numpy() / width * factor
        _stacked_step(ax, x, step, base, values, palette[name], name)
        base += values
    rebalance = counts[stats.REBALANCE_LABEL].to_numpy()
    if rebalance.sum():
        hits = rebalance > 0
        ax.scatter(
            x[hits] + step / 2,
            base[hits],
            marker="v",
            s=60,
            color="#d62728",
            label=stats.REBALANCE_LABEL,
            zorder=3,
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"calls {per}")
    ax.set_title(f"Group coordination activity ({_bucket_text(width)} buckets)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _series_lines(
    ax: Axes, table: pd.DataFrame, keys: list[str], colors: Mapping[str, Any], x_of: Any
) -> None:
    """p99 as a solid line with dots, p50 dotted, one colour per key."""
    for key in keys:
        rows = table[table["key"] == key]
        if rows.empty:
            continue
        x = x_of(rows["time"])
        ax.plot(x, rows["p99_ms"], color=colors[key], lw=1.4, marker="o", ms=2.5, label=key)
        ax.plot(x, rows["p50_ms"], color=colors[key], lw=1.0, ls=":")


@styled
def latency_percentiles(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """p99 (solid) and p50 (dotted) of service latency per bucket, per API (the busiest
    and slowest) and per broker."""
    fig = Figure(figsize=(10.0, 6.4))
    top, bottom = fig.subplots(2, 1, sharex=True)
    start = _start(df)
    per_api = stats.latency_timeseries(df, "api", bucket_s)
    if start is None or per_api.empty:
        bottom.set_axis_off()
        return _empty(fig, top, "No request/response pairs with a service latency")
    width = int(per_api.attrs["bucket_s"])
    per_broker = stats.latency_timeseries(df, "broker", width)
    divisor, unit = _time_unit(stats.span_seconds(df))
    origin = start.floor(f"{width}s")

    def x_of(times: pd.Series) -> Any:
        return (times - origin).dt.total_seconds().to_numpy() / divisor + width / divisor / 2

    apis = [a for a in notable_apis(df, limit=8) if a in set(per_api["key"])]
    _series_lines(top, per_api, apis, _all_api_colors(df), x_of)
    brokers = sorted(set(per_broker["key"]))[:MAX_SERIES]
    _series_lines(bottom, per_broker, brokers, api_colors(brokers), x_of)
    for ax, what in ((top, "API"), (bottom, "broker")):
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set_ylabel("service latency (ms, log scale)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), title=f"per {what}")
    top.set_title(f"p99 (solid) and p50 (dotted) latency over time ({_bucket_text(width)} buckets)")
    bottom.set_xlabel(_since_label(unit, start))
    return fig


@styled
def error_timeline(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """Error rows per bucket, stacked by error name (the most frequent; the rest 'other')."""
    import numpy as np

    fig = Figure(figsize=(10.0, 3.8))
    ax = fig.add_subplot()
    counts = stats.error_timeseries(df, bucket_s)
    start = _start(df)
    if start is None or counts.empty or int(counts.to_numpy().sum()) == 0:
        return _empty(fig, ax, "No errors in this capture")
    width = int(counts.attrs["bucket_s"])
    x, step, xlabel = _bucket_axis(counts.index, start, width, stats.span_seconds(df))
    names = list(counts.columns[:MAX_ERROR_SERIES])
    series = {name: counts[name] for name in names}
    if len(counts.columns) > MAX_ERROR_SERIES:
        series[OTHER] = counts[counts.columns[MAX_ERROR_SERIES:]].sum(axis=1)
    colors = api_colors(names)
    base = np.zeros(len(counts))
    for name, values in series.items():
        values = values.to_numpy(dtype=float)
        _stacked_step(ax, x, step, base, values, colors[name], f"{name} ({int(values.sum())})")
        base += values
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"error rows per {_bucket_text(width)} bucket")
    ax.set_title("Errors over time by error code")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


MATRIX_APIS = series.MATRIX_APIS
MATRIX_BROKERS = series.MATRIX_BROKERS
MATRIX_MIN_WIDTH = 5.6
"""Inches: the heat map's title and colour bar fit a figure this wide."""


@styled
def broker_api_matrix(df: pd.DataFrame) -> Figure:
    """p99 service latency of each API on each broker, as a heat map with the values."""
    import numpy as np
    from matplotlib.colors import LogNorm

    matrix = stats.latency_matrix(df, "p99_ms")
    if matrix.empty:
        fig = Figure(figsize=(10.0, 3.0))
        return _empty(fig, fig.add_subplot(), "No request/response pairs with a service latency")
    matrix = matrix.iloc[:MATRIX_APIS, :MATRIX_BROKERS]
    rows, cols = matrix.shape
    # at least MATRIX_MIN_WIDTH: the title is wider than one broker's column
    width = min(10.0, max(MATRIX_MIN_WIDTH, 3.2 + 1.3 * cols))
    fig = Figure(figsize=(width, 1.2 + 0.28 * rows))
    ax = fig.add_subplot()
    values = matrix.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    lo = max(float(finite.min()), 1e-3)
    hi = max(float(finite.max()), lo * 1.01)
    image = ax.imshow(np.clip(values, lo, None), aspect="auto", cmap="YlOrRd", norm=LogNorm(lo, hi))
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            dark = np.log(max(v, lo) / lo) > 0.6 * np.log(hi / lo)
            ax.text(j, i, plain_number(v), ha="center", va="center", fontsize=7,
                    color="white" if dark else "#1d2330")  # fmt: skip
    ax.set_xticks(range(cols), list(matrix.columns), rotation=20, ha="right")
    ax.set_yticks(range(rows), list(matrix.index))
    ax.grid(False)
    ax.set_xlabel("broker")
    ax.set_title("p99 service latency (ms), API x broker")
    bar = fig.colorbar(image, ax=ax, shrink=0.8)
    bar.set_label("p99 ms (log scale)")
    plain_log_axis(bar.ax.yaxis)
    return fig


@styled
def throttle_over_time(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """Throttled responses per bucket, and the longest throttle_ms asked in it."""
    fig = Figure(figsize=(10.0, 3.6))
    ax = fig.add_subplot()
    table = stats.throttle_timeseries(df, bucket_s)
    start = _start(df)
    if start is None or table.empty:
        return _empty(fig, ax, "No timed rows")
    width = int(table.attrs["bucket_s"])
    x, step, xlabel = _bucket_axis(table.index, start, width, stats.span_seconds(df))
    import numpy as np

    edges = np.append(x, x[-1] + step)
    throttled = table["throttled"].to_numpy(dtype=float)
    ax.stairs(throttled, edges, fill=True, color="#d62728", alpha=0.6, lw=0,
              label=f"throttled responses ({int(throttled.sum())})")  # fmt: skip
    ax.set_ylim(bottom=0, top=max(1.0, float(throttled.max()) * 1.15))
    ax.set_ylabel(f"throttled responses per {_bucket_text(width)} bucket")
    ax.set_xlabel(xlabel)
    right = ax.twinx()
    right.stairs(table["max_throttle_ms"].to_numpy(dtype=float), edges, color="#1d2330", lw=1.3,
                 label="longest throttle_ms")  # fmt: skip
    right.set_ylim(bottom=0, top=max(1.0, float(table["max_throttle_ms"].max()) * 1.15))
    right.set_ylabel("longest throttle (ms)")
    right.grid(False)
    handles = ax.get_legend_handles_labels()
    more = right.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left",
              bbox_to_anchor=(1.08, 1.0))  # fmt: skip
    title = "Broker throttling (quotas) over time"
    ax.set_title(title if throttled.sum() else title + ": no response was throttled")
    return fig


@styled
def connection_churn(df: pd.DataFrame, bucket_s: int | None = None) -> Figure:
    """Connections opened and closed per bucket (first and last Kafka message seen on
    each), and how many were active."""
    import numpy as np

    fig = Figure(figsize=(10.0, 3.6))
    ax = fig.add_subplot()
    table = stats.connection_timeseries(df, bucket_s)
    start = _start(df)
    if start is None or table.empty:
        return _empty(fig, ax, "No timed rows")
    width = int(table.attrs["bucket_s"])
    x, step, xlabel = _bucket_axis(table.index, start, width, stats.span_seconds(df))
    edges = np.append(x, x[-1] + step)
    ax.stairs(
        table["opened"].to_numpy(dtype=float),
        edges,
        fill=True,
        color="#2ca02c",
        alpha=0.55,
        lw=0,
        label=f"first message ({int(table['opened'].sum())})",
    )
    ax.stairs(
        -table["closed"].to_numpy(dtype=float),
        edges,
        fill=True,
        color="#d62728",
        alpha=0.55,
        lw=0,
        label=f"last message ({int(table['closed'].sum())})",
    )
    ax.stairs(table["active"].to_numpy(dtype=float), edges, color="#1d2330", lw=1.4,
              label="active connections")  # fmt: skip
    ax.axhline(0, color="#888888", lw=0.8)
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{abs(v):.0f}"))
    ax.set_ylabel(f"connections per {_bucket_text(width)} bucket")
    ax.set_xlabel(xlabel)
    ax.set_title("Connection churn: opened above the line, closed below")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


_DRAW: Mapping[str, Callable[[pd.DataFrame], Figure]] = {
    "latency-cdf": latency_cdf,
    "latency-time": latency_over_time,
    "latency-percentiles": latency_percentiles,
    "broker-api": broker_api_matrix,
    "traffic": traffic_over_time,
    "errors": error_breakdown,
    "error-timeline": error_timeline,
    "throttle": throttle_over_time,
    "connections": connection_churn,
    "sizes": size_distributions,
    "groups": group_activity,
}
CHARTS: Mapping[str, tuple[str, Callable[[pd.DataFrame], Figure]]] = {
    chart: (title, _DRAW[chart]) for chart, title in series.CHART_TITLES.items()
}
"""Every chart by a stable id (used as the report's image ids), with its title
(``series.CHART_TITLES``, as the report's SVG charts)."""
