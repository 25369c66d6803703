"""The report's derived tables, computed from the pairs frame and the analytics
tables (pure functions of frames and Arrow tables: no formatting, no HTML)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dissector import schema
from dissector.analytics import stats
from dissector.analytics.report.formatting import is_missing
from dissector.analytics.report.model import CAPTURES_ATTR, AnalyticsTables

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa

    Mask = npt.NDArray[np.bool_]


def capture_names(df: pd.DataFrame) -> tuple[str, ...]:
    """The capture files analysed: from ``df.attrs`` when ``analyze`` recorded them (a
    capture without Kafka has no rows to name it), else from the rows."""
    listed = df.attrs.get(CAPTURES_ATTR)
    if listed:
        return tuple(str(c) for c in listed)
    return stats.capture_facts(df).captures


def timeline_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows time charts draw: all of them, or one capture's when captures are far
    apart in time (``stats.timeline_capture``)."""
    alone = stats.timeline_capture(df)
    if alone is None:
        return df
    return df[df["capture"].astype("object").eq(alone).fillna(False).astype(bool)]


def known_max_wait(df: pd.DataFrame) -> str:
    classes = stats.service_latency(df)["fetch_wait"]
    fetches = classes.notna()
    if stats.MAX_WAIT_COLUMN not in df.columns:
        return f"none of {int(fetches.sum()):,} (the pairs table has no max_wait_ms column)"
    known = int((df[stats.MAX_WAIT_COLUMN].notna() & fetches).sum())
    return f"{known:,} of {int(fetches.sum()):,}"


def fetch_wait_table(df: pd.DataFrame) -> pd.DataFrame:
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


def by_service_time(df: pd.DataFrame, n: int) -> pd.DataFrame:
    """The ``n`` answered pairs with the longest service time (latency less a long
    poll's wait on the broker, ``stats.SERVICE_LATENCY_RULE``), longest first, with
    ``service_ms`` and ``fetch_wait`` beside the other columns."""
    service = stats.service_latency(df)
    timed = service["service_ms"]
    order = timed[timed.notna()].sort_values(ascending=False, kind="stable")
    top = order.index[:n]
    # the n rows picked first, then copied: not a copy of every row and column first
    out = df.loc[top].assign(
        service_ms=service["service_ms"].loc[top], fetch_wait=service["fetch_wait"].loc[top]
    )
    out["broker"] = [
        stats.broker_label(ip, port)
        for ip, port in zip(out["broker_ip"], out["broker_port"], strict=True)
    ]
    return out.reset_index(drop=True)


def errors_by_code_and_api(df: pd.DataFrame) -> pd.DataFrame:
    """Error rows per (error name, or status when no Kafka error code; API)."""
    import pandas as pd

    # the columns read, of the error rows (not every column of them)
    picked = df["status"].isin(stats.ERROR_STATUSES).fillna(False).astype(bool)
    rows = df[["error_name", "status", "api_name", "client_id"]][picked]
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
            "time": stats.event_time(df)[picked],
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

    picked = df["status"].isin(stats.UNANSWERED_STATUSES).fillna(False).astype(bool)
    rows = df[["api_name", "client_id"]][picked]
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
    rows = df[["client_id", "api_name"]][(throttle > 0).fillna(False).astype(bool)]
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

    from dissector.analytics import grouped

    queue = stats.as_float(df["queue_ms"]) if "queue_ms" in df else pd.Series(math.nan, df.index)
    client = df["client_id"].astype("object").fillna("(none)")
    frame = pd.DataFrame(
        {
            "capture": df["capture"].astype("object"),
            "stream": df["stream"],
            "broker": stats.broker_labels(df),
            "inflight": stats.as_float(df["inflight"]) if "inflight" in df else math.nan,
            "queue": queue,
            "queued": (queue > 0).fillna(False).astype(bool),
        }
    )
    by_connection = frame.groupby(["capture", "stream"], sort=False)
    out = by_connection.agg(
        broker=("broker", "first"),
        requests=("broker", "size"),
        max_inflight=("inflight", "max"),
        queued=("queued", "sum"),
        queue_total_ms=("queue", "sum"),
        queue_max_ms=("queue", "max"),
    ).reset_index()
    # the two per-connection columns that need more than a built-in aggregation, on
    # arrays (a Python function per connection was most of this table's time)
    ids = by_connection.ngroup().to_numpy()
    out.insert(2, "client", _joined_per_group(ids, client.to_numpy(), len(out)))
    service = stats.service_latency(df)["service_ms"].to_numpy(dtype="float64")
    groups = grouped.sorted_groups(ids, service, len(out))
    out["service_p99_ms"] = grouped.quantile(groups, 0.99, grouped.SERIES)
    out = out[out["queued"] > 0]
    return out.sort_values(["queue_total_ms", "stream"], ascending=[False, True])


def _joined_per_group(ids: np.ndarray, texts: np.ndarray, groups: int) -> list[str]:
    """Per group (0 .. ``groups`` - 1): its distinct ``texts``, sorted, joined by ", "."""
    seen: list[set[str]] = [set() for _ in range(groups)]
    for group, text in set(zip(ids.tolist(), texts.tolist(), strict=True)):
        seen[group].add(str(text))
    return [", ".join(sorted(names)) for names in seen]


ROLE_LABELS: Mapping[str, str] = {"produce": "producer", "fetch": "consumer"}


def partition_throughput(table: pa.Table, parts: Sequence[pa.Table] | None = None) -> pd.DataFrame:
    """``partitions.throughput`` of the partitions table (the core's Arrow table,
    aggregated in Arrow: ``throughput_totals_in_table``), with readable roles,
    producers first per partition; ``parts``: the table's ``throughput_chunks`` when
    added up already (``AnalyticsTables.throughput_parts``)."""
    from dissector.analytics.partitions import (
        merged_throughput_totals,
        throughput_chunks,
        throughput_rates,
    )

    totals = merged_throughput_totals(throughput_chunks(table) if parts is None else parts)
    out = throughput_rates(totals)
    return out.assign(role=out["role"].astype("object").map(ROLE_LABELS)).sort_values(
        ["capture", "topic", "partition", "role"], ascending=[True, True, True, False]
    )


def lag_summary(
    parts: pd.DataFrame, end: Mapping[str, pd.Timestamp] | None = None, *, reduced: bool = False
) -> pd.DataFrame:
    """``lag.lag_at_end``: committed lag per (capture, group, topic, partition) at the end
    of the capture (``end`` per capture), the largest first and unknown lag last
    (``reduced``: as ``lag_at_end`` takes it)."""
    from dissector.analytics.lag import lag_at_end

    return _largest_lag_first(lag_at_end(parts, end, reduced=reduced))


def _largest_lag_first(lag: pd.DataFrame) -> pd.DataFrame:
    """Lag rows, the largest lag (then time lag) first, unknown ones last."""
    from dissector.analytics.lag import GROUP_KEYS

    return lag.sort_values(
        ["lag", "time_lag_ms", *GROUP_KEYS],
        ascending=[False, False, *[True] * len(GROUP_KEYS)],
        na_position="last",
        kind="stable",
    )


def table_lag(tables: AnalyticsTables, end: Mapping[str, pd.Timestamp]) -> pd.DataFrame:
    """``lag_summary`` of the partitions table, computed on the core's Arrow table with
    numpy (``lag_arrow``, tested equal to ``lag.lag_at_end``, the definition) over the
    rows the lag reads: the Fetch entries it does not (``lag.superseded_fetches``, most
    of a long capture's table) are left out first. Only the lag rows become a frame."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    from dissector.analytics import lag
    from dissector.analytics.lag_arrow import lag_at_end_arrow

    table = tables.arrow.partitions
    chosen = lag.evaluation_times_in_table(table, end)
    if pc.any(pc.is_valid(table.column("committed_offset"))).as_py():
        read = ~lag.superseded_in_table(table, chosen)
    else:  # no committed offset, no lag: no row is read
        read = np.zeros(table.num_rows, dtype=bool)
    inputs = table.select(list(lag.INPUTS)).filter(pa.array(read))
    rows = lag_at_end_arrow(inputs, {c: int(t.value) for c, t in chosen.items()})
    nullable = {pa.int64(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype()}
    return _largest_lag_first(lag.typed(rows.to_pandas(types_mapper=nullable.get), lag.LAG_COLUMNS))


def capture_ends(df: pd.DataFrame) -> dict[str, pd.Timestamp]:
    """The latest request or response time of each capture's pairs."""
    latest = df[["request_time", "response_time"]].max(axis=1)
    return {str(k): v for k, v in latest.groupby(df["capture"]).max().dropna().items()}


def produce_to_fetch_summary(parts: pd.DataFrame) -> pd.DataFrame:
    """``partitions.produce_to_fetch`` latency percentiles per (capture, topic)."""
    import numpy as np
    import pandas as pd

    from dissector.analytics import grouped
    from dissector.analytics.partitions import produce_to_fetch

    p2f = produce_to_fetch(parts)
    columns = ["capture", "topic", "deliveries", "records", "consumers", "p50_ms", "p90_ms"]
    columns += ["p99_ms", "max_ms"]
    if p2f.empty:
        return pd.DataFrame([], columns=columns)
    # every topic at once on arrays (``analytics.grouped``: Series.quantile's values), not
    # a few pandas steps per topic (a capture may have thousands)
    by_topic = p2f.groupby(["capture", "topic"], dropna=False, sort=True, observed=True)
    ids = by_topic.ngroup().to_numpy()
    sizes = by_topic.size()
    groups = grouped.sorted_groups(ids, stats.as_float(p2f["latency_ms"]), len(sizes))
    records = np.bincount(ids, stats.as_float(p2f["records"]).fillna(0.0), len(sizes))
    out = {
        "capture": [capture for capture, _ in sizes.index],
        "topic": [topic for _, topic in sizes.index],
        "deliveries": sizes.tolist(),
        "records": records.astype(np.int64).tolist(),
        "consumers": by_topic["consumer_client_id"].nunique(dropna=False).tolist(),
        **{
            f"p{int(p * 100)}_ms": grouped.quantile(groups, p, grouped.SERIES).tolist()
            for p in (0.5, 0.9, 0.99)
        },
        "max_ms": grouped.largest(groups).tolist(),
    }
    return pd.DataFrame(out, columns=columns)


P2F_INPUTS = (
    "capture", "topic", "partition", "api_name", "client_id", "request_time", "response_time",
    "records", "first_offset", "last_offset",
)  # fmt: skip
"""The partitions table's columns ``partitions.produce_to_fetch`` reads."""


def carrying(tables: AnalyticsTables, field: str) -> pa.ChunkedArray:
    """Per partitions row: a Produce, Fetch or ShareFetch entry with ``field`` set (the
    rows produce_to_fetch reads: a pre-filter, it filters further)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dissector.analytics.partitions import PARTITION_APIS

    apis = pa.array([api for api, role in PARTITION_APIS.items() if role in ("produce", "fetch")])
    table = tables.arrow.partitions
    data_path = pc.is_in(table.column("api_name"), value_set=apis)
    return pc.and_(data_path, pc.is_valid(table.column(field)))


def read_after_the_pass(partitions: pa.Table) -> Mask:
    """Per row of a batch of the partitions table (numpy bool): a row the partitions
    section reads once the pass has ended. Every row but the Fetch entries, and of
    those the ones that carry their records' offsets (``produce_to_fetch``) and the ones
    the lag may read (``lag_arrow.needed_fetches``: what it does not read in a batch it
    does not read in the whole table). The throughput counts every Fetch entry: it is
    added up batch by batch instead (``partitions.throughput_chunks``). Of a long-poll
    capture's 228,489 rows, 215,152 are Fetch entries, 20,365 of them with offsets."""
    from dissector.analytics.lag_arrow import is_fetch, lag_inputs, needed_fetches

    rows = lag_inputs(partitions)
    read = ~is_fetch(rows)
    read |= partitions.column("first_offset").is_valid().to_numpy(zero_copy_only=False)
    read[needed_fetches(rows)] = True
    return read


def release_memory() -> None:
    """Hand what was freed back to the system, between steps that allocate much. The
    core builds its tables on threads of its own, and Arrow's compute on its pool's:
    glibc keeps what such a thread freed in that thread's arena and Arrow's allocator in
    its own pool, where the report's numpy and pandas work on the main thread cannot
    reuse it. Without it the report of 1.5M pairs peaked at 720-970 MiB (now the pass's
    own peak, 690 MiB), and a long capture's partitions table some 25 MB higher (the
    throughput's grouping, then the lag's arrays on top). Not glibc (no
    ``malloc_trim``): Arrow's pool only."""
    import ctypes

    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's
    except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
        return
    trim(0)


def _range_text(low: object, high: object) -> str:
    return "not seen" if is_missing(low) or is_missing(high) else f"{int(low)}–{int(high)}"  # type: ignore[call-overload]


def _software_of(name: object, version: object) -> str | None:
    parts = [str(v) for v in (name, version) if not is_missing(v)]
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
    grouped = v.groupby(keys, dropna=False, sort=True)
    # Each group's rows by number (ngroup numbers the groups in result_index order, the
    # order iterating the groupby gives), aggregated over plain lists: a sub-frame and a
    # few pandas steps per group took most of this table's time.
    members: list[list[int]] = [[] for _ in range(grouped.ngroups)]
    for row, group in enumerate(grouped.ngroup().tolist()):
        members[group].append(row)
    versions_used, unknown_versions = v["versions_used"].tolist(), v["unknown_versions"].tolist()
    within = v["within_broker_range"].tolist()
    requests = v["requests"].tolist()
    ranges = v["broker_range"].tolist()
    spec_max = v["spec_max"]
    rows = []
    for (capture, client, software, api), picked in zip(grouped.size().index, members, strict=True):
        used = sorted({int(x) for i in picked for x in versions_used[i]})
        unknown = sorted({int(x) for i in picked for x in unknown_versions[i]})
        outside = any(within[i] is False for i in picked)
        flags = (["outside broker range"] if outside else []) + (
            ["unknown to the specs"] if unknown else []
        )
        rows.append(
            {
                "capture": capture,
                "client_id": client,
                "software": software,
                "api_name": api,
                "connections": len(picked),
                "requests": sum(requests[i] for i in picked if not is_missing(requests[i])),
                "versions_used": used,
                "broker_range": sorted({ranges[i] for i in picked}),
                # as pandas gives it (numpy int64, or NA when none): the column's dtype
                "spec_max": spec_max.iloc[picked].max(),
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
