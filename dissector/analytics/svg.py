"""A small SVG renderer for the report's charts: panels with linear, log or category
axes, a legend at their right, and a few marks (filled step bands, step and poly
lines, dots, bars, heat-map cells).

Why not matplotlib: importing it and drawing the report's eleven charts took about
2 s of CPU on a 30 s long-poll capture, several times the whole analysis; the charts
are a few hundred numbers each, which SVG draws as they are, text included (it scales,
stays selectable and is searchable in the page). No other plotting library in reach
renders static SVG without a browser-side script or its own heavy import.

Coordinates are formatted with one decimal; marks with many points (a CDF, a scatter
of every pair) are thinned to what differs at that resolution (half a pixel), which
draws the same picture. The output holds no ``url(...)`` references and no element
ids: a page may inline many charts.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', Arial, sans-serif"
FONT_PX = 11.0
TITLE_PX = 13.0
CHAR_EM = 0.6
"""Text widths are estimated (no font metrics): this many font sizes per character,
a little wider than a sans-serif's average so that estimates err on the roomy side."""
TEXT = "#1d2330"
MUTED = "#555555"
GRID = "#e3e6eb"
AXIS = "#888888"
LEGEND_ROW = 16.0
SWATCH = 14.0
YLORRD: tuple[str, ...] = (
    "#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8c3c", "#fc4d2a", "#e2191c", "#bb0026",
    "#800026",
)  # fmt: skip
"""ColorBrewer's YlOrRd (matplotlib's map of that name, its nine anchors)."""


def text_width(text: str, size: float = FONT_PX) -> float:
    return len(text) * size * CHAR_EM


def esc(text: str) -> str:
    """``text`` for SVG: control characters written ``\\xNN`` (XML forbids most of them),
    markup characters escaped."""
    from dissector.table.text_rows import visible_text

    return html.escape(visible_text(str(text)), quote=True)


def plain_number(value: float, _pos: object = None) -> str:
    """A tick label without powers of ten: 0.01, 2.5, 27.4, 1,000 (``_pos``: what a
    matplotlib tick formatter is also given; ``analytics.plots`` labels with this too)."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else ""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.3g}"
    return f"{float(text):,.0f}" if "e" in text else text


COORD_LIMIT = 1e12
"""Coordinates below this (in size) are written by whole tenths (``_coords``)."""

ARROW_COORDS = 512
"""From this many coordinates on, ``_coords`` writes them with Arrow (below it, its
fixed cost is more than Python's format per value)."""


def _coords(values: np.ndarray) -> list[str]:
    """Each value rounded to one decimal (numpy's rounding) and written as
    ``f"{v:.1f}"`` writes it. A chart has tens of thousands of coordinates: written from
    whole tenths by Arrow, not by a Python format per value, unless some value is not
    finite or is too large for a tenth's count to be exact (then formatted one by one),
    or there are few of them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rounded = np.round(np.asarray(values, dtype=np.float64), 1)
    if len(rounded) < ARROW_COORDS or not (np.abs(rounded) < COORD_LIMIT).all():  # NaN too
        return [f"{v:.1f}" for v in rounded.tolist()]
    tenths = np.abs(np.rint(rounded * 10)).astype(np.int64)
    text = pc.binary_join_element_wise(
        pc.cast(pa.array(tenths // 10), pa.string()),
        pc.cast(pa.array(tenths % 10), pa.string()),
        ".",
    )
    # the sign as Python writes it: -0.0 too (a small negative value rounded to zero)
    negative = np.signbit(rounded)
    if negative.any():
        text = pc.if_else(pa.array(negative), pc.binary_join_element_wise("-", text, ""), text)
    return text.to_pylist()


# ---------------------------------------------------------------------------
# Axes and ticks
# ---------------------------------------------------------------------------


def nice_step(span: float, count: int, integer: bool = False) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) giving at most
    ``count`` intervals over ``span``."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(span / count))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * magnitude
        if span / step <= count and not (integer and step < 1):
            return step
    return 10.0 * magnitude


def linear_ticks(lo: float, hi: float, count: int = 6, integer: bool = False) -> list[float]:
    step = max(nice_step(hi - lo, count, integer), 1.0 if integer else 0.0) or 1.0
    first = math.ceil(lo / step - 1e-9) * step
    n = math.floor((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 12) for i in range(max(n, 0))]


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[float]]:
    """(labelled, unlabelled) ticks of a log axis: over less than a decade, a few evenly
    spaced labelled ones; else the powers of ten (with 2 and 5 times them labelled
    too when fewer than three powers fit), the other 2s and 5s unlabelled."""
    if hi / lo < 10:
        return [t for t in linear_ticks(lo, hi, 4) if t > 0], []
    powers = [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    minor = [m * p for p in powers for m in (2.0, 5.0) if lo <= m * p <= hi]
    major = [p for p in powers if lo <= p <= hi]
    if len(major) < 3:
        return sorted(major + minor), []
    return major, minor


@dataclass(frozen=True, slots=True)
class Axis:
    lo: float
    hi: float
    label: str = ""
    log: bool = False
    integer: bool = False
    categories: tuple[str, ...] = ()
    """A category axis: value i is ``categories[i]`` (lo/hi: -0.5, n - 0.5)."""
    inverted: bool = False
    """Categories top-down on a y axis."""
    format: Callable[[float], str] = plain_number
    grid: bool = True

    def scale(self, a: float, b: float) -> Callable[[np.ndarray], np.ndarray]:
        """Values to pixels: ``lo`` at ``a``, ``hi`` at ``b``."""
        lo, hi = (math.log10(self.lo), math.log10(self.hi)) if self.log else (self.lo, self.hi)
        if self.inverted:
            lo, hi = hi, lo
        span = (hi - lo) or 1.0

        def to_px(values: np.ndarray) -> np.ndarray:
            v = np.asarray(values, dtype=float)
            if self.log:
                with np.errstate(divide="ignore", invalid="ignore"):
                    v = np.log10(np.clip(v, self.lo * 1e-3, None))
            return a + (v - lo) / span * (b - a)

        return to_px

    def ticks(self) -> tuple[list[tuple[float, str]], list[float]]:
        """(labelled ticks with their text, unlabelled ticks)."""
        if self.categories:
            return [(float(i), c) for i, c in enumerate(self.categories)], []
        if self.log:
            major, minor = log_ticks(self.lo, self.hi)
        else:
            major, minor = linear_ticks(self.lo, self.hi, integer=self.integer), []
        return [(t, self.format(t)) for t in major], minor


def linear_axis(
    values: Sequence[float] | np.ndarray,
    label: str,
    *,
    zero: bool = True,
    integer: bool = False,
    pad: float = 0.05,
    format: Callable[[float], str] = plain_number,
) -> Axis:
    """An axis holding ``values`` (and 0 when ``zero``), a little room above."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    lo = float(v.min()) if len(v) else 0.0
    hi = float(v.max()) if len(v) else 1.0
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi <= lo:
        hi = lo + 1.0
    span = hi - lo
    lo = lo - (span * pad if lo < 0 else 0.0)
    return Axis(lo, hi + span * pad, label, integer=integer, format=format)


def log_axis(values: Sequence[float] | np.ndarray, label: str, pad: float = 0.05) -> Axis:
    """A log axis holding the positive ``values``, ``pad`` of its decades around them."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    lo, hi = (float(v.min()), float(v.max())) if len(v) else (1.0, 10.0)
    if hi <= lo:
        lo, hi = lo / 1.1, hi * 1.1
    margin = (math.log10(hi) - math.log10(lo)) * pad
    return Axis(lo / 10**margin, hi * 10**margin, label, log=True)


def category_axis(names: Sequence[str], label: str = "", inverted: bool = False) -> Axis:
    return Axis(-0.5, len(names) - 0.5, label, categories=tuple(names), inverted=inverted)


# ---------------------------------------------------------------------------
# Marks
# ---------------------------------------------------------------------------

Scale = Callable[[np.ndarray], np.ndarray]


class Mark(Protocol):
    def svg(self, sx: Scale, sy: Scale) -> str: ...


@dataclass(frozen=True, slots=True)
class Group:
    """Marks of one named series: ``<g class="series" data-name=...>`` (what a reader's
    tools and the tests find a series by)."""

    name: str
    marks: tuple[Mark, ...]

    def svg(self, sx: Scale, sy: Scale) -> str:
        inner = "".join(m.svg(sx, sy) for m in self.marks)
        return f'<g class="series" data-name="{esc(self.name)}">{inner}</g>'


@dataclass(frozen=True, slots=True)
class Band:
    """A filled step band over buckets: ``base`` to ``top`` (per bucket), ``edges``
    the n + 1 bucket edges."""

    edges: np.ndarray
    top: np.ndarray
    base: np.ndarray
    color: str
    opacity: float = 1.0

    def svg(self, sx: Scale, sy: Scale) -> str:
        x = sx(np.repeat(self.edges, 2)[1:-1])
        top, base = sy(np.repeat(self.top, 2)), sy(np.repeat(self.base, 2))
        xs = _coords(np.concatenate([x, x[::-1]]))
        ys = _coords(np.concatenate([top, base[::-1]]))
        points = " ".join(f"{a},{b}" for a, b in zip(xs, ys, strict=True))
        return f'<polygon points="{points}" fill="{self.color}" fill-opacity="{self.opacity}"/>'


@dataclass(frozen=True, slots=True)
class StepLine:
    """A step outline over buckets (``values`` per bucket, ``edges`` n + 1)."""

    edges: np.ndarray
    values: np.ndarray
    color: str
    width: float = 1.6

    def svg(self, sx: Scale, sy: Scale) -> str:
        x = sx(np.repeat(self.edges, 2)[1:-1])
        y = sy(np.repeat(self.values, 2))
        return _polyline(x, y, self.color, self.width, "")


@dataclass(frozen=True, slots=True)
class Cumulative:
    """An empirical CDF: ``values`` sorted, rising 1/n at each, drawn as steps; points
    within half a pixel of each other are one step (the same picture, fewer points)."""

    values: np.ndarray
    color: str
    width: float = 1.6

    def svg(self, sx: Scale, sy: Scale) -> str:
        n = len(self.values)
        x = sx(self.values)
        y = sy(np.arange(1, n + 1) / n)
        # keep the last point of each half-pixel column: its step reaches the column's top
        column = np.round(x * 2)
        last = np.append(column[1:] != column[:-1], True)
        x, y = x[last], y[last]
        below = np.concatenate([[sy(np.zeros(1))[0]], y[:-1]])
        xs = np.repeat(x, 2)
        ys = np.column_stack([below, y]).ravel()
        return _polyline(xs, ys, self.color, self.width, "")


def _polyline(x: np.ndarray, y: np.ndarray, color: str, width: float, dash: str) -> str:
    """Lines through the finite points; a NaN breaks the line."""
    finite = np.isfinite(x) & np.isfinite(y)
    xs, ys = _coords(np.where(finite, x, 0)), _coords(np.where(finite, y, 0))
    parts: list[str] = []
    pen = False
    for ok, a, b in zip(finite.tolist(), xs, ys, strict=True):
        if ok:
            parts.append(f"{'L' if pen else 'M'}{a} {b}")
        pen = ok
    if not parts:
        return ""
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<path d="{"".join(parts)}" fill="none" stroke="{color}" stroke-width="{width}"'
        f' stroke-linejoin="round"{dashed}/>'
    )


@dataclass(frozen=True, slots=True)
class Line:
    """A line through (x, y), NaN breaking it; ``dots``: a dot of that radius at each."""

    x: np.ndarray
    y: np.ndarray
    color: str
    width: float = 1.4
    dash: str = ""
    dots: float = 0.0

    def svg(self, sx: Scale, sy: Scale) -> str:
        x, y = sx(self.x), sy(self.y)
        out = _polyline(x, y, self.color, self.width, self.dash)
        if self.dots:
            out += Dots(self.x, self.y, self.color, self.dots).svg(sx, sy)
        return out


@dataclass(frozen=True, slots=True)
class Dots:
    """A dot at each (x, y): filled, or a ring (``hollow``); dots on the same half
    pixel are drawn once (identical on screen, and a capture has tens of thousands)."""

    x: np.ndarray
    y: np.ndarray
    color: str
    radius: float = 2.0
    hollow: bool = False
    opacity: float = 1.0
    stroke: float = 1.0

    def svg(self, sx: Scale, sy: Scale) -> str:
        x, y = sx(self.x), sy(self.y)
        finite = np.isfinite(x) & np.isfinite(y)
        if not finite.any():
            return ""
        # half pixels as one integer per dot (x major), its distinct values sorted
        hx = np.round(x[finite] * 2).astype(np.int64)
        hy = np.round(y[finite] * 2).astype(np.int64)
        x0, y0 = hx.min(), hy.min()
        rows = int(hy.max() - y0) + 1
        keys = np.unique((hx - x0) * rows + (hy - y0))
        xs, ys = _coords((keys // rows + x0) / 2), _coords((keys % rows + y0) / 2)
        r = self.radius
        if self.hollow:
            arc = f"a{r} {r} 0 1 0 {2 * r} 0a{r} {r} 0 1 0 {-2 * r} 0"
            d = "".join(f"M{float(a) - r:.1f} {b}{arc}" for a, b in zip(xs, ys, strict=True))
            paint = f'fill="none" stroke="{self.color}" stroke-width="{self.stroke}"'
        else:
            # a zero-length segment with a round cap is a dot of the line's width
            d = "".join(f"M{a} {b}h0" for a, b in zip(xs, ys, strict=True))
            paint = (
                f'fill="none" stroke="{self.color}" stroke-width="{2 * r}" stroke-linecap="round"'
            )
        return f'<path d="{d}" {paint} stroke-opacity="{self.opacity}"/>'


@dataclass(frozen=True, slots=True)
class Triangles:
    """Downward triangles centred on (x, y)."""

    x: np.ndarray
    y: np.ndarray
    color: str
    size: float = 5.0

    def svg(self, sx: Scale, sy: Scale) -> str:
        s = self.size
        d = "".join(
            f"M{a - s:.1f} {b - s:.1f}h{2 * s}l{-s} {2 * s}z"
            for a, b in zip(sx(self.x).tolist(), sy(self.y).tolist(), strict=True)
        )
        return f'<path d="{d}" fill="{self.color}"/>' if d else ""


@dataclass(frozen=True, slots=True)
class HBars:
    """Horizontal bars at category positions, from ``left`` to ``left + widths``;
    ``labels``: the text after each bar's end."""

    positions: np.ndarray
    left: np.ndarray
    widths: np.ndarray
    color: str | Sequence[str]
    labels: Sequence[str] = ()
    thickness: float = 0.6

    def svg(self, sx: Scale, sy: Scale) -> str:
        x0, x1 = sx(self.left), sx(self.left + self.widths)
        top = sy(self.positions - self.thickness / 2)
        bottom = sy(self.positions + self.thickness / 2)
        colors = [self.color] * len(x0) if isinstance(self.color, str) else list(self.color)
        parts = []
        for a, b, t, u, c in zip(x0, x1, top, bottom, colors, strict=True):
            y, h = min(t, u), abs(u - t)
            if b > a:
                parts.append(
                    f'<rect x="{a:.1f}" y="{y:.1f}" width="{b - a:.1f}" height="{h:.1f}" '
                    f'fill="{c}"/>'
                )
        for label, b, t, u in zip(self.labels, x1, top, bottom, strict=False):
            parts.append(_text(b + 3, (t + u) / 2, label, anchor="start", size=10, middle=True))
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class Rule:
    """A horizontal line across the plot at ``y``, its label at the right end."""

    y: float
    label: str = ""
    color: str = AXIS
    dash: str = "2 3"

    def svg(self, sx: Scale, sy: Scale) -> str:
        raise NotImplementedError  # drawn by the panel, which knows the plot's edges


@dataclass(frozen=True, slots=True)
class Cells:
    """A heat map: ``values`` (rows x columns, NaN blank) coloured on a log scale from
    ``lo`` to ``hi`` (YlOrRd), each cell showing its value."""

    values: np.ndarray
    lo: float
    hi: float

    def svg(self, sx: Scale, sy: Scale) -> str:
        parts = []
        for (i, j), v in np.ndenumerate(self.values):
            if not math.isfinite(v):
                continue
            x0, x1 = sx(np.array([j - 0.5, j + 0.5]))
            y0, y1 = sy(np.array([i - 0.5, i + 0.5]))
            share = log_share(v, self.lo, self.hi)
            parts.append(
                f'<rect x="{min(x0, x1):.1f}" y="{min(y0, y1):.1f}" width="{abs(x1 - x0):.1f}" '
                f'height="{abs(y1 - y0):.1f}" fill="{ramp(share)}"/>'
            )
            parts.append(
                _text((x0 + x1) / 2, (y0 + y1) / 2, plain_number(v), size=10, middle=True,
                      color="#ffffff" if share > 0.6 else TEXT)
            )  # fmt: skip
        return "".join(parts)


def log_share(value: float, lo: float, hi: float) -> float:
    """Where ``value`` lies between ``lo`` and ``hi`` on a log scale, 0 to 1."""
    if hi <= lo:
        return 0.0
    v = min(max(value, lo), hi)
    return math.log(v / lo) / math.log(hi / lo)


def ramp(share: float) -> str:
    """The YlOrRd colour at ``share`` (0 to 1), interpolated between its anchors."""
    pos = min(max(share, 0.0), 1.0) * (len(YLORRD) - 1)
    i = min(int(pos), len(YLORRD) - 2)
    f = pos - i
    a, b = YLORRD[i], YLORRD[i + 1]
    rgb = [round(int(a[k : k + 2], 16) * (1 - f) + int(b[k : k + 2], 16) * f) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _text(
    x: float,
    y: float,
    text: str,
    *,
    anchor: str = "middle",
    size: float = FONT_PX,
    color: str = TEXT,
    middle: bool = False,
    weight: str = "",
    rotate: float = 0.0,
) -> str:
    attrs = f'x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" fill="{color}"'
    if anchor != "start":
        attrs += f' text-anchor="{anchor}"'
    if middle:
        attrs += ' dominant-baseline="central"'
    if weight:
        attrs += f' font-weight="{weight}"'
    if rotate:
        attrs += f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"'
    return f"<text {attrs}>{esc(text)}</text>"


# ---------------------------------------------------------------------------
# Legends and panels
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Key:
    """A legend entry: ``kind`` fill, line, dotted, dot, ring or triangle."""

    label: str
    color: str
    kind: str = "fill"


def _swatch(x: float, y: float, key: Key) -> str:
    c = key.color
    if key.kind == "fill":
        return f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="{SWATCH}" height="10" fill="{c}"/>'
    if key.kind in ("line", "dotted"):
        dash = ' stroke-dasharray="2 2"' if key.kind == "dotted" else ""
        return f'<path d="M{x:.1f} {y:.1f}h{SWATCH}" stroke="{c}" stroke-width="2"{dash}/>'
    if key.kind == "triangle":
        return f'<path d="M{x + 2:.1f} {y - 5:.1f}h10l-5 10z" fill="{c}"/>'
    r = 3.5
    paint = f'fill="none" stroke="{c}" stroke-width="1.2"' if key.kind == "ring" else f'fill="{c}"'
    return f'<circle cx="{x + SWATCH / 2:.1f}" cy="{y:.1f}" r="{r}" {paint}/>'


@dataclass(frozen=True, slots=True)
class Legend:
    keys: tuple[Key, ...]
    title: str = ""

    def width(self) -> float:
        words = [k.label for k in self.keys] + [self.title]
        return SWATCH + 6 + max(text_width(w, FONT_PX - 1) for w in words) + 8

    def height(self) -> float:
        return LEGEND_ROW * (len(self.keys) + (1 if self.title else 0))

    def svg(self, x: float, y: float) -> str:
        parts = ['<g class="legend">']
        if self.title:
            parts.append(_text(x, y + 6, self.title, anchor="start", size=FONT_PX - 1,
                               weight="600", middle=True))  # fmt: skip
            y += LEGEND_ROW
        for key in self.keys:
            parts.append(_swatch(x, y + 6, key))
            parts.append(_text(x + SWATCH + 5, y + 6, key.label, anchor="start",
                               size=FONT_PX - 1, middle=True))  # fmt: skip
            y += LEGEND_ROW
        parts.append("</g>")
        return "".join(parts)


@dataclass(frozen=True, slots=True)
class ColorBar:
    lo: float
    hi: float
    label: str

    WIDTH = 14.0

    def width(self) -> float:
        ticks = log_ticks(self.lo, self.hi)[0] if self.hi > self.lo else [self.lo]
        return 10 + self.WIDTH + 6 + max(text_width(plain_number(t)) for t in ticks) + 22


@dataclass
class Panel:
    """One plot: axes, marks, a title, a legend at its right; or only a ``message``
    (nothing to draw)."""

    x: Axis | None = None
    y: Axis | None = None
    marks: list[Mark | Rule] = field(default_factory=list)
    title: str = ""
    legend: Legend | None = None
    y2: Axis | None = None
    marks2: list[Mark] = field(default_factory=list)
    colorbar: ColorBar | None = None
    message: str = ""
    message_color: str = MUTED
    rotate_x: bool = False
    hide_x_labels: bool = False
    """Tick labels of a panel sharing its x axis with the one below."""

    def _y_ticks_width(self, axis: Axis | None) -> float:
        if axis is None:
            return 0.0
        labelled, _ = axis.ticks()
        return max((text_width(t) for _, t in labelled), default=0.0)

    def margins(self) -> tuple[float, float, float, float]:
        """(left, right, top, bottom) around the plot area."""
        if self.x is None or self.y is None:
            return 10.0, 10.0, 10.0, 10.0
        left = 10 + (18 if self.y.label else 0) + self._y_ticks_width(self.y) + 6
        right = 12.0
        if self.y2 is not None:
            right += 6 + self._y_ticks_width(self.y2) + (18 if self.y2.label else 0)
        if self.colorbar is not None:
            right += self.colorbar.width()
        if self.legend is not None:
            right += 10 + self.legend.width()
        top = 8 + (TITLE_PX * 1.4) * len(self.title.splitlines()) + (4 if self.title else 0)
        bottom = 10.0
        if not self.hide_x_labels:
            bottom += 16
            if self.rotate_x:
                labelled, _ = self.x.ticks()
                bottom += 0.35 * max((text_width(t) for _, t in labelled), default=0.0)
            bottom += 18 if self.x.label else 0
        return left, right, top, bottom

    def min_height(self) -> float:
        _, _, top, bottom = self.margins()
        legend = self.legend.height() if self.legend else 0.0
        return top + bottom + max(legend, 60.0)

    def svg(self, box: tuple[float, float, float, float], margins: tuple[float, ...]) -> str:
        x0, y0, w, h = box
        if self.x is None or self.y is None:
            return '<g class="panel">' + _text(x0 + w / 2, y0 + h / 2, self.message,
                                               size=13, color=self.message_color,
                                               middle=True) + "</g>"  # fmt: skip
        left, right, top, bottom = margins
        px0, px1 = x0 + left, x0 + w - right
        py0, py1 = y0 + top, y0 + h - bottom
        sx = self.x.scale(px0, px1)
        sy = self.y.scale(py1, py0)
        parts = ['<g class="panel">']
        if self.title:
            for i, line in enumerate(self.title.splitlines()):
                parts.append(_text((px0 + px1) / 2, y0 + 8 + TITLE_PX * (1 + 1.4 * i), line,
                                   size=TITLE_PX, weight="700"))  # fmt: skip
        parts.append(self._axis_x(sx, px0, px1, py0, py1))
        parts.append(self._axis_y(self.y, sy, px0, px1, py0, py1, right_side=False))
        for mark in self.marks:
            if isinstance(mark, Rule):
                y = float(sy(np.array([mark.y]))[0])
                parts.append(
                    f'<path d="M{px0:.1f} {y:.1f}H{px1:.1f}" stroke="{mark.color}" '
                    f'stroke-width="0.8" stroke-dasharray="{mark.dash}"/>'
                )
                if mark.label:
                    parts.append(_text(px1 + 3, y, mark.label, anchor="start", size=9,
                                       color=MUTED, middle=True))  # fmt: skip
            else:
                parts.append(mark.svg(sx, sy))
        edge = px1
        if self.y2 is not None:
            sy2 = self.y2.scale(py1, py0)
            for mark in self.marks2:
                parts.append(mark.svg(sx, sy2))
            parts.append(self._axis_y(self.y2, sy2, px0, px1, py0, py1, right_side=True))
            edge += 6 + self._y_ticks_width(self.y2) + (18 if self.y2.label else 0)
        if self.colorbar is not None:
            parts.append(self._colorbar(edge + 10, py0, py1))
            edge += self.colorbar.width()
        if self.legend is not None:
            parts.append(self.legend.svg(edge + 10 + (18 if any(
                isinstance(m, Rule) and m.label for m in self.marks) else 0), py0))  # fmt: skip
        parts.append("</g>")
        return "".join(parts)

    def _axis_x(self, sx: Scale, px0: float, px1: float, py0: float, py1: float) -> str:
        assert self.x is not None
        labelled, minor = self.x.ticks()
        parts = []
        values = np.array([v for v, _ in labelled] + minor, dtype=float)
        xs = sx(values)
        for i, x in enumerate(xs.tolist()):
            if not px0 - 0.5 <= x <= px1 + 0.5:
                continue
            if self.x.grid and not self.x.categories and i < len(labelled):
                parts.append(f'<path d="M{x:.1f} {py0:.1f}V{py1:.1f}" stroke="{GRID}"/>')
            length = 4 if i < len(labelled) else 2
            parts.append(f'<path d="M{x:.1f} {py1:.1f}v{length}" stroke="{AXIS}"/>')
            if i < len(labelled) and not self.hide_x_labels:
                text = labelled[i][1]
                if self.rotate_x:
                    parts.append(_text(x, py1 + 14, text, anchor="end", rotate=-20))
                else:
                    parts.append(_text(x, py1 + 16, text))
        parts.append(f'<path d="M{px0:.1f} {py1:.1f}H{px1:.1f}" stroke="{AXIS}"/>')
        if self.x.label and not self.hide_x_labels:
            _, _, _, bottom = self.margins()
            parts.append(_text((px0 + px1) / 2, py1 + bottom - 10, self.x.label))
        return '<g class="x-axis">' + "".join(parts) + "</g>"

    def _axis_y(
        self,
        axis: Axis,
        sy: Scale,
        px0: float,
        px1: float,
        py0: float,
        py1: float,
        *,
        right_side: bool,
    ) -> str:
        labelled, minor = axis.ticks()
        parts = []
        values = np.array([v for v, _ in labelled] + minor, dtype=float)
        edge = px1 if right_side else px0
        sign = 1 if right_side else -1
        for i, y in enumerate(sy(values).tolist()):
            if not min(py0, py1) - 0.5 <= y <= max(py0, py1) + 0.5:
                continue
            major = i < len(labelled)
            if axis.grid and not axis.categories and major and not right_side:
                parts.append(f'<path d="M{px0:.1f} {y:.1f}H{px1:.1f}" stroke="{GRID}"/>')
            parts.append(
                f'<path d="M{edge:.1f} {y:.1f}h{sign * (4 if major else 2)}" stroke="{AXIS}"/>'
            )
            if major:
                anchor = "start" if right_side else "end"
                parts.append(_text(edge + sign * 6, y, labelled[i][1], anchor=anchor, middle=True))
        parts.append(f'<path d="M{edge:.1f} {py0:.1f}V{py1:.1f}" stroke="{AXIS}"/>')
        if axis.label:
            width = self._y_ticks_width(axis)
            x = edge + sign * (6 + width + 10)
            parts.append(_text(x, (py0 + py1) / 2, axis.label, rotate=90 if right_side else -90,
                               middle=True))  # fmt: skip
        return '<g class="y-axis">' + "".join(parts) + "</g>"

    def _colorbar(self, x: float, py0: float, py1: float) -> str:
        bar = self.colorbar
        assert bar is not None
        steps = 48
        h = (py1 - py0) / steps
        parts = ['<g class="colorbar">']
        for i in range(steps):
            share = (i + 0.5) / steps
            y = py1 - (i + 1) * h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{ColorBar.WIDTH}" height="{h + 0.3:.1f}" '
                f'fill="{ramp(share)}"/>'
            )
        axis = Axis(bar.lo, bar.hi, log=True) if bar.hi > bar.lo else Axis(bar.lo / 2, bar.lo * 2)
        sy = axis.scale(py1, py0)
        labelled, _ = axis.ticks()
        right = x + ColorBar.WIDTH
        for value, text in labelled:
            y = float(sy(np.array([value]))[0])
            if py0 - 0.5 <= y <= py1 + 0.5:
                parts.append(f'<path d="M{right:.1f} {y:.1f}h3" stroke="{AXIS}"/>')
                parts.append(_text(right + 5, y, text, anchor="start", middle=True))
        width = max((text_width(t) for _, t in labelled), default=0.0)
        parts.append(_text(right + 5 + width + 12, (py0 + py1) / 2, bar.label, rotate=90,
                           middle=True))  # fmt: skip
        parts.append("</g>")
        return "".join(parts)


def figure(
    rows: Sequence[Sequence[Panel]],
    heights: Sequence[float],
    *,
    label: str,
    width: float = 1000.0,
    ratios: Sequence[float] | None = None,
) -> str:
    """Panels in rows (each row's panels side by side, widths by ``ratios``), as one
    SVG document. Panels of one column share their left and right margins, so that
    stacked panels' plot areas line up (a shared time axis)."""
    columns = max(len(r) for r in rows)
    ratios = list(ratios or [1.0] * columns)
    total = sum(ratios)
    col_widths = [width * r / total for r in ratios]
    margins = [[p.margins() for p in row] for row in rows]
    left = [max(m[j][0] for m in margins if j < len(m)) for j in range(columns)]
    right = [max(m[j][1] for m in margins if j < len(m)) for j in range(columns)]
    row_heights = [
        max(h, *(p.min_height() for p in row)) for row, h in zip(rows, heights, strict=True)
    ]
    height = sum(row_heights)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width:.0f} '
        f'{height:.0f}" width="{width:.0f}" height="{height:.0f}" role="img" '
        f'aria-label="{esc(label)}" font-family="{FONT}" font-size="{FONT_PX:g}">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
    ]
    y = 0.0
    for row, row_margins, h in zip(rows, margins, row_heights, strict=True):
        x = 0.0
        for j, (panel, m) in enumerate(zip(row, row_margins, strict=True)):
            box = (x, y, col_widths[j], h)
            parts.append(panel.svg(box, (left[j], right[j], m[2], m[3])))
            x += col_widths[j]
        y += h
    parts.append("</svg>")
    return "".join(parts)
