"""The report's charts as inline SVG: each takes the pairs frame and returns one SVG
document, the numbers from ``analytics.series``, the drawing from ``analytics.svg``.

They show what ``analytics.plots`` (matplotlib, for notebooks) shows: the same series,
colours, units, titles, axis labels and legends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dissector.analytics import series, stats
from dissector.analytics.svg import (
    Axis,
    Band,
    Cells,
    ColorBar,
    Cumulative,
    Dots,
    Group,
    HBars,
    Key,
    Legend,
    Line,
    Panel,
    Rule,
    StepLine,
    Triangles,
    category_axis,
    figure,
    linear_axis,
    log_axis,
)

if TYPE_CHECKING:
    import pandas as pd

WIDTH = 1000.0
"""Pixels: the report's content column at a 1400 px window (the page scales it down
on narrower ones)."""
TALL = 420.0
SHORT = 380.0


def _message(text: str, height: float = 300.0, color: str = "#555555") -> tuple[Panel, float]:
    return Panel(message=text, message_color=color), height


def _time_axis(edges: np.ndarray, label: str) -> Axis:
    return linear_axis([edges[0], edges[-1]], label, zero=False, pad=0.0)


def _stack(
    bands: Sequence[series.Band], edges: np.ndarray, sign: float = 1.0
) -> tuple[list[Group], np.ndarray]:
    """Bands stacked in order (the first at the bottom), each a named series group;
    and the stack's top."""
    base = np.zeros(len(edges) - 1)
    groups = []
    for band in bands:
        top = base + sign * band.values
        groups.append(Group(band.name, (Band(edges, top, base, band.color),)))
        base = top
    return groups, base


def latency_cdf(df: pd.DataFrame) -> str:
    title = "Latency CDF per API"
    curves = series.latency_cdfs(df)
    if not curves:
        return figure([[_message("No request/response pairs with a latency")[0]]], [300],
                      label=title)  # fmt: skip
    x = log_axis(np.concatenate([c.values for c in curves]), "latency (ms, log scale)")
    y = Axis(0.0, 1.02, "fraction of requests at or below")
    marks: list = [Group(c.name, (Cumulative(c.values, c.color),)) for c in curves]
    marks += [Rule(q, f"p{round(q * 100)}") for q in stats.PERCENTILES]
    legend = Legend(tuple(Key(c.label, c.color, "line") for c in curves))
    panel = Panel(x, y, marks, title, legend)
    return figure([[panel]], [TALL], label=title, width=WIDTH)


def latency_over_time(df: pd.DataFrame) -> str:
    title = "Latency over time per API"
    points = series.latency_points(df)
    if points is None:
        return figure([[_message("No request/response pairs with a latency")[0]]], [300],
                      label=title)  # fmt: skip
    every = [*points.series, points.errors]
    x = linear_axis(np.concatenate([p.x for p in every]), points.x_label, zero=False, pad=0.01)
    y = log_axis(np.concatenate([p.y for p in every]), "latency (ms, log scale)")
    crowded = sum(len(p.x) for p in points.series) > 5_000
    radius, opacity = (1.2, 0.5) if crowded else (2.1, 0.75)
    # 'other' underneath, rarer APIs (listed later) on top of busy ones
    ordered = [p for p in points.series if p.name == series.OTHER]
    ordered += [p for p in points.series if p.name != series.OTHER]
    marks: list = [
        Group(p.name, (Dots(p.x, p.y, p.color, radius, p.hollow, opacity),)) for p in ordered
    ]
    keys = [Key(p.label, p.color, "dot") for p in points.series if p.label]
    if len(points.errors.x):
        marks.append(Group("error", (Dots(points.errors.x, points.errors.y, points.errors.color,
                                          radius * 2, True, 1.0, 1.2),)))  # fmt: skip
        keys.append(Key(points.errors.label or "error", points.errors.color, "ring"))
    if points.polls:
        keys.append(Key("hollow: empty long poll", "#555555", "ring"))
    panel = Panel(x, y, marks, title, Legend(tuple(keys)))
    return figure([[panel]], [TALL], label=title, width=WIDTH)


def latency_percentiles(df: pd.DataFrame) -> str:
    title = "p99 (solid) and p50 (dotted) latency over time"
    data = series.latency_percentiles(df)
    if data is None:
        return figure([[_message("No request/response pairs with a service latency")[0]]],
                      [300], label=title)  # fmt: skip
    x = linear_axis(data.x_range, data.x_label, zero=False, pad=0.0)
    panels = []
    for i, (what, lines) in enumerate((("API", data.apis), ("broker", data.brokers))):
        values = np.concatenate([np.concatenate([v.p50, v.p99]) for v in lines] or [np.ones(1)])
        y = log_axis(values, "service latency (ms, log scale)")
        marks: list = [
            Group(
                v.name,
                (
                    Line(v.x, v.p99, v.color, 1.4, dots=1.6),
                    Line(v.x, v.p50, v.color, 1.0, dash="2 2"),
                ),
            )
            for v in lines
        ]
        legend = Legend(tuple(Key(v.name, v.color, "line") for v in lines), f"per {what}")
        heading = f"{title} ({series.bucket_text(data.width_s)} buckets)" if i == 0 else ""
        panels.append(Panel(x, y, marks, heading, legend, hide_x_labels=i == 0))
    return figure([[panels[0]], [panels[1]]], [300, 320], label=title, width=WIDTH)


def broker_api_matrix(df: pd.DataFrame) -> str:
    title = "p99 service latency (ms), API x broker"
    matrix = series.latency_matrix(df)
    if matrix is None:
        return figure([[_message("No request/response pairs with a service latency")[0]]],
                      [300], label=title)  # fmt: skip
    finite = matrix.values[np.isfinite(matrix.values)]
    lo = max(float(finite.min()), 1e-3)
    hi = max(float(finite.max()), lo * 1.01)
    x = category_axis(matrix.brokers, "broker")
    y = category_axis(matrix.apis, inverted=True)
    panel = Panel(
        x,
        y,
        [Group("p99 ms", (Cells(matrix.values, lo, hi),))],
        title,
        colorbar=ColorBar(lo, hi, "p99 ms (log scale)"),
        rotate_x=True,
    )
    rows, cols = matrix.values.shape
    # as wide as the brokers need (a cell holds a number), at most the full width
    width = min(WIDTH, max(560.0, 320.0 + 130.0 * cols))
    return figure([[panel]], [120 + 28 * rows], label=title, width=width)


def traffic_over_time(df: pd.DataFrame) -> str:
    data = series.traffic(df)
    title = "Request rate and bytes over time"
    if data is None:
        return figure([[_message("No timed rows")[0]]], [300], label=title)
    edges = data.buckets.edges
    x = _time_axis(edges, data.buckets.label)
    groups, top = _stack(data.requests, edges)
    requests = Panel(
        x,
        linear_axis(top, f"requests {data.per}"),
        list(groups),
        f"{title} ({series.bucket_text(data.buckets.width_s)} buckets)",
        Legend(tuple(Key(b.name, b.color) for b in data.requests)),
        hide_x_labels=True,
    )
    wire = Panel(
        x,
        linear_axis(np.concatenate([b.values for b in data.bytes]), f"{data.byte_unit} {data.per}"),
        [Group(b.name, (StepLine(edges, b.values, b.color),)) for b in data.bytes],
        legend=Legend(tuple(Key(b.name, b.color, "line") for b in data.bytes)),
    )
    return figure([[requests], [wire]], [330, 280], label=title, width=WIDTH)


def error_breakdown(df: pd.DataFrame) -> str:
    title = "Status and errors"
    data = series.error_bars(df)
    if data is None:
        return figure([[_message("No rows")[0]]], [300], label=title)
    counts = np.array([b.value for b in data.statuses])
    names = [b.name for b in data.statuses]
    slots = max(len(names), 4)
    statuses = Panel(
        linear_axis(counts, "rows", integer=True, pad=0.15),
        _bars_axis(names, slots),
        [
            Group(
                "statuses",
                (
                    HBars(
                        np.arange(len(names), dtype=float),
                        np.zeros(len(names)),
                        counts,
                        [b.color for b in data.statuses],
                        [f"{int(c):,}" for c in counts],
                    ),
                ),
            )
        ],
        "Rows by status",
    )
    if not data.errors:
        right = Panel(message="No Kafka errors in this capture", message_color="#2ca02c")
        return figure([[statuses, right]], [SHORT], label=title, width=WIDTH, ratios=[1, 1.5])
    positions = np.arange(len(data.errors), dtype=float)
    left = np.zeros(len(data.errors))
    marks: list = []
    for band in data.by_api:
        marks.append(Group(band.name, (HBars(positions, left.copy(), band.values, band.color),)))
        left = left + band.values
    marks.append(HBars(positions, left, np.zeros(len(left)), "none",
                       [f"{int(t):,}" for t in left]))  # fmt: skip
    errors = Panel(
        linear_axis(left, "rows", integer=True, pad=0.15),
        _bars_axis(list(data.errors), max(len(data.errors), 4)),
        marks,
        "Top errors, by API",
        Legend(tuple(Key(b.name, b.color) for b in data.by_api)),
    )
    height = max(SHORT, 90 + 22 * max(len(data.errors), len(names)))
    return figure([[statuses, errors]], [height], label=title, width=WIDTH, ratios=[1, 1.5])


def _bars_axis(names: list[str], slots: int) -> Axis:
    """Category labels top-down; at least ``slots`` rows, so that a few bars are never
    fatter than a quarter of the axis."""
    return Axis(-0.5, slots - 0.5, categories=tuple(names), inverted=True)


def error_timeline(df: pd.DataFrame) -> str:
    title = "Errors over time by error code"
    data = series.error_timeline(df)
    if data is None:
        return figure([[_message("No errors in this capture")[0]]], [300], label=title)
    edges = data.buckets.edges
    groups, top = _stack(data.bands, edges)
    panel = Panel(
        _time_axis(edges, data.buckets.label),
        linear_axis(top, f"error rows {data.per}", integer=True),
        list(groups),
        title,
        Legend(tuple(Key(f"{b.name} ({int(b.values.sum())})", b.color) for b in data.bands)),
    )
    return figure([[panel]], [SHORT], label=title, width=WIDTH)


def throttle_over_time(df: pd.DataFrame) -> str:
    title = "Broker throttling (quotas) over time"
    data = series.throttle(df)
    if data is None:
        return figure([[_message("No timed rows")[0]]], [300], label=title)
    edges = data.buckets.edges
    per = f"per {series.bucket_text(data.buckets.width_s)} bucket"
    count = int(data.throttled.sum())
    left = Axis(0.0, max(1.0, float(data.throttled.max()) * 1.15),
                f"throttled responses {per}", integer=True)  # fmt: skip
    right = Axis(0.0, max(1.0, float(data.max_ms.max()) * 1.15), "longest throttle (ms)",
                 grid=False)  # fmt: skip
    zero = np.zeros(len(data.throttled))
    panel = Panel(
        _time_axis(edges, data.buckets.label),
        left,
        [Group("throttled responses", (Band(edges, data.throttled, zero, "#d62728", 0.6),))],
        title if count else title + ": no response was throttled",
        Legend(
            (
                Key(f"throttled responses ({count})", "#d62728"),
                Key("longest throttle_ms", "#1d2330", "line"),
            )
        ),
        y2=right,
        marks2=[Group("longest throttle_ms", (StepLine(edges, data.max_ms, "#1d2330", 1.3),))],
    )
    return figure([[panel]], [360], label=title, width=WIDTH)


def connection_churn(df: pd.DataFrame) -> str:
    title = "Connection churn: opened above the line, closed below"
    data = series.connection_churn(df)
    if data is None:
        return figure([[_message("No timed rows")[0]]], [300], label=title)
    edges = data.buckets.edges
    zero = np.zeros(len(data.opened))
    opened = f"first message ({int(data.opened.sum())})"
    closed = f"last message ({int(data.closed.sum())})"
    y = linear_axis(
        np.concatenate([data.opened, -data.closed, data.active]),
        f"connections per {series.bucket_text(data.buckets.width_s)} bucket",
        integer=True,
        format=lambda v: f"{abs(v):,.0f}",
    )
    panel = Panel(
        _time_axis(edges, data.buckets.label),
        y,
        [
            Group(opened, (Band(edges, data.opened, zero, "#2ca02c", 0.55),)),
            Group(closed, (Band(edges, -data.closed, zero, "#d62728", 0.55),)),
            Rule(0.0, color="#888888", dash="none"),
            Group("active connections", (StepLine(edges, data.active, "#1d2330", 1.4),)),
        ],
        title,
        Legend(
            (
                Key(opened, "#2ca02c"),
                Key(closed, "#d62728"),
                Key("active connections", "#1d2330", "line"),
            )
        ),
    )
    return figure([[panel]], [360], label=title, width=WIDTH)


def size_distributions(df: pd.DataFrame) -> str:
    title = "Request and response sizes"
    histograms = series.size_histograms(df)
    counts = [h.counts for h in histograms if isinstance(h, series.Histogram)]
    y = linear_axis(np.concatenate(counts) if counts else [1.0], "rows", integer=True)
    panels = []
    for i, h in enumerate(histograms):
        if not isinstance(h, series.Histogram):
            panels.append(Panel(message=h))
            continue
        zero = np.zeros(len(h.counts))
        panels.append(
            Panel(
                log_axis(h.edges, "bytes on the wire (log scale)", pad=0.0),
                y if i == 0 else Axis(y.lo, y.hi, "", integer=True),
                [Group(h.title, (Band(h.edges, h.counts.astype(float), zero, h.color, 0.85),))],
                f"{h.title}\nmedian {h.median:,.0f} B, max {h.largest:,.0f} B",
            )
        )
    return figure([panels], [360], label=title, width=WIDTH)


def group_activity(df: pd.DataFrame) -> str:
    title = "Group coordination activity"
    data = series.group_activity(df)
    if data is None:
        return figure([[_message("No consumer-group or share-group traffic")[0]]], [300],
                      label=title)  # fmt: skip
    stacked = data.stacked
    edges = stacked.buckets.edges
    groups, top = _stack(stacked.bands, edges)
    marks: list = list(groups)
    keys = [Key(b.name, b.color) for b in stacked.bands]
    hits = data.rebalance > 0
    if hits.any():
        mids = stacked.buckets.mids
        marks.append(Group(stats.REBALANCE_LABEL,
                           (Triangles(mids[hits], top[hits], "#d62728"),)))  # fmt: skip
        keys.append(Key(stats.REBALANCE_LABEL, "#d62728", "triangle"))
    panel = Panel(
        _time_axis(edges, stacked.buckets.label),
        linear_axis(top, f"calls {stacked.per}", pad=0.12),
        marks,
        f"{title} ({series.bucket_text(stacked.buckets.width_s)} buckets)",
        Legend(tuple(keys)),
    )
    return figure([[panel]], [SHORT], label=title, width=WIDTH)


_DRAW: Mapping[str, Callable[[pd.DataFrame], str]] = {
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
CHARTS: Mapping[str, tuple[str, Callable[[pd.DataFrame], str]]] = {
    chart: (title, _DRAW[chart]) for chart, title in series.CHART_TITLES.items()
}
"""Every chart by a stable id (the report's figure ids), with its title
(``series.CHART_TITLES``: the same ids and titles as ``plots.CHARTS``)."""
