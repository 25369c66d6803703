"""How the report writes values: one formatter per kind of cell (milliseconds,
counts, bytes, rates, times), the sort keys of numeric cells, and ``frame_table``,
which turns a frame into a ``TableBlock`` with given columns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dissector import schema
from dissector.analytics import stats
from dissector.analytics.report.model import FOLD_ITEMS, TABLE_ROW_LIMIT, Folded, Header, TableBlock

if TYPE_CHECKING:
    import pandas as pd


def listed(items: Sequence[str]) -> str | Folded:
    """``items`` comma-separated; past ``FOLD_ITEMS`` folded behind "and N more"."""
    full = ", ".join(items) or "–"
    if len(items) <= FOLD_ITEMS:
        return full
    shown = FOLD_ITEMS // 2
    return Folded(f"{', '.join(items[:shown])} and {len(items) - shown:,} more", full)


def is_missing(value: object) -> bool:
    import pandas as pd

    if isinstance(value, list | tuple):
        return False
    return value is None or bool(pd.isna(value))


def fmt_ms(value: object) -> str:
    if is_missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def fmt_int(value: object) -> str:
    return "–" if is_missing(value) else f"{int(value):,}"  # type: ignore[call-overload]


def fmt_bytes(value: object) -> str:
    if is_missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    for unit, size in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if abs(v) >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:,.0f} B"


def fmt_rate(value: object) -> str:
    if is_missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    if v == 0:
        return "0"
    if v < 0.01:
        return "<0.01"
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def fmt_pct(value: object) -> str:
    if is_missing(value):
        return "–"
    v = 100.0 * float(value)  # type: ignore[arg-type]
    return "0%" if v == 0 else f"{v:.1f}%" if v >= 0.1 else "<0.1%"


def fmt_time(value: object) -> str:
    if is_missing(value):
        return "–"
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"  # type: ignore[attr-defined]


def fmt_clock(value: object) -> str:
    """Time of day, for tables under a header that gives the date."""
    if is_missing(value):
        return "–"
    return value.strftime("%H:%M:%S.%f")[:-3]  # type: ignore[attr-defined]


def fmt_text(value: object) -> str:
    if is_missing(value):
        return "–"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "–"
    return str(value)


def fmt_error(value: object) -> str:
    return "–" if isinstance(value, str) and value == "NONE" else fmt_text(value)


def fmt_topics(value: object, shown: int = 3) -> str:
    if is_missing(value) or not isinstance(value, list | tuple):
        return fmt_text(value)
    head = ", ".join(str(v) for v in value[:shown])
    return f"{head} +{len(value) - shown} more" if len(value) > shown else head or "–"


def fmt_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3f} s"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days} d"] if days else []
    parts += [f"{hours} h"] if hours or days else []
    return " ".join([*parts, f"{minutes} min", f"{secs:.0f} s"])


def sort_key(value: object) -> str:
    """A numeric cell's value for the page's column sort: the number, unformatted
    (missing values sort last)."""
    if isinstance(value, list | tuple) or is_missing(value):
        return ""
    try:
        return repr(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


Column = tuple[str, str, Callable[[object], str], bool]
"""(source column, header label, formatter, numeric)."""


def frame_table(
    table_id: str,
    title: str,
    frame: pd.DataFrame,
    columns: Sequence[Column],
    *,
    empty: str = "Nothing to show.",
    note: str = "",
    limit: int = TABLE_ROW_LIMIT,
    css: str = "",
) -> TableBlock:
    records = _records(frame, [src for src, _, _, _ in columns], limit)
    rows = tuple(tuple(fmt(row[src]) for src, _, fmt, _ in columns) for row in records)
    keys = tuple(
        tuple(sort_key(row[src]) if numeric else "" for src, _, _, numeric in columns)
        for row in records
    )
    return TableBlock(
        id=table_id,
        title=title,
        headers=tuple(Header(label, numeric) for _, label, _, numeric in columns),
        rows=rows,
        keys=keys,
        empty=empty,
        note=note,
        more=max(0, len(frame) - limit),
        css=css,
    )


def _records(frame: pd.DataFrame, sources: Sequence[str], limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` rows of ``frame`` as dicts of the ``sources`` columns, each
    value as Python gives it (``to_dict(orient="records")``'s values: ``tolist`` of each
    column), without a dict of the other columns (a table of pairs has dozens more).
    Not iterrows: a row Series would turn an Arrow-backed list into a numpy array."""
    if frame.empty:  # (an empty table may have no columns at all)
        return []
    shown = list(dict.fromkeys(sources))
    head = frame.head(limit)
    cells = [head[c].tolist() for c in shown]
    return [dict(zip(shown, row, strict=True)) for row in zip(*cells, strict=True)]


def breakdown_metrics(df: pd.DataFrame) -> tuple[Column, ...]:
    """The breakdown columns, the rate in the report's one unit (``stats.rate_unit``)."""
    seconds, label = stats.rate_unit(df)
    rate: Column = ("rate_per_s", label, lambda v: fmt_rate(_scaled(v, seconds)), True)
    return (BREAKDOWN_METRICS[0], rate, *BREAKDOWN_METRICS[2:])


def _scaled(value: object, factor: float) -> object:
    return value if is_missing(value) else float(value) * factor  # type: ignore[arg-type]


BREAKDOWN_METRICS: tuple[Column, ...] = (
    ("count", "requests", fmt_int, True),
    ("rate_per_s", "per s", fmt_rate, True),
    ("errors", "errors", fmt_int, True),
    ("error_rate", "error rate", fmt_pct, True),
    ("unanswered", "unanswered", fmt_int, True),
    ("p50_ms", "p50 ms", fmt_ms, True),
    ("p90_ms", "p90 ms", fmt_ms, True),
    ("p99_ms", "p99 ms", fmt_ms, True),
    ("max_ms", "max ms", fmt_ms, True),
    ("bytes_in", "bytes in", fmt_bytes, True),
    ("bytes_out", "bytes out", fmt_bytes, True),
)


def time_format(df: pd.DataFrame) -> Callable[[object], str]:
    """Time of day when the capture is within one day (the header gives the date)."""
    times = stats.event_time(df).dropna()
    one_day = len(times) == 0 or times.min().date() == times.max().date()
    return fmt_clock if one_day else fmt_time


def pair_columns(df: pd.DataFrame) -> tuple[Column, ...]:
    """The slowest/unanswered tables' columns; a capture column when there are several."""
    several = len(set(df["capture"].dropna().unique().astype(str))) > 1
    capture: tuple[Column, ...] = (("capture", "capture", fmt_capture, False),) if several else ()
    return (*capture, ("request_time", "time (UTC)", time_format(df), False), *PAIR_COLUMNS)


def fmt_capture(value: object) -> str:
    return "–" if is_missing(value) else Path(str(value)).name


def fmt_status(value: object) -> str:
    """``status`` and ``error_name`` (a tuple) in one cell: "error: NOT_COORDINATOR";
    a third item, a long poll's ``fetch_wait``, is marked: "ok, long poll (empty poll)"."""
    status, error, *wait = cast("tuple[object, ...]", value)
    text = fmt_text(status) if is_missing(error) or error == "NONE" else f"{status}: {error}"
    if wait and not is_missing(wait[0]) and wait[0] != schema.FETCH_WAIT_DATA:
        text += f", long poll ({str(wait[0]).replace('_', ' ')})"
    return text


def fmt_pair(value: object) -> str:
    """Two numbers in one cell, "a / b" (request / response bytes, stream / corr id)."""
    first, second = cast("tuple[object, object]", value)
    return f"{fmt_int(first)} / {fmt_int(second)}"


PAIR_COLUMNS: tuple[Column, ...] = (
    ("api_name", "API", fmt_text, False),
    ("api_version", "v", fmt_int, True),
    ("client_id", "client id", fmt_text, False),
    ("broker", "broker", fmt_text, False),
    ("topics", "topics", fmt_topics, False),
    ("latency_ms", "latency ms", fmt_ms, True),
    ("status_error", "status", fmt_status, False),
    ("bytes", "bytes req / resp", fmt_pair, False),
    ("stream_corr", "tcp.stream / corr id", fmt_pair, False),
)
"""Status with its error, and paired numbers, share a cell: the table fits a 1400 px
window without a horizontal scrollbar."""


def pair_table(rows: pd.DataFrame) -> pd.DataFrame:
    """``stats.slowest``/``stats.unanswered`` rows with the combined cells of
    ``PAIR_COLUMNS``."""
    out = rows.copy()
    out["status_error"] = list(zip(rows["status"], rows["error_name"], strict=True))
    out["bytes"] = list(zip(rows["request_size"], rows["response_size"], strict=True))
    out["stream_corr"] = list(zip(rows["stream"], rows["correlation_id"], strict=True))
    out["api_name"] = [
        stats.ORPHAN_LABEL if is_missing(n) and s == stats.ORPHAN_STATUS else n
        for n, s in zip(rows["api_name"], rows["status"], strict=True)
    ]
    return out


def fmt_ms_pair(value: object) -> str:
    """Service and latency in one cell, "9.48 / 503" (sorts by the first)."""
    first, second = cast("tuple[object, object]", value)
    return f"{fmt_ms(first)} / {fmt_ms(second)}"


def service_pair_columns(df: pd.DataFrame) -> tuple[Column, ...]:
    """The pair columns with the latency cell giving service time first: one cell, so
    the table still fits a 1400 px window."""
    service: Column = ("service_latency", "service / latency ms", fmt_ms_pair, True)
    return tuple(service if c[0] == "latency_ms" else c for c in pair_columns(df))


def service_pair_table(rows: pd.DataFrame) -> pd.DataFrame:
    """``pair_table`` with each long poll marked in its status cell (it wraps there)."""
    out = pair_table(rows)
    out["status_error"] = list(
        zip(rows["status"], rows["error_name"], rows["fetch_wait"], strict=True)
    )
    out["service_latency"] = list(zip(rows["service_ms"], rows["latency_ms"], strict=True))
    return out


def capture_column(frame: pd.DataFrame) -> tuple[Column, ...]:
    """A capture column when the table covers several captures."""
    several = "capture" in frame.columns and frame["capture"].nunique(dropna=True) > 1
    return (("capture", "capture", fmt_capture, False),) if several else ()
