"""The per-API summary the CLI prints after an analysis."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    import pandas as pd

# A row whose request version is newer than the installed specs keeps status ok
# (the bytes are fine); its decode_error says so with this prefix.
UNSUPPORTED_VERSION = "unsupported_version: no "

# Piped or redirected output is read by programs and wide terminals later: no
# 80-column cut. Wide enough for any table this prints.
_FILE_WIDTH = 1000


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
    """Rows whose API version the installed specs do not know (bodies not decoded)."""
    errors = df["decode_error"].astype("string")
    return errors.str.contains(UNSUPPORTED_VERSION, regex=False).fillna(False).astype(bool)


def assumed_rows(df: pd.DataFrame) -> pd.Series:
    """Rows of a version newer than the specs, decoded by the newest known layout
    (``messages.ASSUMED_VERSION_RULE``): decoded, yet worth a look with newer --specs."""
    import pandas as pd

    if "assumed_version" not in df:
        return pd.Series(False, index=df.index)
    return df["assumed_version"].notna().astype(bool)


def print_summary(df: pd.DataFrame, file: TextIO | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    out = file if file is not None else sys.stdout
    console = Console(file=out, width=None if out.isatty() else _FILE_WIDTH)
    table = Table(title=f"Kafka pairs: {len(df)} rows")
    for name, justify in (
        ("API", "left"),
        ("ver", "right"),
        ("count", "right"),
        ("errors", "right"),
        ("unanswered", "right"),
        ("unsupported", "right"),
        ("assumed", "right"),
        ("long polls", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in api_summary(df).itertuples(index=False):
        table.add_row(
            str(row.api_name),
            "" if _missing(row.api_version) else str(int(row.api_version)),
            str(row.count),
            str(int(row.errors)),
            str(int(row.unanswered)),
            str(int(row.unsupported)),
            str(int(row.assumed)),
            str(int(row.long_polls)),
            _fmt_ms(row.p50_ms),
            _fmt_ms(row.p99_ms),
        )
    console.print(table)
    if not df.empty:
        console.print(
            "p50/p99: service latency (Fetch/ShareFetch long polls without their wait on the "
            "broker; empty polls counted under 'long polls')",
            highlight=False,
            soft_wrap=True,
        )
        statuses = df["status"].value_counts().to_dict()
        console.print("status: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
        unsupported = int(unsupported_rows(df).sum())
        if unsupported:
            console.print(
                f"unsupported: {_rows(unsupported)} with an API version newer than the installed "
                "specs that does not fit the newest known layout: bodies not decoded "
                "(add newer specs with --specs)",
                highlight=False,
                soft_wrap=True,
            )
        assumed = int(assumed_rows(df).sum())
        if assumed:
            console.print(
                f"assumed: {_rows(assumed)} with an API version newer than the installed specs, "
                "decoded with the newest known layout, which fits exactly "
                "(column assumed_version; --specs with newer specs decodes them as sent)",
                highlight=False,
                soft_wrap=True,
            )
    counters = df.attrs.get("counters") or {}
    if counters:
        console.print(
            "counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()),
            highlight=False,
            soft_wrap=True,
        )
    for line in tls_lines(df.attrs.get("tls") or []):
        console.print(line, highlight=False, soft_wrap=True)
    tls = df.attrs.get("tls_streams") or []
    if tls:
        hint = "" if counters.get("tls_decrypted_connections") else " (give --tls-keylog)"
        console.print(
            f"TLS detected (not decoded) on streams: {', '.join(map(str, tls))}{hint}",
            soft_wrap=True,
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
