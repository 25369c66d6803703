"""The per-API summary the CLI prints after an analysis."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import pandas as pd


# df.attrs key beside "filter": row_filter.Filter.absent when no row matched, e.g.
# ("no API named 'Fecth'",): said with the empty result, since a typo reads like an answer.
FILTER_ABSENT_ATTR = "filter_absent"

# Piped or redirected output is read by programs and wide terminals later: no
# 80-column cut. Wide enough for any table this prints.
_FILE_WIDTH = 1000
# What a terminal of unknown size is taken to be.
_DUMB_WIDTH = 80
_UNUSED_HEIGHT = 25


def api_summary(df: pd.DataFrame) -> pd.DataFrame:
    """count, errors, unanswered, empty long polls, p50/p99 service latency (ms) per
    api_name and version. Service latency leaves out the time a Fetch/ShareFetch long
    poll waited on the broker (``stats.SERVICE_LATENCY_RULE``); the empty polls are
    counted in their own column instead of setting the percentiles."""
    import pandas as pd

    from dissector.analytics.stats import (
        ERROR_STATUSES,
        FETCH_WAIT_EMPTY_POLL,
        UNANSWERED_STATUSES,
        service_latency,
    )

    if df.empty:
        return pd.DataFrame(
            columns=[
                "api_name",
                "api_version",
                "count",
                "errors",
                "unanswered",
                "unsupported",
                "assumed",
                "long_polls",
                "p50_ms",
                "p99_ms",
            ]
        )
    service = service_latency(df)
    keyed = df.assign(
        service_ms=service["service_ms"],
        is_poll=service["fetch_wait"].eq(FETCH_WAIT_EMPTY_POLL).fillna(False).astype(bool),
        api_name=df["api_name"].astype("object").fillna("(unknown)"),
        api_version=df["api_version"].astype("Float64"),
        is_error=df["status"].isin(ERROR_STATUSES),
        is_unanswered=df["status"].isin(UNANSWERED_STATUSES),
        is_unsupported=unsupported_rows(df),
        is_assumed=assumed_rows(df),
    )
    grouped = keyed.groupby(["api_name", "api_version"], dropna=False, sort=True)
    out = grouped.agg(
        count=("status", "size"),
        errors=("is_error", "sum"),
        unanswered=("is_unanswered", "sum"),
        unsupported=("is_unsupported", "sum"),
        assumed=("is_assumed", "sum"),
        long_polls=("is_poll", "sum"),
        p50_ms=("service_ms", lambda s: s.astype("float64").quantile(0.5)),
        p99_ms=("service_ms", lambda s: s.astype("float64").quantile(0.99)),
    )
    return out.reset_index()


def unsupported_rows(df: pd.DataFrame) -> pd.Series:
    """Rows whose API version the installed specs do not know (bodies not decoded): they
    keep status ok (the bytes are fine), their decode_error says so."""
    from dissector.protocol.messages import UNSUPPORTED_VERSION_PREFIX

    errors = df["decode_error"].astype("string")
    return errors.str.contains(UNSUPPORTED_VERSION_PREFIX, regex=False).fillna(False).astype(bool)


def refused_rows(df: pd.DataFrame) -> pd.Series:
    """ApiVersions rows of a version the broker refused too (KIP-511): body not decoded,
    by the broker either; newer specs would not change that (``messages.settle_refused``:
    the status is the broker's error)."""
    from dissector.protocol.messages import VERSION_REFUSED_PREFIX

    errors = df["decode_error"].astype("string")
    return errors.str.contains(VERSION_REFUSED_PREFIX, regex=False).fillna(False).astype(bool)


def assumed_rows(df: pd.DataFrame) -> pd.Series:
    """Rows of a version newer than the specs, decoded by the newest known layout
    (``messages.ASSUMED_VERSION_RULE``): decoded, yet worth a look with newer --specs."""
    import pandas as pd

    if "assumed_version" not in df:
        return pd.Series(False, index=df.index)
    return df["assumed_version"].notna().astype(bool)


@dataclass(frozen=True, slots=True)
class SummaryColumn:
    """One column of the printed table, with what it may shrink to on a narrow terminal."""

    name: str
    short: str  # the header when space is short
    cells: tuple[str, ...]
    justify: str = "right"
    # Order in which columns leave a narrow terminal (lower first); None: never.
    drop_rank: int | None = None
    width: int | None = None  # fixed width when fitted (text cut with an ellipsis)
    abbreviated: bool = False  # shown under ``short``

    @property
    def header(self) -> str:
        return self.short if self.abbreviated else self.name

    @property
    def natural(self) -> int:
        return max(len(self.header), *(len(c) for c in self.cells), 0)

    @property
    def all_zero(self) -> bool:
        return bool(self.cells) and all(c == "0" for c in self.cells)


# A rich table's frame: one space of padding on each side of a cell and a rule
# between and around cells.
_CELL_FRAME = 3
_MIN_NAME = 12  # an API name cut shorter than this stops being recognisable


def table_width(columns: list[SummaryColumn]) -> int:
    widths = [c.width if c.width is not None else c.natural for c in columns]
    return sum(widths) + _CELL_FRAME * len(columns) + 1


@dataclass(frozen=True, slots=True)
class FittedTable:
    columns: list[SummaryColumn]
    left_out: list[str]  # columns dropped for width (their full names)
    zero: frozenset[str] = frozenset()  # those of left_out that held nothing but zeros


def _terminal_width(out: TextIO) -> int:
    """The terminal's own width: rich assumes 80 cells when TERM is dumb (an editor's
    shell, some CI runners) although the pty knows its size. COLUMNS, when set, wins."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return os.get_terminal_size(out.fileno()).columns or _DUMB_WIDTH
    except (OSError, ValueError):
        import shutil  # here: it imports bz2 and lzma, some 10 ms of every start-up

        return shutil.get_terminal_size((_DUMB_WIDTH, 24)).columns


def fit_columns(columns: list[SummaryColumn], width: int | None) -> FittedTable:
    """The columns that fit ``width`` terminal cells, in steps that lose least first:
    columns of nothing but zeros, short headers, API names cut with an ellipsis (not
    below 12 cells), then whole columns by ``drop_rank``. Numbers are never cut and
    no column is squeezed to nothing. ``width`` None (piped output): all, full width.
    """
    if width is None or table_width(columns) <= width:
        return FittedTable(columns, [])
    cols = list(columns)
    left_out: list[str] = []
    droppable = sorted((c for c in cols if c.drop_rank is not None), key=lambda c: c.drop_rank or 0)
    for col in droppable:
        if table_width(cols) <= width:
            break
        if col.all_zero:
            cols = [c for c in cols if c.drop_rank != col.drop_rank]
            left_out.append(col.name)
    if table_width(cols) > width:
        cols = [replace(c, abbreviated=c.short != c.name) for c in cols]
    excess = table_width(cols) - width
    if excess > 0:
        text = cols[0]
        shrunk = max(_MIN_NAME, min(text.natural, text.natural - excess))
        cols[0] = replace(text, width=shrunk)
    for col in droppable:
        if table_width(cols) <= width:
            break
        kept = [c for c in cols if c.drop_rank != col.drop_rank]
        if len(kept) < len(cols):
            cols = kept
            left_out.append(col.name)
    zero = frozenset(c.name for c in columns if c.all_zero and c.name in left_out)
    return FittedTable(cols, left_out, zero)


def summary_columns(df: pd.DataFrame) -> list[SummaryColumn]:
    """The table's columns, most important first to stay (API, version, count, p99)."""
    rows = list(api_summary(df).itertuples(index=False))

    def cells(fn: Callable[[Any], str]) -> tuple[str, ...]:
        return tuple(fn(r) for r in rows)

    return [
        SummaryColumn("API", "API", cells(lambda r: str(r.api_name)), justify="left"),
        SummaryColumn(
            "ver",
            "v",
            cells(lambda r: "" if _missing(r.api_version) else str(int(r.api_version))),
        ),
        SummaryColumn("count", "n", cells(lambda r: str(r.count))),
        SummaryColumn("errors", "err", cells(lambda r: str(int(r.errors))), drop_rank=6),
        SummaryColumn("unanswered", "unans", cells(lambda r: str(int(r.unanswered))), drop_rank=4),
        SummaryColumn(
            "unsupported", "unsup", cells(lambda r: str(int(r.unsupported))), drop_rank=2
        ),
        SummaryColumn("assumed", "asm", cells(lambda r: str(int(r.assumed))), drop_rank=1),
        SummaryColumn("long polls", "polls", cells(lambda r: str(int(r.long_polls))), drop_rank=3),
        SummaryColumn("p50 ms", "p50 ms", cells(lambda r: _fmt_ms(r.p50_ms)), drop_rank=5),
        SummaryColumn("p99 ms", "p99 ms", cells(lambda r: _fmt_ms(r.p99_ms))),
    ]


def print_summary(
    df: pd.DataFrame, file: TextIO | None = None, *, ports: frozenset[int] | None = None
) -> None:
    """The table (or, with no pair, why not), notes, statuses and counters.

    ``ports``: the ``--ports`` given, for the no-Kafka sentence's hint.
    """
    from rich.console import Console
    from rich.table import Table

    from dissector.analytics.no_kafka import no_kafka

    out = file if file is not None else sys.stdout
    tty = out.isatty()
    # rich keeps a given width only with a height beside it (which this never uses).
    console = Console(
        file=out, width=_terminal_width(out) if tty else _FILE_WIDTH, height=_UNUSED_HEIGHT
    )
    # In a terminal the notes wrap at its width; piped, each stays one line.
    soft = not tty
    fitted = fit_columns(summary_columns(df), console.width if tty else None)
    applied = df.attrs.get("filter")  # (text, rows before) when --filter was given
    title = f"Kafka pairs: {len(df)} rows"
    if applied:
        title = f"Kafka pairs: {len(df)} of {applied[1]} rows matching {applied[0]!r}"
    table = Table(title=title)
    for col in fitted.columns:
        table.add_column(
            col.header,
            justify=col.justify,  # type: ignore[arg-type]
            no_wrap=True,
            overflow="ellipsis",
            width=col.width,
            # numbers keep their whole width: rich may only ever cut the API name
            min_width=col.natural if col.width is None else col.width,
        )
    for i in range(len(fitted.columns[0].cells)):
        table.add_row(*(col.cells[i] for col in fitted.columns))
    counters = df.attrs.get("counters") or {}
    rows_seen = applied[1] if applied else len(df)
    absent = no_kafka(rows_seen, counters, df.attrs.get("tls_streams") or (), ports)
    if applied and df.empty:
        unknown = "; ".join(df.attrs.get(FILTER_ABSENT_ATTR) or ())
        console.print(
            f"no row matches {applied[0]!r} ({applied[1]} rows before the filter"
            + (f": {unknown} among them)" if unknown else ")"),
            highlight=False,
            soft_wrap=soft,
        )
    elif absent is not None:
        # Not an empty table that reads like an answer: what the capture held instead.
        console.print(absent.sentence(), highlight=False, soft_wrap=soft)
    else:
        console.print(table)
    short = [f"{c.short}: {c.name}" for c in fitted.columns if c.abbreviated]
    if short:
        console.print("; ".join(short), highlight=False, soft_wrap=soft)
    if fitted.left_out:
        console.print(
            f"left out for the terminal's width ({console.width} columns): "
            + ", ".join(f"{n} (all 0)" if n in fitted.zero else n for n in fitted.left_out)
            + " (piped or with a wider terminal the table is whole)",
            highlight=False,
            soft_wrap=soft,
        )
    if not df.empty:
        console.print(
            "p50/p99: service latency (Fetch/ShareFetch long polls without their wait on the "
            "broker; empty polls counted under 'long polls')",
            highlight=False,
            soft_wrap=soft,
        )
        statuses = df["status"].value_counts().to_dict()
        shown = sorted((k, v) for k, v in statuses.items() if v)  # categories never seen: no
        console.print("status: " + ", ".join(f"{k}={v}" for k, v in shown))
        notes = (
            (
                "unsupported",
                unsupported_rows(df),
                "with an API version newer than the installed specs that does not fit the "
                "newest known layout: bodies not decoded (add newer specs with --specs)",
            ),
            (
                "refused",
                refused_rows(df),
                "asking for an ApiVersions version the broker does not support either, "
                "answered UNSUPPORTED_VERSION in the v0 layout (KIP-511); the request body "
                "is not read, by the broker or here",
            ),
            (
                "assumed",
                assumed_rows(df),
                "with an API version newer than the installed specs, decoded with the newest "
                "known layout, which fits exactly (column assumed_version; --specs with newer "
                "specs decodes them as sent)",
            ),
        )
        for label, rows, text in notes:
            n = int(rows.sum())
            if n:
                console.print(f"{label}: {_rows(n)} {text}", highlight=False, soft_wrap=soft)
    counters = df.attrs.get("counters") or {}
    if counters:
        console.print(
            "counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()),
            highlight=False,
            soft_wrap=soft,
        )
    for line in tls_lines(df.attrs.get("tls") or []):
        console.print(line, highlight=False, soft_wrap=True)
    tls = df.attrs.get("tls_streams") or []
    if tls:
        hint = "" if counters.get("tls_decrypted_connections") else " (give --tls-keylog)"
        console.print(
            f"TLS detected (not decoded) on streams: {', '.join(map(str, tls))}{hint}",
            soft_wrap=soft,
        )


def tls_lines(table: list[dict[str, object]]) -> list[str]:
    """One line per TLS version and cipher suite: connections by outcome."""
    by_suite: dict[str, dict[str, int]] = {}
    for t in table:
        shown = [str(t[k]) for k in ("version", "cipher_suite") if t.get(k)]
        label = " ".join(shown) or "TLS, version unknown"
        outcomes = by_suite.setdefault(label, {})
        outcome, n = str(t["outcome"]), t["connections"]
        outcomes[outcome] = outcomes.get(outcome, 0) + (n if isinstance(n, int) else 0)
    return [
        f"{label}: " + ", ".join(f"{k} {n}" for k, n in sorted(o.items()))
        for label, o in sorted(by_suite.items())
    ]


def _missing(value: object) -> bool:
    import pandas as pd

    return value is None or bool(pd.isna(value))


def _fmt_ms(value: object) -> str:
    return "" if _missing(value) else f"{float(value):.3f}"  # type: ignore[arg-type]


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"
