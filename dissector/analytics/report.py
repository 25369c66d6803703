"""One self-contained HTML report of a capture: facts, charts and tables.

The page inlines its charts as SVG (drawn without matplotlib: ``analytics.charts``)
and its style, so the single file opens offline in any browser. Output is
deterministic for a given input (no generation timestamp), so the example in
``reports/`` can be regenerated and diffed::

    kafka-dissector report captures/kafka-4-mixed.pcapng -o reports/kafka-4-mixed.html
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import jinja2
from markupsafe import Markup, escape

# Imported here, not where used: a missing optional dependency (report extra: jinja2)
# then surfaces as the CLI's clear message, not a traceback.
from dissector import __version__, schema
from dissector.analytics import charts, series, stats
from dissector.analytics.no_kafka import no_kafka

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.options import CaptureSet, ChainRule
    from dissector.tls import KeyLogs
    from dissector.wire.tables import CaptureTables

TABLE_ROW_LIMIT = 50
"""Longer tables are cut (the note says how many rows were left out)."""
SLOWEST_N = 20
CLIENT_SOFTWARE_ATTR = "client_software"
"""``df.attrs`` key: {"name version": [client ids]} from ApiVersions v3+ requests."""
PER_API_ROW_LIMIT = 200
VERSION_ROW_LIMIT = 300
"""The version view has a row per client and API: a few hundred in a busy capture."""


@dataclass(frozen=True, slots=True)
class Header:
    label: str
    numeric: bool = False


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    svg: Markup
    """One SVG document (``analytics.charts``), inlined in the page."""
    caption: str
    kind: str = "chart"


@dataclass(frozen=True, slots=True)
class TableBlock:
    id: str
    title: str
    headers: tuple[Header, ...]
    rows: tuple[tuple[str, ...], ...]
    keys: tuple[tuple[str, ...], ...] = ()
    """Per cell, the value the table sorts by ("" = by its text): numbers unformatted."""
    empty: str = "Nothing to show."
    note: str = ""
    more: int = 0
    css: str = ""
    kind: str = "table"


@dataclass(frozen=True, slots=True)
class Card:
    label: str
    value: str
    tone: str = ""


@dataclass(frozen=True, slots=True)
class Folded:
    """A long list in a fact: its first items shown, the whole list behind a <details>."""

    short: str
    full: str

    def __str__(self) -> str:  # tests and text readers see the whole list
        return self.full


FOLD_ITEMS = 12
"""A fact listing more items than this shows the first ones and folds the rest."""
COLLAPSE_ROWS = 25
"""A table longer than this starts collapsed (<details>): the page leads with trouble."""


def listed(items: Sequence[str]) -> str | Folded:
    """``items`` comma-separated; past ``FOLD_ITEMS`` folded behind "and N more"."""
    full = ", ".join(items) or "–"
    if len(items) <= FOLD_ITEMS:
        return full
    shown = FOLD_ITEMS // 2
    return Folded(f"{', '.join(items[:shown])} and {len(items) - shown:,} more", full)


@dataclass(frozen=True, slots=True)
class Section:
    id: str
    title: str
    intro: str = ""
    cards: tuple[Card, ...] = ()
    facts: tuple[tuple[str, str | Folded], ...] = ()
    blocks: tuple[Chart | TableBlock, ...] = field(default_factory=tuple)


SECTION_IDS: tuple[str, ...] = (
    "overview",
    "trouble",
    "capture",
    "latency",
    "queueing",
    "traffic",
    "errors",
    "slowest",
    "unanswered",
    "groups",
    "clients",
    "brokers",
    "topics",
    "partitions",
    "versions",
    "sizes",
    "definitions",
)
"""Every report has these sections, in this order (tests and links rely on them)."""


# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------


def _missing(value: object) -> bool:
    import pandas as pd

    if isinstance(value, list | tuple):
        return False
    return value is None or bool(pd.isna(value))


def fmt_ms(value: object) -> str:
    if _missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.3f}"


def fmt_int(value: object) -> str:
    return "–" if _missing(value) else f"{int(value):,}"  # type: ignore[call-overload]


def fmt_bytes(value: object) -> str:
    if _missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    for unit, size in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if abs(v) >= size:
            return f"{v / size:.1f} {unit}"
    return f"{v:,.0f} B"


def fmt_rate(value: object) -> str:
    if _missing(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    if v == 0:
        return "0"
    if v < 0.01:
        return "<0.01"
    return f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def fmt_pct(value: object) -> str:
    if _missing(value):
        return "–"
    v = 100.0 * float(value)  # type: ignore[arg-type]
    return "0%" if v == 0 else f"{v:.1f}%" if v >= 0.1 else "<0.1%"


def fmt_time(value: object) -> str:
    if _missing(value):
        return "–"
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"  # type: ignore[attr-defined]


def fmt_clock(value: object) -> str:
    """Time of day, for tables under a header that gives the date."""
    if _missing(value):
        return "–"
    return value.strftime("%H:%M:%S.%f")[:-3]  # type: ignore[attr-defined]


def fmt_text(value: object) -> str:
    if _missing(value):
        return "–"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "–"
    return str(value)


def fmt_error(value: object) -> str:
    return "–" if isinstance(value, str) and value == "NONE" else fmt_text(value)


def fmt_topics(value: object, shown: int = 3) -> str:
    if _missing(value) or not isinstance(value, list | tuple):
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
    if isinstance(value, list | tuple) or _missing(value):
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
    # Row dicts, not iterrows: a row Series would turn an Arrow-backed list into a numpy array.
    records = frame.head(limit).to_dict(orient="records")
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


def breakdown_metrics(df: pd.DataFrame) -> tuple[Column, ...]:
    """The breakdown columns, the rate in the report's one unit (``stats.rate_unit``)."""
    seconds, label = stats.rate_unit(df)
    rate: Column = ("rate_per_s", label, lambda v: fmt_rate(_scaled(v, seconds)), True)
    return (BREAKDOWN_METRICS[0], rate, *BREAKDOWN_METRICS[2:])


def _scaled(value: object, factor: float) -> object:
    return value if _missing(value) else float(value) * factor  # type: ignore[arg-type]


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


def _time_format(df: pd.DataFrame) -> Callable[[object], str]:
    """Time of day when the capture is within one day (the header gives the date)."""
    times = stats.event_time(df).dropna()
    one_day = len(times) == 0 or times.min().date() == times.max().date()
    return fmt_clock if one_day else fmt_time


def _pair_columns(df: pd.DataFrame) -> tuple[Column, ...]:
    """The slowest/unanswered tables' columns; a capture column when there are several."""
    several = len(set(df["capture"].dropna().unique().astype(str))) > 1
    capture: tuple[Column, ...] = (("capture", "capture", fmt_capture, False),) if several else ()
    return (*capture, ("request_time", "time (UTC)", _time_format(df), False), *PAIR_COLUMNS)


def fmt_capture(value: object) -> str:
    return "–" if _missing(value) else Path(str(value)).name


def fmt_status(value: object) -> str:
    """``status`` and ``error_name`` (a tuple) in one cell: "error: NOT_COORDINATOR";
    a third item, a long poll's ``fetch_wait``, is marked: "ok, long poll (empty poll)"."""
    status, error, *wait = cast("tuple[object, ...]", value)
    text = fmt_text(status) if _missing(error) or error == "NONE" else f"{status}: {error}"
    if wait and not _missing(wait[0]) and wait[0] != schema.FETCH_WAIT_DATA:
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
        stats.ORPHAN_LABEL if _missing(n) and s == stats.ORPHAN_STATUS else n
        for n, s in zip(rows["api_name"], rows["status"], strict=True)
    ]
    return out


# ---------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------


def chart(chart_id: str, df: pd.DataFrame, caption: str) -> Chart:
    title, draw = charts.CHARTS[chart_id]
    return Chart(id=chart_id, title=title, svg=Markup(draw(df)), caption=caption)


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


def _overview(df: pd.DataFrame) -> Section:
    lat = stats.service_summary(df)
    polls = stats.long_poll_summary(df)
    errors = int(df["status"].isin(stats.ERROR_STATUSES).sum())
    missing = int(df["status"].isin(stats.UNANSWERED_STATUSES).sum())
    rate = errors / len(df) if len(df) else math.nan
    poll_label = "empty long polls"
    if polls["polls"]:
        poll_label += f" (p50 {fmt_ms(polls['p50_ms'])} ms)"
    return Section(
        id="overview",
        title="Overview",
        intro="Headline latency is service latency: Fetch/ShareFetch long-poll waits are left "
        "out and counted on their own (see Latency).",
        cards=(
            Card("rows (pairs)", fmt_int(len(df))),
            Card("span", fmt_duration(stats.span_seconds(df))),
            Card("errors", f"{errors:,} ({fmt_pct(rate)})", "bad" if errors else ""),
            Card("unanswered", fmt_int(missing), "warn" if missing else ""),
            Card("p50 service latency", f"{fmt_ms(lat['p50_ms'])} ms"),
            Card("p99 service latency", f"{fmt_ms(lat['p99_ms'])} ms"),
            Card(poll_label, fmt_int(polls["polls"])),
            Card("bytes in", fmt_bytes(stats.as_float(df[stats.BYTES_IN_COLUMN]).sum())),
            Card("bytes out", fmt_bytes(stats.as_float(df[stats.BYTES_OUT_COLUMN]).sum())),
        ),
    )


CAPTURES_ATTR = "captures"
"""``df.attrs`` key: the capture files analysed, including those without one Kafka pair."""


def capture_names(df: pd.DataFrame) -> tuple[str, ...]:
    """The capture files analysed: from ``df.attrs`` when ``analyze`` recorded them (a
    capture without Kafka has no rows to name it), else from the rows."""
    listed = df.attrs.get(CAPTURES_ATTR)
    if listed:
        return tuple(str(c) for c in listed)
    return stats.capture_facts(df).captures


def _connections_text(df: pd.DataFrame, facts: stats.CaptureFacts) -> str:
    counters = df.attrs.get("counters") or {}
    streams = counters.get("tcp_streams")
    if streams is None:
        return fmt_int(facts.connections)
    return f"{fmt_int(streams)} ({fmt_int(facts.connections)} with Kafka pairs)"


def _tls_text(streams: Sequence[int]) -> str:
    count = len(streams)
    plural = "s" if count != 1 else ""
    return f"{count} connection{plural} (tcp.stream {', '.join(map(str, streams))})"


def _capture(df: pd.DataFrame) -> Section:
    facts = stats.capture_facts(df)
    counters = df.attrs.get("counters") or {}
    tls = df.attrs.get("tls_streams") or []
    rows: list[tuple[str, str | Folded]] = [
        ("capture files", ", ".join(capture_names(df)) or "–"),
        ("first packet", fmt_time(facts.first)),
        ("last packet", fmt_time(facts.last)),
        ("span", fmt_duration(facts.span_s)),
        ("rows by status", ", ".join(f"{k} {v:,}" for k, v in facts.statuses.items()) or "–"),
        ("TCP connections", _connections_text(df, facts)),
        (f"brokers ({len(facts.brokers)})", ", ".join(facts.brokers) or "–"),
        (f"client hosts ({len(facts.client_ips)})", listed(facts.client_ips)),
        (f"client ids ({len(facts.client_ids)})", listed(facts.client_ids)),
        ("Kafka version", _kafka_versions_text(facts)),
        ("client software", _software_text(df)),
        (f"API versions seen ({len(facts.api_versions)})", listed(facts.api_versions)),
        ("versions newer than the specs", _newer_versions_text(df)),
    ]
    filtered = _filter_text(df)
    if filtered:
        rows.insert(1, ("filter", filtered))
    sets_text = _capture_sets_text(df)
    if sets_text:
        rows.append(("capture sets", sets_text))
    from dissector.analytics.summary_table import tls_lines

    decrypted = tls_lines(df.attrs.get("tls") or [])
    if decrypted:
        rows.append(("TLS connections", "; ".join(decrypted)))
    if tls:
        rows.append(("TLS (not decoded)", _tls_text(tls)))
    if counters:
        rows.append(("stage counters", listed([f"{k} {v:,}" for k, v in counters.items()])))
    alone = stats.timeline_capture(df)
    if alone is not None:
        rows.append(("time charts", _timeline_note(alone)))
    blocks: tuple[TableBlock, ...] = ()
    if len(facts.captures) > 1:
        blocks = (
            frame_table(
                "captures",
                "Per capture file",
                stats.per_capture(df),
                (
                    ("capture", "capture", fmt_capture, False),
                    ("first", "first (UTC)", fmt_time, False),
                    ("last", "last (UTC)", fmt_time, False),
                    ("span_s", "span", lambda v: fmt_duration(float(v)), False),  # type: ignore[arg-type]
                    ("rows", "rows", fmt_int, True),
                    ("connections", "connections", fmt_int, True),
                ),
            ),
        )
    return Section(id="capture", title="Capture", facts=tuple(rows), blocks=blocks)


def _capture_sets_text(df: pd.DataFrame) -> str:
    """The files read as one continuous capture (rows carry the first file's name)."""
    from dissector.table.analysis import CAPTURE_SETS_ATTR

    parts = []
    for entry in df.attrs.get(CAPTURE_SETS_ATTR) or []:
        files = entry["files"]
        if len(files) > 1:
            parts.append(
                f"{Path(entry['capture']).name}: {len(files)} files read as one capture "
                f"({Path(files[0]).name} to {Path(files[-1]).name})"
            )
    return "; ".join(parts)


def _timeline_note(capture: str) -> str:
    return (
        f"the captures lie far apart in time, so charts over time show {Path(capture).name} "
        "alone (the one with most rows); tables and totals cover every capture"
    )


def timeline_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows time charts draw: all of them, or one capture's when captures are far
    apart in time (``stats.timeline_capture``)."""
    alone = stats.timeline_capture(df)
    if alone is None:
        return df
    return df[df["capture"].astype("object").eq(alone).fillna(False).astype(bool)]


def _kafka_versions_text(facts: stats.CaptureFacts) -> str:
    if len(facts.kafka_floors) <= 1:
        return stats.describe_kafka_floor(facts.kafka_floor)
    return "; ".join(
        stats.describe_kafka_floor(floor, f"broker {broker}")
        for broker, floor in facts.kafka_floors.items()
    )


def _newer_versions_text(df: pd.DataFrame) -> str:
    """Which API versions the specs do not know, and how their pairs were decoded
    (``messages.ASSUMED_VERSION_RULE``); the full view per connection is
    ``dissector.versions``."""
    from dissector.analytics.summary_table import assumed_rows, refused_rows, unsupported_rows

    if df.empty:
        return "none"
    undecoded, assumed, refused = unsupported_rows(df), assumed_rows(df), refused_rows(df)
    newer = df.assign(_undecoded=undecoded, _assumed=assumed, _refused=refused)[
        undecoded | assumed | refused
    ]
    if newer.empty:
        return "none"
    parts = []
    keys = ["api_name", "api_version"]
    for (name, version), g in newer.groupby(keys, sort=True, observed=True):
        how = []
        if int(g["_undecoded"].sum()):
            how.append(f"{int(g['_undecoded'].sum()):,} not decoded")
        if int(g["_refused"].sum()):
            how.append(f"{int(g['_refused'].sum()):,} refused by the broker too")
        if int(g["_assumed"].sum()):
            layout = int(g["assumed_version"].dropna().iloc[0])
            how.append(f"{int(g['_assumed'].sum()):,} decoded as v{layout}")
        parts.append(f"{name} v{int(version)} ({', '.join(how)})")
    return "; ".join(parts)


def _software_text(df: pd.DataFrame) -> str:
    software = df.attrs.get(CLIENT_SOFTWARE_ATTR)
    if software is None:
        return "not collected (use kafka-dissector report or report.analyze)"
    if not software:
        return "no client named its software (ApiVersions v3+ requests carry it)"
    parts = []
    for name, clients in software.items():
        plural = "s" if len(clients) != 1 else ""
        parts.append(f"{name} ({len(clients)} client id{plural})")
    return ", ".join(parts)


def _latency(df: pd.DataFrame) -> Section:
    table = stats.per_api(df)
    timeline = timeline_rows(df)
    return Section(
        id="latency",
        title="Latency per API",
        intro="Latency is from the packet completing a request to the packet completing its "
        "response, as seen where the capture was taken. " + stats.SERVICE_LATENCY_RULE,
        blocks=(
            frame_table(
                "fetch-wait",
                "Fetch and ShareFetch: long polls apart from service",
                _fetch_wait_table(df),
                (
                    ("fetch_wait", "fetch_wait", fmt_text, False),
                    ("count", "pairs", fmt_int, True),
                    ("p50_ms", "p50 latency ms", fmt_ms, True),
                    ("p99_ms", "p99 latency ms", fmt_ms, True),
                    ("service_p50_ms", "p50 service ms", fmt_ms, True),
                    ("service_p99_ms", "p99 service ms", fmt_ms, True),
                ),
                empty="No answered Fetch or ShareFetch.",
                note="max_wait_ms known for "
                f"{_known_max_wait(df)} of them; without it an empty poll's service time is "
                "unknown and it is left out of headline percentiles.",
            ),
            chart(
                "latency-cdf",
                df,
                "Cumulative share of requests answered within a latency, per API (busiest "
                f"{_n_series()}). Where a curve crosses the p99 line is that API's p99.",
            ),
            chart(
                "latency-time",
                timeline,
                "Every answered request at its time. Coloured: the busiest and the slowest "
                "APIs (by p99 service latency); red rings: errors; hollow: empty long polls.",
            ),
            chart(
                "latency-percentiles",
                timeline,
                "Service latency (long-poll waits left out) per time bucket: p99 solid, p50 "
                "dotted; per API (the busiest and slowest) and per broker.",
            ),
            chart(
                "broker-api",
                df,
                "p99 service latency of each API on each broker (busiest APIs first); blank: "
                "that broker answered none.",
            ),
            frame_table(
                "per-api",
                "Per API and version",
                table,
                (
                    ("api_name", "API", fmt_text, False),
                    ("api_version", "v", fmt_int, True),
                    *breakdown_metrics(df),
                ),
                limit=PER_API_ROW_LIMIT,
                note="Latency percentiles here are raw (long polls included): compare Fetch "
                "with the table above.",
            ),
        ),
    )


def _known_max_wait(df: pd.DataFrame) -> str:
    classes = stats.service_latency(df)["fetch_wait"]
    fetches = classes.notna()
    if stats.MAX_WAIT_COLUMN not in df.columns:
        return f"none of {int(fetches.sum()):,} (the pairs table has no max_wait_ms column)"
    known = int((df[stats.MAX_WAIT_COLUMN].notna() & fetches).sum())
    return f"{known:,} of {int(fetches.sum()):,}"


def _fetch_wait_table(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    service = stats.service_latency(df)
    frame = pd.DataFrame(
        {
            "fetch_wait": service["fetch_wait"],
            "latency": stats.as_float(df[stats.LATENCY_COLUMN]),
            "service": service["service_ms"],
        }
    ).dropna(subset=["fetch_wait"])
    rows = []
    for name in schema.FETCH_WAIT_CLASSES:
        part = frame[frame["fetch_wait"] == name]
        if part.empty:
            continue
        lat, svc = part["latency"], part["service"].dropna()
        rows.append(
            {
                "fetch_wait": name,
                "count": len(part),
                "p50_ms": lat.quantile(0.5),
                "p99_ms": lat.quantile(0.99),
                "service_p50_ms": svc.quantile(0.5) if len(svc) else math.nan,
                "service_p99_ms": svc.quantile(0.99) if len(svc) else math.nan,
            }
        )
    return pd.DataFrame(rows)


def _n_series() -> int:
    return series.MAX_SERIES


def _queueing(df: pd.DataFrame) -> Section:
    return Section(
        id="queueing",
        title="Pipelining and head-of-line queueing",
        intro=stats.QUEUEING_RULE,
        blocks=(
            frame_table(
                "queueing",
                "Per client",
                stats.queueing_per_client(df),
                (
                    ("client_id", "client id", fmt_text, False),
                    ("connections", "connections", fmt_int, True),
                    ("requests", "requests", fmt_int, True),
                    ("pipelined", "sent with others in flight", fmt_int, True),
                    ("mean_inflight", "mean in flight", lambda v: f"{float(v):.2f}", True),  # type: ignore[arg-type]
                    ("max_inflight", "max in flight", fmt_int, True),
                    ("queued", "queued", fmt_int, True),
                    ("queue_total_ms", "queue total ms", fmt_ms, True),
                    ("queue_p99_ms", "queue p99 ms", fmt_ms, True),
                    ("queue_max_ms", "queue max ms", fmt_ms, True),
                ),
                empty="No requests.",
                note="A request's latency includes its queue time: subtract queue_ms for the "
                "broker's own time.",
            ),
        ),
    )


def _traffic(df: pd.DataFrame) -> Section:
    timeline = timeline_rows(df)
    _, per = series.rate_unit(df)
    return Section(
        id="traffic",
        title="Traffic over time",
        blocks=(
            chart(
                "traffic",
                timeline,
                f"Requests {per} stacked by API, and wire bytes {per}: in = requests "
                "(client to broker), out = responses (broker to client).",
            ),
            chart(
                "throttle",
                timeline,
                "Responses whose throttle_time_ms was above 0 (a broker quota delayed the "
                "client), and the longest throttle asked in each bucket.",
            ),
            chart(
                "connections",
                timeline,
                "Connections by the first and last Kafka message seen on each (a connection "
                "open before the capture started counts from its first message), and how many "
                "were active.",
            ),
        ),
    )


def _errors(df: pd.DataFrame) -> Section:
    top = stats.top_errors(df, 25)
    return Section(
        id="errors",
        title="Errors",
        intro=f"Error rows: status {' or '.join(stats.ERROR_STATUSES)} (a non-zero Kafka error "
        "code anywhere in the response, or a message that could not be decoded).",
        blocks=(
            chart("errors", df, "Rows per status, and the most frequent errors by API."),
            chart(
                "error-timeline",
                timeline_rows(df),
                f"Error rows per time bucket by error code (the {series.MAX_ERROR_SERIES} most "
                "frequent; the legend gives each one's total).",
            ),
            frame_table(
                "top-errors",
                "Top errors",
                top,
                (
                    ("error", "error", fmt_text, False),
                    ("count", "rows", fmt_int, True),
                    ("share", "share of rows", fmt_pct, True),
                    ("apis", "APIs", fmt_text, False),
                    ("client_ids", "client ids", fmt_text, False),
                    ("first_seen", "first (UTC)", _time_format(df), False),
                    ("last_seen", "last (UTC)", _time_format(df), False),
                ),
                empty="No errors in this capture.",
            ),
        ),
    )


def by_service_time(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` answered pairs with the longest service time (latency less a long
    poll's wait on the broker, ``stats.SERVICE_LATENCY_RULE``), longest first, with
    ``service_ms`` and ``fetch_wait`` beside the other columns."""
    service = stats.service_latency(df)
    ranked = df.assign(service_ms=service["service_ms"], fetch_wait=service["fetch_wait"])
    ranked = ranked[stats.as_float(ranked["service_ms"]).notna()]
    order = stats.as_float(ranked["service_ms"]).sort_values(ascending=False, kind="stable")
    out = ranked.loc[order.index[:n]].copy()
    out["broker"] = [
        stats.broker_label(ip, port)
        for ip, port in zip(out["broker_ip"], out["broker_port"], strict=True)
    ]
    return out.reset_index(drop=True)


def fmt_ms_pair(value: object) -> str:
    """Service and latency in one cell, "9.48 / 503" (sorts by the first)."""
    first, second = cast("tuple[object, object]", value)
    return f"{fmt_ms(first)} / {fmt_ms(second)}"


def _service_pair_columns(df: pd.DataFrame) -> tuple[Column, ...]:
    """The pair columns with the latency cell giving service time first: one cell, so
    the table still fits a 1400 px window."""
    service: Column = ("service_latency", "service / latency ms", fmt_ms_pair, True)
    return tuple(service if c[0] == "latency_ms" else c for c in _pair_columns(df))


def service_pair_table(rows: pd.DataFrame) -> pd.DataFrame:
    """``pair_table`` with each long poll marked in its status cell (it wraps there)."""
    out = pair_table(rows)
    out["status_error"] = list(
        zip(rows["status"], rows["error_name"], rows["fetch_wait"], strict=True)
    )
    out["service_latency"] = list(zip(rows["service_ms"], rows["latency_ms"], strict=True))
    return out


def _slowest(df: pd.DataFrame) -> Section:
    return Section(
        id="slowest",
        title="Slowest requests",
        intro="Ranked by service time: latency less the time a Fetch/ShareFetch long poll "
        "waited on the broker for data (an empty long poll's long latency is the wait it "
        "asked for, not slowness; its status says long poll). Find a pair in Wireshark with "
        "tcp.stream == stream and kafka.correlation_id == corr id.",
        blocks=(
            frame_table(
                "slowest",
                f"The {SLOWEST_N} slowest request/response pairs by service time",
                service_pair_table(by_service_time(df, SLOWEST_N)),
                _service_pair_columns(df),
                empty="No answered requests.",
                css="pairs",
            ),
        ),
    )


TROUBLE_ROWS = 10
"""Rows per Trouble table: the worst; the sections below have the rest."""


def errors_by_code_and_api(df: pd.DataFrame) -> pd.DataFrame:
    """Error rows per (error name, or status when no Kafka error code; API)."""
    import pandas as pd

    rows = df[df["status"].isin(stats.ERROR_STATUSES).fillna(False).astype(bool)]
    if rows.empty:
        return pd.DataFrame(columns=["error", "api", "count", "clients", "first", "last"])
    error = (
        rows["error_name"]
        .astype("object")
        .where(
            rows["error_name"].notna() & rows["error_name"].ne("NONE"),
            rows["status"].astype("object"),
        )
    )
    frame = pd.DataFrame(
        {
            "error": error,
            "api": rows["api_name"].astype("object").fillna("(unknown)"),
            "client": rows["client_id"].astype("object").fillna("(none)"),
            "time": stats.event_time(rows),
        }
    )
    grouped = frame.groupby(["error", "api"], sort=False)
    out = grouped.agg(
        count=("client", "size"),
        clients=("client", lambda c: ", ".join(sorted(set(map(str, c))))),
        first=("time", "min"),
        last=("time", "max"),
    ).reset_index()
    return out.sort_values(["count", "error", "api"], ascending=[False, True, True])


def unanswered_by_api(df: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    rows = df[df["status"].isin(stats.UNANSWERED_STATUSES).fillna(False).astype(bool)]
    frame = pd.DataFrame(
        {
            "api": rows["api_name"].astype("object").fillna("(unknown)"),
            "client": rows["client_id"].astype("object").fillna("(none)"),
        }
    )
    out = frame.groupby("api", sort=False).agg(
        count=("client", "size"),
        clients=("client", lambda c: ", ".join(sorted(set(map(str, c))))),
    )
    return out.reset_index().sort_values(["count", "api"], ascending=[False, True])


def throttling(df: pd.DataFrame) -> pd.DataFrame:
    """Responses a broker quota delayed (throttle_ms > 0), per client and API."""
    import pandas as pd

    throttle = stats.as_float(df["throttle_ms"])
    rows = df[(throttle > 0).fillna(False).astype(bool)]
    frame = pd.DataFrame(
        {
            "client": rows["client_id"].astype("object").fillna("(none)"),
            "api": rows["api_name"].astype("object").fillna("(unknown)"),
            "throttle": throttle[rows.index],
        }
    )
    out = frame.groupby(["client", "api"], sort=False).agg(
        count=("throttle", "size"), max_ms=("throttle", "max"), total_ms=("throttle", "sum")
    )
    return out.reset_index().sort_values(["total_ms", "client"], ascending=[False, True])


def hot_connections(df: pd.DataFrame) -> pd.DataFrame:
    """Connections where requests queued behind others (head-of-line): requests, the
    most in flight at once, requests that waited (queue_ms > 0), their total and longest
    wait, and the p99 service time; most queueing first."""
    import pandas as pd

    queue = stats.as_float(df["queue_ms"]) if "queue_ms" in df else pd.Series(math.nan, df.index)
    frame = pd.DataFrame(
        {
            "capture": df["capture"].astype("object"),
            "stream": df["stream"],
            "client": df["client_id"].astype("object").fillna("(none)"),
            "broker": stats.broker_labels(df),
            "inflight": stats.as_float(df["inflight"]) if "inflight" in df else math.nan,
            "queue": queue,
            "queued": (queue > 0).fillna(False).astype(bool),
            "service": stats.service_latency(df)["service_ms"],
        }
    )
    grouped = frame.groupby(["capture", "stream"], sort=False)
    out = grouped.agg(
        client=("client", lambda c: ", ".join(sorted(set(map(str, c))))),
        broker=("broker", "first"),
        requests=("client", "size"),
        max_inflight=("inflight", "max"),
        queued=("queued", "sum"),
        queue_total_ms=("queue", "sum"),
        queue_max_ms=("queue", "max"),
        service_p99_ms=(
            "service",
            lambda s: s.dropna().quantile(0.99) if s.notna().any() else math.nan,
        ),
    ).reset_index()
    out = out[out["queued"] > 0]
    return out.sort_values(["queue_total_ms", "stream"], ascending=[False, True])


def _trouble(df: pd.DataFrame) -> Section:
    """What needs a look first, each part ranked worst first (at most ``TROUBLE_ROWS``)."""
    errors = errors_by_code_and_api(df)
    missing = unanswered_by_api(df)
    throttled = throttling(df)
    slow = by_service_time(df, TROUBLE_ROWS)
    hot = hot_connections(df)
    when = _time_format(df)
    n_errors, n_missing = int(errors["count"].sum()), int(missing["count"].sum())
    n_throttled = int(throttled["count"].sum())
    said = [
        f"{n_errors:,} error rows"
        + (f" ({len(errors)} kinds by error and API)" if n_errors else ""),
        f"{n_missing:,} requests unanswered",
        f"{n_throttled:,} responses throttled by a quota",
        f"{len(hot):,} connections with head-of-line queueing",
    ]
    if not slow.empty:
        top = slow.iloc[0]
        said.append(
            f"the slowest service time {fmt_ms(top['service_ms'])} ms ({fmt_text(top['api_name'])})"
        )
    blocks: list[TableBlock] = []
    if n_errors:
        blocks.append(
            frame_table(
                "trouble-errors",
                "Errors by code and API",
                errors,
                (
                    ("error", "error", fmt_text, False),
                    ("api", "API", fmt_text, False),
                    ("count", "rows", fmt_int, True),
                    ("clients", "client ids", fmt_text, False),
                    ("first", "first (UTC)", when, False),
                    ("last", "last (UTC)", when, False),
                ),
                limit=TROUBLE_ROWS,
                note="Every error row: section Errors.",
            )
        )
    if n_missing:
        blocks.append(
            frame_table(
                "trouble-unanswered",
                "Unanswered requests by API",
                missing,
                (
                    ("api", "API", fmt_text, False),
                    ("count", "requests", fmt_int, True),
                    ("clients", "client ids", fmt_text, False),
                ),
                limit=TROUBLE_ROWS,
                note="Each of them: section Unanswered requests.",
            )
        )
    if n_throttled:
        blocks.append(
            frame_table(
                "trouble-throttled",
                "Throttled responses by client and API",
                throttled,
                (
                    ("client", "client id", fmt_text, False),
                    ("api", "API", fmt_text, False),
                    ("count", "responses", fmt_int, True),
                    ("max_ms", "max throttle ms", fmt_ms, True),
                    ("total_ms", "total throttle ms", fmt_ms, True),
                ),
                limit=TROUBLE_ROWS,
            )
        )
    if not slow.empty:
        blocks.append(
            frame_table(
                "trouble-slowest",
                f"The {TROUBLE_ROWS} slowest by service time",
                service_pair_table(slow),
                _service_pair_columns(df),
                css="pairs",
                note="Long polls are ranked by their service time, not by the wait they asked "
                "for; more in section Slowest requests.",
            )
        )
    if not hot.empty:
        several = len(set(df["capture"].dropna().unique().astype(str))) > 1
        capture: tuple[Column, ...] = (
            (("capture", "capture", fmt_capture, False),) if several else ()
        )
        blocks.append(
            frame_table(
                "trouble-connections",
                "Hot connections: requests queued behind others",
                hot,
                (
                    *capture,
                    ("stream", "tcp.stream", fmt_int, True),
                    ("client", "client id", fmt_text, False),
                    ("broker", "broker", fmt_text, False),
                    ("requests", "requests", fmt_int, True),
                    ("max_inflight", "max in flight", fmt_int, True),
                    ("queued", "queued", fmt_int, True),
                    ("queue_total_ms", "queue total ms", fmt_ms, True),
                    ("queue_max_ms", "queue max ms", fmt_ms, True),
                    ("service_p99_ms", "p99 service ms", fmt_ms, True),
                ),
                limit=TROUBLE_ROWS,
                note="queue_ms: how long a request waited behind earlier ones on its "
                "connection before the broker could start on it (section Pipelining).",
            )
        )
    return Section(
        id="trouble",
        title="Trouble",
        intro="; ".join(said) + ".",
        blocks=tuple(blocks),
    )


def _unanswered(df: pd.DataFrame) -> Section:
    return Section(
        id="unanswered",
        title="Unanswered requests",
        intro="Requests that expected a response and got none before the capture ended "
        "(Produce with acks=0 expects none and is not listed).",
        blocks=(
            frame_table(
                "unanswered",
                "Requests without a response",
                pair_table(stats.unanswered(df)),
                _pair_columns(df),
                empty="Every request that expected a response got one.",
                css="pairs",
            ),
        ),
    )


def _groups(df: pd.DataFrame) -> Section:
    return Section(
        id="groups",
        title="Consumer-group and share-group activity",
        intro="Group coordination calls over time: classic groups (join, sync, heartbeat, "
        "leave), KIP-848 consumer groups and KIP-932 share groups (heartbeats, share fetch "
        "and acknowledge), offset commits and fetches. Every member joins once per classic "
        f"rebalance; responses with {', '.join(stats.REBALANCE_ERROR_NAMES)} mark one.",
        blocks=(
            chart(
                "groups",
                timeline_rows(df),
                f"Group API calls {series.rate_unit(df)[1]}, stacked by activity.",
            ),
            frame_table(
                "group-summary",
                "Group calls by protocol and activity",
                stats.group_activity_summary(df),
                (
                    ("protocol", "protocol", fmt_text, False),
                    ("activity", "activity", fmt_text, False),
                    ("calls", "calls", fmt_int, True),
                    ("errors", "errors", fmt_int, True),
                    ("rebalance_in_progress", "rebalance in progress", fmt_int, True),
                ),
                empty="No consumer-group or share-group traffic.",
            ),
            _group_table(df),
        ),
    )


def _group_table(df: pd.DataFrame) -> TableBlock:
    import pandas as pd

    notes = df.attrs.get(GROUPS_ATTR)
    rows = [
        {
            "group": group,
            "protocol": note["protocol"],
            "members": note["members"],
            "generations": ", ".join(map(str, note["generations"])) or "–",
            "rebalances": len(note["generations"]) if note["protocol"] == "classic" else None,
            "calls": ", ".join(f"{k} {v}" for k, v in note["calls"].items()),
            "errors": note["errors"],
        }
        for group, note in (notes or {}).items()
    ]
    return frame_table(
        "groups",
        "Groups",
        pd.DataFrame(rows),
        (
            ("group", "group id", fmt_text, False),
            ("protocol", "protocol", fmt_text, False),
            ("members", "members", fmt_int, True),
            ("rebalances", "rebalances completed", fmt_int, True),
            ("generations", "generations / member epochs", fmt_text, False),
            ("calls", "membership calls", fmt_text, False),
            ("errors", "errors", fmt_int, True),
        ),
        empty="No group membership calls."
        if notes is not None
        else "Not collected: make the report with kafka-dissector report or report.analyze.",
        note="Classic groups: one generation per completed rebalance (successful JoinGroup). "
        "KIP-848 consumer and KIP-932 share groups: member epochs the coordinator assigned.",
    )


def _dimension(df: pd.DataFrame, by: str, section_id: str, title: str, note: str) -> Section:
    # Quotas are set per client: throttling belongs in the client table.
    extra: Mapping[str, tuple[Column, ...]] = {
        "client": (("throttled", "throttled", fmt_int, True),),
    }
    key_columns: Mapping[str, tuple[Column, ...]] = {
        "client": (("client_id", "client id", fmt_text, False),),
        "broker": (("broker", "broker", fmt_text, False),),
        "topic": (("topic", "topic", fmt_text, False),),
    }
    return Section(
        id=section_id,
        title=title,
        blocks=(
            frame_table(
                f"per-{by}",
                f"Per {by}",
                stats.breakdown(df, by),
                (*key_columns[by], *breakdown_metrics(df), *extra.get(by, ())),
                note=note,
            ),
        ),
    )


TABLES_ATTR = "tables"
"""``df.attrs`` key: the ``AnalyticsTables`` of the captures (``analyze`` computes them)."""
NOT_COLLECTED = "Not collected: make the report with kafka-dissector report or report.analyze."


@dataclass(frozen=True, eq=False)
class AnalyticsTables:
    """``dissector.partitions``, ``groups`` and ``versions`` of the report's captures,
    from the same pass as the pairs: kept as the core's Arrow tables
    (``wire.tables.CaptureTables``), each frame built when asked for (the partitions
    table of a long capture has hundreds of thousands of rows).

    Kept in ``df.attrs``: pandas deep-copies attrs on every derived frame and compares
    them on concat, so the holder copies as itself and compares by identity (the tables
    are never changed after ``analyze``)."""

    arrow: CaptureTables

    @property
    def partitions(self) -> pd.DataFrame:
        return self.arrow.frame("partitions")

    def partitions_of(self, columns: Iterable[str], rows: Any = None) -> pd.DataFrame:
        """The partitions table with only ``columns`` (a third of the memory and time of
        the whole frame for the report's derived tables); ``rows``: only the rows of
        boolean mask, applied in Arrow before the frame is built."""
        from dissector.tables_schema import PARTITION_COLUMNS
        from dissector.wire.tables import to_frame

        wanted = set(columns)
        contract = tuple(c for c in PARTITION_COLUMNS if c[0] in wanted)
        df = to_frame(self._partition_rows(rows, wanted), contract)
        df.attrs["counters"] = dict(self.arrow.counters.get("partitions", {}))
        return df

    def _partition_rows(self, rows: Any, columns: Iterable[str]) -> pa.Table:
        """The partitions table's ``columns`` (in the table's order), only ``rows``."""
        wanted = set(columns)
        table = self.arrow.partitions
        table = table.select([name for name in table.column_names if name in wanted])
        return table if rows is None else table.filter(rows)

    @property
    def groups(self) -> pd.DataFrame:
        return self.arrow.frame("groups")

    @property
    def versions(self) -> pd.DataFrame:
        return self.arrow.frame("versions")

    def __deepcopy__(self, memo: dict[int, object]) -> AnalyticsTables:
        return self


def _tables(df: pd.DataFrame) -> AnalyticsTables | None:
    tables = df.attrs.get(TABLES_ATTR)
    return tables if isinstance(tables, AnalyticsTables) else None


def _capture_column(frame: pd.DataFrame) -> tuple[Column, ...]:
    """A capture column when the table covers several captures."""
    several = "capture" in frame.columns and frame["capture"].nunique(dropna=True) > 1
    return (("capture", "capture", fmt_capture, False),) if several else ()


ROLE_LABELS: Mapping[str, str] = {"produce": "producer", "fetch": "consumer"}


def partition_throughput(table: pa.Table) -> pd.DataFrame:
    """``partitions.throughput`` of the partitions table (the core's Arrow table,
    aggregated in Arrow: ``throughput_totals_in_table``), with readable roles,
    producers first per partition."""
    from dissector.analytics.partitions import throughput_rates, throughput_totals_in_table

    out = throughput_rates(throughput_totals_in_table(table))
    return out.assign(role=out["role"].astype("object").map(ROLE_LABELS)).sort_values(
        ["capture", "topic", "partition", "role"], ascending=[True, True, True, False]
    )


NO_GROUP_OFFSETS = (
    "No consumer group offsets (OffsetCommit, OffsetFetch, TxnOffsetCommit) in this capture."
)


def lag_summary(
    parts: pd.DataFrame, end: Mapping[str, pd.Timestamp] | None = None, *, reduced: bool = False
) -> pd.DataFrame:
    """``lag.lag_at_end``: committed lag per (capture, group, topic, partition) at the end
    of the capture (``end`` per capture), the largest first and unknown lag last
    (``reduced``: as ``lag_at_end`` takes it)."""
    from dissector.analytics.lag import GROUP_KEYS, lag_at_end

    out = lag_at_end(parts, end, reduced=reduced)
    return out.sort_values(
        ["lag", "time_lag_ms", *GROUP_KEYS],
        ascending=[False, False, *[True] * len(GROUP_KEYS)],
        na_position="last",
        kind="stable",
    )


def table_lag(tables: AnalyticsTables, end: Mapping[str, pd.Timestamp]) -> pd.DataFrame:
    """``lag_summary`` of the partitions table, built of the rows the lag reads: the
    Fetch entries it does not (``lag.superseded_fetches``, most of a long capture's
    table) are left out in Arrow, before the frame is built."""
    from dissector.analytics import lag

    # The evaluation times and the superseded Fetch entries from the core's Arrow
    # table (integer codes, numpy): no frame of every row.
    table = tables.arrow.partitions
    chosen = lag.evaluation_times_in_table(table, end)
    read = ~lag.superseded_in_table(table, chosen)
    return lag_summary(tables.partitions_of(lag.INPUTS, rows=read), chosen, reduced=True)


def _capture_ends(df: pd.DataFrame) -> dict[str, pd.Timestamp]:
    """The latest request or response time of each capture's pairs."""
    latest = df[["request_time", "response_time"]].max(axis=1)
    return {str(k): v for k, v in latest.groupby(df["capture"]).max().dropna().items()}


def produce_to_fetch_summary(parts: pd.DataFrame) -> pd.DataFrame:
    """``partitions.produce_to_fetch`` latency percentiles per (capture, topic)."""
    import pandas as pd

    from dissector.analytics.partitions import produce_to_fetch

    p2f = produce_to_fetch(parts)
    rows = []
    for (capture, topic), g in p2f.groupby(["capture", "topic"], dropna=False, sort=True):
        latency = stats.as_float(g["latency_ms"]).dropna()
        q = {
            f"p{int(p * 100)}_ms": latency.quantile(p, interpolation=stats.PERCENTILE_INTERPOLATION)
            for p in (0.5, 0.9, 0.99)
        }
        rows.append(
            {
                "capture": capture,
                "topic": topic,
                "deliveries": len(g),
                "records": int(g["records"].fillna(0).sum()),
                "consumers": g["consumer_client_id"].nunique(dropna=False),
                **q,
                "max_ms": latency.max(),
            }
        )
    columns = ["capture", "topic", "deliveries", "records", "consumers", "p50_ms", "p90_ms"]
    return pd.DataFrame(rows, columns=[*columns, "p99_ms", "max_ms"])


P2F_INPUTS = (
    "capture", "topic", "partition", "api_name", "client_id", "request_time", "response_time",
    "records", "first_offset", "last_offset",
)  # fmt: skip
"""The partitions table's columns ``partitions.produce_to_fetch`` reads."""


def _carrying(tables: AnalyticsTables, field: str) -> pa.ChunkedArray:
    """Per partitions row: a Produce, Fetch or ShareFetch entry with ``field`` set (the
    rows produce_to_fetch reads: a pre-filter, it filters further)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dissector.analytics.partitions import PARTITION_APIS

    apis = pa.array([api for api, role in PARTITION_APIS.items() if role in ("produce", "fetch")])
    table = tables.arrow.partitions
    data_path = pc.is_in(table.column("api_name"), value_set=apis)
    return pc.and_(data_path, pc.is_valid(table.column(field)))


def _partitions(df: pd.DataFrame) -> Section:
    import pandas as pd

    tables = _tables(df)
    empty_parts = pd.DataFrame(columns=["capture", "topic", "partition"])
    none = NOT_COLLECTED if tables is None else None
    traffic, lag, p2f = empty_parts, empty_parts, empty_parts
    if tables is not None:
        # Each table from the partitions rows and columns it reads (a long capture's
        # table has hundreds of thousands of rows): lean frames, one at a time.
        traffic = partition_throughput(tables.arrow.partitions)
        _release_arrow_memory()
        lag = table_lag(tables, _capture_ends(df))
        p2f = produce_to_fetch_summary(
            tables.partitions_of(P2F_INPUTS, rows=_carrying(tables, "first_offset"))
        )
    return Section(
        id="partitions",
        title="Partitions",
        intro="From the decoded bodies of Produce, Fetch, ShareFetch, ListOffsets, "
        "OffsetCommit, OffsetFetch, TxnOffsetCommit and EndTxn (dissector.partitions, one "
        "row per pair and partition); the tables below are its throughput, the consumer "
        "lag of dissector.analytics.lag and produce_to_fetch.",
        blocks=(
            frame_table(
                "partition-throughput",
                "Throughput per partition",
                traffic,
                (
                    *_capture_column(traffic),
                    ("topic", "topic", fmt_text, False),
                    ("partition", "partition", fmt_int, True),
                    ("role", "side", fmt_text, False),
                    ("pairs", "pairs", fmt_int, True),
                    ("records", "records", fmt_int, True),
                    ("record_bytes", "record bytes", fmt_bytes, True),
                    ("records_per_s", "records/s", fmt_rate, True),
                    ("bytes_per_s", "bytes/s", fmt_rate, True),
                ),
                empty=none or "No Produce or Fetch records in this capture.",
                limit=PER_API_ROW_LIMIT,
                note="producer: Produce requests answered without error or sent with acks=0; "
                "consumer: Fetch/ShareFetch responses without error (their records include "
                "transaction markers). Rates are over the span from the first to the last "
                "such pair (–: one pair, no span).",
            ),
            frame_table(
                "consumer-lag",
                "Consumer lag per group and partition, at the end of the capture",
                lag,
                (
                    *_capture_column(lag),
                    ("group_id", "group id", fmt_text, False),
                    ("topic", "topic", fmt_text, False),
                    ("partition", "partition", fmt_int, True),
                    ("lag", "lag (offsets)", fmt_int, True),
                    ("time_lag_ms", "time lag ms", fmt_ms, True),
                    ("committed_offset", "committed", fmt_int, True),
                    ("committed_age_ms", "commit age ms", fmt_ms, True),
                    ("log_end_offset", "log end", fmt_int, True),
                    ("log_end_age_ms", "log-end age ms", fmt_ms, True),
                    ("position_lag", "position lag", fmt_int, True),
                    ("position_age_ms", "fetch age ms", fmt_ms, True),
                    ("note", "note", fmt_text, False),
                ),
                empty=none or NO_GROUP_OFFSETS,
                limit=PER_API_ROW_LIMIT,
                note="Largest lag first. lag: what kafka-consumer-groups --describe calls "
                "LAG, the partition's log-end offset minus the group's committed offset, "
                "each the newest seen (log end: Produce response's last offset + 1, Fetch "
                "high watermark, ListOffsets latest; committed: OffsetCommit answered "
                "without error, OffsetFetch response, TxnOffsetCommit once its "
                "transaction committed). time lag: age of the oldest unconsumed record, "
                "since the Produce that wrote the record at the committed offset (–: not "
                "in the capture). ages: how old each input is at the end of the capture. "
                "position lag: at the group's latest Fetch of the partition, the high "
                "watermark minus the consumer's position after that response (the "
                "consumer's records-lag); it goes stale while a consumer fetches nothing, "
                "e.g. working through prefetched records.",
            ),
            frame_table(
                "produce-to-fetch",
                "Produce to fetch latency per topic",
                p2f,
                (
                    *_capture_column(p2f),
                    ("topic", "topic", fmt_text, False),
                    ("deliveries", "batches delivered", fmt_int, True),
                    ("records", "records", fmt_int, True),
                    ("consumers", "consumers", fmt_int, True),
                    ("p50_ms", "p50 ms", fmt_ms, True),
                    ("p90_ms", "p90 ms", fmt_ms, True),
                    ("p99_ms", "p99 ms", fmt_ms, True),
                    ("max_ms", "max ms", fmt_ms, True),
                ),
                empty=none or "No batch both produced and fetched in this capture.",
                limit=PER_API_ROW_LIMIT,
                note="Per produced batch and consuming client: from the Produce request that "
                "wrote the batch to the first Fetch/ShareFetch response that delivered it.",
            ),
        ),
    )


def _release_arrow_memory() -> None:
    """Arrow's allocator keeps what a step freed for later allocations; the next steps
    allocate with numpy and pandas instead, so it is handed back: without it a long
    capture's report peaked some 25 MB higher (the throughput's grouping, then the lag's
    arrays on top)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _range_text(low: object, high: object) -> str:
    return "not seen" if _missing(low) or _missing(high) else f"{int(low)}–{int(high)}"  # type: ignore[call-overload]


def _software_of(name: object, version: object) -> str | None:
    parts = [str(v) for v in (name, version) if not _missing(v)]
    return " ".join(parts) or None


def version_skew(versions_table: pd.DataFrame) -> pd.DataFrame:
    """``dissector.versions`` per client (client_id and software) and API: the
    versions used over all its connections, the broker ranges advertised to it, and a
    flag when a version lay outside the advertised range or is unknown to the specs.
    Flagged rows first."""
    import pandas as pd

    v = versions_table.assign(
        software=[
            _software_of(n, s)
            for n, s in zip(
                versions_table["client_software_name"],
                versions_table["client_software_version"],
                strict=True,
            )
        ],
        broker_range=[
            _range_text(lo, hi)
            for lo, hi in zip(
                versions_table["broker_min"], versions_table["broker_max"], strict=True
            )
        ],
    )
    keys = ["capture", "client_id", "software", "api_name"]
    rows = []
    for (capture, client, software, api), g in v.groupby(keys, dropna=False, sort=True):
        used = sorted({int(x) for vs in g["versions_used"] for x in vs})
        unknown = sorted({int(x) for vs in g["unknown_versions"] for x in vs})
        outside = bool(g["within_broker_range"].eq(False).fillna(False).any())
        flags = (["outside broker range"] if outside else []) + (
            ["unknown to the specs"] if unknown else []
        )
        rows.append(
            {
                "capture": capture,
                "client_id": client,
                "software": software,
                "api_name": api,
                "connections": len(g),
                "requests": int(g["requests"].sum()),
                "versions_used": used,
                "broker_range": sorted(set(g["broker_range"])),
                "spec_max": g["spec_max"].max(),
                "unknown_versions": unknown,
                "flag": ", ".join(flags),
                "flagged": bool(flags),
            }
        )
    columns = [
        "capture", "client_id", "software", "api_name", "connections", "requests",
        "versions_used", "broker_range", "spec_max", "unknown_versions", "flag", "flagged",
    ]  # fmt: skip
    out = pd.DataFrame(rows, columns=columns)
    if out.empty:
        return out
    return out.sort_values(["flagged", *keys], ascending=[False, True, True, True, True])


def _versions(df: pd.DataFrame) -> Section:
    import pandas as pd

    tables = _tables(df)
    skew = version_skew(tables.versions) if tables is not None else pd.DataFrame(columns=["x"])
    flagged = int(skew["flagged"].sum()) if "flagged" in skew.columns else 0
    return Section(
        id="versions",
        title="Versions",
        intro="Version skew (dissector.versions): per client and API, the versions the "
        "client sent against the range the broker advertised in its ApiVersions response "
        "on the same connection.",
        blocks=(
            frame_table(
                "version-skew",
                f"Versions used per client and API ({flagged} flagged)",
                skew,
                (
                    *_capture_column(skew),
                    ("flag", "flag", fmt_text, False),
                    ("client_id", "client id", fmt_text, False),
                    ("software", "software", fmt_text, False),
                    ("api_name", "API", fmt_text, False),
                    ("connections", "connections", fmt_int, True),
                    ("requests", "requests", fmt_int, True),
                    ("versions_used", "versions used", fmt_text, False),
                    ("broker_range", "broker range", fmt_text, False),
                    ("spec_max", "specs up to", fmt_int, True),
                ),
                empty=NOT_COLLECTED if tables is None else "No Kafka requests in this capture.",
                limit=VERSION_ROW_LIMIT,
                note="Flagged first: outside broker range = a version used lies outside the "
                "range the broker advertised; unknown to the specs = a version newer than the "
                "loaded specs. broker range: not seen when the connection's ApiVersions "
                "exchange is not in the capture (opened before it started) or unreadable. "
                "software: from ApiVersions v3+ requests.",
            ),
        ),
    )


def _sizes(df: pd.DataFrame) -> Section:
    return Section(
        id="sizes",
        title="Sizes",
        blocks=(
            chart(
                "sizes",
                df,
                "Distribution of request and response sizes on the wire, size prefix included.",
            ),
        ),
    )


def _definitions(command: str) -> Section:
    facts = [(name, text) for name, text in stats.METRIC_DOCS.items()]
    facts.append(("percentiles", f"exact, {stats.PERCENTILE_INTERPOLATION} interpolation"))
    facts.append(("service latency, fetch_wait", stats.SERVICE_LATENCY_RULE))
    facts.append(("queue_ms, inflight", stats.QUEUEING_RULE))
    facts.append(
        (
            "rates",
            "per second, or per minute or hour when the capture's request rate "
            "is below 1 per second (per minute): one unit for the whole report",
        )
    )
    facts.append(("regenerate", command))
    return Section(id="definitions", title="Definitions", facts=tuple(facts))


NO_KAFKA_SECTION_IDS: tuple[str, ...] = ("overview", "capture")
"""A capture without one Kafka pair gets these: what it held instead, not empty charts."""


FILTER_ATTR = "filter"
"""``df.attrs`` key: (--filter text, rows before it) when the rows were filtered."""


def _filter_text(df: pd.DataFrame) -> str | None:
    applied = df.attrs.get(FILTER_ATTR)
    if not applied:
        return None
    text, before = applied
    return (
        f"{text} ({fmt_int(len(df))} of {fmt_int(before)} rows; the partitions, groups and "
        "versions tables are of every row)"
    )


def _no_kafka_overview(df: pd.DataFrame, ports: frozenset[int] | None) -> Section:
    applied = df.attrs.get(FILTER_ATTR)
    if applied:
        from dissector.analytics.summary_table import FILTER_ABSENT_ATTR

        unknown = "; ".join(df.attrs.get(FILTER_ABSENT_ATTR) or ())
        return Section(
            id="overview",
            title="No row matches the filter",
            intro=f"The filter {applied[0]!r} matched none of the {fmt_int(applied[1])} rows"
            + (f" ({unknown} among them)." if unknown else "."),
        )
    counters = df.attrs.get("counters") or {}
    absent = no_kafka(0, counters, df.attrs.get("tls_streams") or (), ports)
    assert absent is not None
    return Section(
        id="overview",
        title="No Kafka in this capture",
        intro=absent.sentence(),
        facts=tuple(("held", phrase) for phrase in absent.held),
    )


def _no_kafka_capture(df: pd.DataFrame, command: str) -> Section:
    counters = df.attrs.get("counters") or {}
    tls = df.attrs.get("tls_streams") or []
    rows: list[tuple[str, str]] = [("capture files", ", ".join(capture_names(df)) or "–")]
    if tls:
        rows.append(("TLS (not decoded)", _tls_text(tls)))
    if counters:
        rows.append(("stage counters", ", ".join(f"{k} {v:,}" for k, v in counters.items())))
    rows.append(("regenerate", command))
    return Section(id="capture", title="Capture", facts=tuple(rows))


def sections(
    df: pd.DataFrame, command: str, *, ports: frozenset[int] | None = None
) -> list[Section]:
    if df.empty:
        return [_no_kafka_overview(df, ports), _no_kafka_capture(df, command)]
    out = [
        _overview(df),
        _trouble(df),
        _capture(df),
        _latency(df),
        _queueing(df),
        _traffic(df),
        _errors(df),
        _slowest(df),
        _unanswered(df),
        _groups(df),
        _dimension(df, "client", "clients", "Clients", "Grouped by the client_id header field."),
        _dimension(df, "broker", "brokers", "Brokers", "Grouped by broker address and port."),
        _dimension(
            df,
            "topic",
            "topics",
            "Topics",
            "A pair that touches several topics counts, with its bytes, under each of them.",
        ),
        _partitions(df),
        _versions(df),
        _sizes(df),
        _definitions(command),
    ]
    assert tuple(s.id for s in out) == SECTION_IDS
    return out


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def _template() -> Any:
    source = resources.files("dissector").joinpath("templates/report.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, finalize=_visible)
    env.globals["zip"] = zip
    env.filters["breakable"] = breakable
    return env.from_string(source)


def _visible(value: Any) -> Any:
    """Wire strings shown in the page keep no control characters (written ``\\xNN``)."""
    from dissector.table.frame import visible_text

    if isinstance(value, str) and not isinstance(value, Markup):
        return visible_text(value)
    return value


def breakable(text: str) -> Markup:
    """``text`` escaped, with a line-break opportunity after each underscore and slash:
    browsers break at spaces and hyphens only, and an error name such as
    SASL_AUTHENTICATION_FAILED would otherwise set its column's minimum width."""
    return Markup(re.sub(r"([_/])", r"\1<wbr>", str(escape(_visible(str(text))))))


def render(
    df: pd.DataFrame,
    *,
    title: str | None = None,
    command: str = "",
    ports: frozenset[int] | None = None,
) -> str:
    """The report of the pairs frame ``df`` as one HTML document (``ports``: the
    ``--ports`` the pairs were found with, for the no-Kafka page's hint)."""
    facts = stats.capture_facts(df)
    names = ", ".join(Path(c).name for c in capture_names(df)) or "no capture"
    if df.empty:
        subtitle = f"No Kafka request/response pairs in {names}"
    else:
        subtitle = (
            f"{fmt_int(len(df))} Kafka request/response pairs from {names}; "
            f"{fmt_time(facts.first)} to {fmt_time(facts.last)}"
        )
    command = command or "kafka-dissector report " + " ".join(capture_names(df))
    return _template().render(
        title=title or f"Kafka traffic report: {names}",
        subtitle=subtitle,
        sections=sections(df, command, ports=ports),
        collapse_rows=COLLAPSE_ROWS,
        version=__version__,
        command=command,
    )


def write_report(
    df: pd.DataFrame,
    output: str | Path,
    *,
    title: str | None = None,
    command: str = "",
    ports: frozenset[int] | None = None,
) -> Path:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    html = render(df, title=title, command=command, ports=ports)
    # The command line may hold file names the OS gave as bytes that are not UTF-8:
    # shown as \xNN, as the capture column shows them (options.text_path).
    html = html.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    path.write_text(html, encoding="utf-8")
    return path


GROUPS_ATTR = "groups"
"""``df.attrs`` key: {group_id: {protocol, members, generations, calls, errors}}."""


def analyze(
    paths: Iterable[str | Path],
    *,
    ports: frozenset[int] | None = None,
    failures: list[tuple[str, str]] | None = None,
    chain: ChainRule | None = None,
    tls: KeyLogs | None = None,
    show: bool = False,
    partition_columns: Iterable[str] | None = None,
    max_decompressed: int | None = None,
) -> pd.DataFrame:
    """``dissector.analyze`` plus ``df.attrs["tables"]`` (``AnalyticsTables``: the
    partitions, groups and versions tables), ``df.attrs["client_software"]``
    (``versions.client_software``) and ``df.attrs["groups"]`` (``groups.group_notes``),
    all from one native pass over each capture; ``show``: a progress bar per capture
    (as ``analyze`` shows).

    ``failures``, when given, receives (capture, reason) for each capture that cannot be
    read, and the report covers the others; without it the first such capture raises.
    ``chain``: which files of ``paths`` are read as one capture (``wire.sets``).
    ``partition_columns``: keep only these columns of the partitions table, the others
    dropped batch by batch as the pass makes them (``REPORT_PARTITION_COLUMNS``: what the
    report reads); None keeps them all. ``max_decompressed``: ``Options.max_decompressed``.
    """
    from dissector.analytics.groups import group_notes
    from dissector.analytics.versions import client_software
    from dissector.options import ChainRule, Options
    from dissector.stages import CaptureError
    from dissector.table.analysis import CAPTURE_SETS_ATTR, set_listing
    from dissector.wire.sets import capture_sets
    from dissector.wire.tables import TableCollector

    options = Options(
        ports=ports, chain=chain or ChainRule(), tls=tls, max_decompressed=max_decompressed
    )
    # Files of one rotated recording are one capture (``chain``, see wire.sets).
    sets = capture_sets([str(p) for p in paths], options.chain, failures=failures)
    readable: list[CaptureSet] = []
    frames = []
    collected = TableCollector()
    kept: list[pa.Table] = []
    for source in sets:
        narrowed = _Narrowed(partition_columns)
        analytics = TableCollector(writers=narrowed.writers())
        try:
            frames.append(_run_one(source, options, analytics, show))
        except (CaptureError, OSError) as exc:
            if failures is None:
                raise
            failures.append((source.name, str(exc)))
            continue
        readable.append(source)
        collected.merge(analytics)
        kept.extend(narrowed.batches)
    df = _combined(frames)
    tables = AnalyticsTables(_Narrowed(partition_columns).result(collected.result(), kept))
    df.attrs[TABLES_ATTR] = tables
    df.attrs[CLIENT_SOFTWARE_ATTR] = client_software(df, tables.versions, stats.MISSING_LABEL)
    df.attrs[CAPTURES_ATTR] = [name for s in readable for name in s.file_names]
    df.attrs[CAPTURE_SETS_ATTR] = set_listing(readable)
    df.attrs[GROUPS_ATTR] = group_notes(tables.groups)
    df.attrs = {name: _shared(value) for name, value in df.attrs.items()}
    return df


class _SharedDict(dict):
    """An ``attrs`` value that frames derived from the report's frame share: pandas
    deep-copies ``attrs`` into every derived frame (thousands while a report is made: a
    tenth of its statistics' time on a long capture), and the report's are never changed
    in place."""

    def __deepcopy__(self, memo: dict[int, object]) -> _SharedDict:
        return self


class _SharedList(list):
    """A list in ``attrs`` shared by derived frames, as ``_SharedDict``."""

    def __deepcopy__(self, memo: dict[int, object]) -> _SharedList:
        return self


def _shared(value: object) -> object:
    if isinstance(value, dict):
        return _SharedDict(value)
    if isinstance(value, list):
        return _SharedList(value)
    return value


def report_partition_columns() -> tuple[str, ...]:
    """The partitions table's columns the report reads (lag, throughput,
    produce_to_fetch): ``analyze(partition_columns=...)`` for a report keeps only these."""
    from dissector.analytics import lag
    from dissector.analytics.partitions import THROUGHPUT_INPUTS

    return tuple(dict.fromkeys((*lag.INPUTS, *lag.FETCH_INPUTS, *THROUGHPUT_INPUTS, *P2F_INPUTS)))


@dataclass
class _Narrowed:
    """The partitions batches of a pass with only ``columns`` (all when None): a
    ``TableCollector`` writer keeps each batch's wanted columns, and the core's buffers
    of the others are freed as the pass goes."""

    columns: Iterable[str] | None
    batches: list[pa.Table] = field(default_factory=list)

    def writers(self) -> dict[str, Callable[[pa.Table], None]]:
        return {} if self.columns is None else {"partitions": self._keep}

    def _keep(self, batch: pa.Table) -> None:
        self.batches.append(_selected(batch, self.columns or ()))

    def result(self, tables: CaptureTables, kept: list[pa.Table]) -> CaptureTables:
        """``tables`` with the kept partitions batches as its partitions table."""
        import dataclasses

        import pyarrow as pa

        if self.columns is None:
            return tables
        narrow = pa.concat_tables(kept) if kept else _selected(tables.partitions, self.columns)
        return dataclasses.replace(tables, partitions=narrow)


def _selected(table: pa.Table, columns: Iterable[str]) -> pa.Table:
    wanted = set(columns)
    return table.select([name for name in table.column_names if name in wanted])


def _run_one(source: CaptureSet, options: Any, analytics: Any, show: bool) -> pd.DataFrame:
    from dissector.table.analysis import run_analysis

    return run_analysis([source], options, analytics=analytics, show=show)


def _combined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """One frame of per-capture frames, their counters summed."""
    import pandas as pd

    from dissector.table.frame import records_to_frame

    if not frames:
        return records_to_frame([])
    if len(frames) == 1:
        return frames[0]
    counters: dict[str, int] = {}
    tls: list[int] = []
    tls_table: list[dict[str, object]] = []
    for df in frames:
        for name, n in (df.attrs.get("counters") or {}).items():
            counters[name] = counters.get(name, 0) + n
        tls.extend(df.attrs.get("tls_streams") or [])
        tls_table.extend(df.attrs.get("tls") or [])
    combined = pd.concat(frames, ignore_index=True)
    from dissector.table.analysis import CAPTURE_SETS_ATTR

    sets = [entry for df in frames for entry in df.attrs.get(CAPTURE_SETS_ATTR) or []]
    combined.attrs = {
        "counters": dict(sorted(counters.items())),
        "tls_streams": tls,
        "tls": tls_table,
        CAPTURE_SETS_ATTR: sets,
    }
    return combined


def report_file(
    paths: Iterable[str | Path],
    output: str | Path,
    *,
    ports: frozenset[int] | None = None,
    title: str | None = None,
    failures: list[tuple[str, str]] | None = None,
    chain: ChainRule | None = None,
    tls: KeyLogs | None = None,
    show: bool = False,
    max_decompressed: int | None = None,
) -> Path:
    """Analyse ``paths`` and write their report to ``output`` (``failures``, ``chain``,
    ``show``: see ``analyze``)."""
    sources = [str(p) for p in paths]
    df = analyze(
        sources,
        ports=ports,
        failures=failures,
        chain=chain,
        tls=tls,
        show=show,
        partition_columns=report_partition_columns(),
        max_decompressed=max_decompressed,
    )
    command = "kafka-dissector report " + " ".join(sources) + f" -o {output}"
    if ports:
        command += " --ports " + ",".join(str(p) for p in sorted(ports))
    if tls:
        command += "".join(f" --tls-keylog {p}" for p in tls.paths)
    return write_report(df, output, title=title, command=command, ports=ports)
