"""Analytics over the pairs DataFrame: breakdowns, time series, errors, slow pairs.

The metric *definitions* are plain data at the top of this module (which statuses
are errors, which percentiles, what "bytes in/out" means, which APIs are group
activity) so that the Spark job computes the same numbers from the same rules
without importing pandas. The functions below are the pandas implementation.

All functions take the frame ``dissector.analyze`` returns (columns in
``dissector.schema``) and never modify it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from dissector.protocol.families import LONG_POLLS
from dissector.protocol.keys import ApiKey

# Which statuses are errors, and which are unanswered requests: one rule everywhere
# (CLI table, live view, report, Spark), kept with the status vocabulary.
from dissector.schema import (
    ERROR_STATUSES,
    FETCH_WAIT_DATA,
    FETCH_WAIT_EARLY,
    FETCH_WAIT_EMPTY_POLL,
    LONG_POLL_WAIT_SHARE,
    UNANSWERED_STATUSES,
    Status,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# ---------------------------------------------------------------------------
# Metric definitions (plain data: shared with dissector/spark/job.py)
# ---------------------------------------------------------------------------


LATENCY_COLUMN = "latency_ms"
"""Latency = time of the packet completing the response minus time of the packet
completing the request. Only rows where both were seen have one."""

PERCENTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
"""Latency percentiles reported, as fractions."""

PERCENTILE_INTERPOLATION = "linear"
"""Exact percentiles with linear interpolation between closest ranks: numpy's and
pandas' default, and Spark SQL's ``percentile`` (not ``percentile_approx``)."""

BYTES_IN_COLUMN = "request_size"
BYTES_OUT_COLUMN = "response_size"
"""Bytes in = request bytes on the wire (client to broker, size prefix included);
bytes out = response bytes on the wire (broker to client). Named from the broker's
side, like Kafka's own BytesIn/BytesOut."""

EVENT_TIME_COLUMNS: tuple[str, ...] = ("request_time", "response_time")
"""A row's time for rates and time series: request_time, or response_time when the
request is not in the capture (orphan responses)."""

RATE_BASIS = "capture span"
"""Rates are counts divided by the span of the whole input (first to last event
time), not of each group, so that rates of different groups add up."""

GROUP_KEYS: Mapping[str, tuple[str, ...]] = {
    "api": ("api_name", "api_version"),
    "client": ("client_id",),
    "broker": ("broker_ip", "broker_port"),
    "topic": ("topic",),
}
"""Breakdown dimensions. ``topic`` is one row per distinct element of ``topics``: a
pair touching several topics counts (with its bytes) once under each of them, and
pairs touching no topic are left out of the topic breakdown."""

MISSING_LABEL = "(none)"
"""Label of a group whose key is null (e.g. no client_id)."""
UNKNOWN_API_LABEL = "(unknown)"
"""Label of rows whose API is unknown although their request was captured."""
ORPHAN_LABEL = "orphan response (request not captured)"
"""API and client label of a response whose request is not in the capture (sent before
the capture started, or lost): its API and client id are only in the request."""
ORPHAN_STATUS = Status.ORPHAN_RESPONSE.value

GROUP_ACTIVITY: Mapping[int, tuple[str, str]] = {
    ApiKey.FIND_COORDINATOR: ("coordinator", "find coordinator"),
    ApiKey.JOIN_GROUP: ("classic consumer group", "join"),
    ApiKey.SYNC_GROUP: ("classic consumer group", "sync"),
    ApiKey.HEARTBEAT: ("classic consumer group", "heartbeat"),
    ApiKey.LEAVE_GROUP: ("classic consumer group", "leave"),
    ApiKey.OFFSET_COMMIT: ("offsets", "offset commit"),
    ApiKey.OFFSET_FETCH: ("offsets", "offset fetch"),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ("consumer group (KIP-848)", "consumer-group heartbeat"),
    ApiKey.SHARE_GROUP_HEARTBEAT: ("share group (KIP-932)", "share-group heartbeat"),
    ApiKey.SHARE_FETCH: ("share group (KIP-932)", "share fetch"),
    ApiKey.SHARE_ACKNOWLEDGE: ("share group (KIP-932)", "share acknowledge"),
    ApiKey.STREAMS_GROUP_HEARTBEAT: ("streams group (KIP-1071)", "streams-group heartbeat"),
}
"""api_key -> (group protocol, activity). Keys, not names, so that a renamed API
still counts."""

REBALANCE_ERROR_NAMES: tuple[str, ...] = ("REBALANCE_IN_PROGRESS",)
"""A response with one of these errors tells a member to rejoin: the broker-side sign
of a classic rebalance. Every member sends one JoinGroup per rebalance, so joins per
second is members x rebalances."""

REBALANCE_LABEL = "rebalance in progress"

METRIC_DOCS: Mapping[str, str] = {
    "count": "rows (request/response pairs, plus lone requests or responses)",
    "rate_per_s": "count divided by the span of the whole capture, per second",
    "errors": f"rows whose status is one of {', '.join(ERROR_STATUSES)}",
    "error_rate": "errors divided by count",
    "unanswered": "requests that expected a response and got none in the capture",
    "p50_ms / p90_ms / p99_ms": "latency percentiles, exact, linear interpolation",
    "max_ms": "largest latency",
    "bytes_in": "request bytes on the wire, client to broker (size prefix included)",
    "bytes_out": "response bytes on the wire, broker to client (size prefix included)",
    "records": "records carried by Produce requests and Fetch responses",
    "throttled": "responses with throttle_time_ms > 0 (the broker applied a quota)",
}


def percentile_column(q: float) -> str:
    return f"p{round(q * 100):d}_ms"


def _sql_in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


SQL_COLUMNS: Mapping[str, str] = {
    "event_time": f"coalesce({EVENT_TIME_COLUMNS[0]}, {EVENT_TIME_COLUMNS[1]})",
    "is_error": f"status IN ({_sql_in(ERROR_STATUSES)})",
    "is_unanswered": f"status IN ({_sql_in(UNANSWERED_STATUSES)})",
    "bytes_in": f"coalesce({BYTES_IN_COLUMN}, 0)",
    "bytes_out": f"coalesce({BYTES_OUT_COLUMN}, 0)",
    "records": "coalesce(records, 0)",
    "throttled": "coalesce(throttle_ms, 0) > 0",
}
"""The per-row definitions above as Spark SQL expressions over the pairs columns
(``F.expr(SQL_COLUMNS["is_error"])``)."""

SQL_AGGREGATES: Mapping[str, str] = {
    "count": "count(1)",
    "errors": f"sum(CASE WHEN {SQL_COLUMNS['is_error']} THEN 1 ELSE 0 END)",
    "unanswered": f"sum(CASE WHEN {SQL_COLUMNS['is_unanswered']} THEN 1 ELSE 0 END)",
    **{percentile_column(q): f"percentile({LATENCY_COLUMN}, {q})" for q in PERCENTILES},
    "max_ms": f"max({LATENCY_COLUMN})",
    "bytes_in": f"sum({SQL_COLUMNS['bytes_in']})",
    "bytes_out": f"sum({SQL_COLUMNS['bytes_out']})",
    "records": f"sum({SQL_COLUMNS['records']})",
    "throttled": f"sum(CASE WHEN {SQL_COLUMNS['throttled']} THEN 1 ELSE 0 END)",
}
"""The breakdown columns as Spark SQL aggregates, e.g.
``SELECT api_name, api_version, <expr> AS <name>, ... GROUP BY api_name, api_version``;
then ``error_rate = errors / count`` and ``rate_per_s = count / span`` (span from
``min``/``max`` of ``SQL_COLUMNS["event_time"]`` over the whole input). Spark's
``percentile`` is exact with linear interpolation, like pandas here; its
``percentile_approx`` is not."""

# ---------------------------------------------------------------------------
# Preparation
# ---------------------------------------------------------------------------


@dataclass
class _Memo:
    frame: pd.DataFrame
    values: dict[str, Any] = field(default_factory=dict)
    kept_bytes: int = 0  # of the values with a row per frame row


_memo: _Memo | None = None

MEMO_MAX_BYTES = 32 << 20
"""Most bytes of derived columns ``memoized`` keeps for one frame. They cost about 160
bytes a row: the report of 259,000 long-poll pairs keeps all but the time buckets
(its page in 2.8 s instead of 3.6 s), one of 1.5M pairs a few (all of them, 230 MiB,
would break issue #21's memory bound)."""


@contextmanager
def memoized(df: pd.DataFrame) -> Iterator[None]:
    """Within it, what every metric derives from ``df`` itself is computed once and
    copied to each caller: the columns (event times, labels, the prepared metric
    columns, service latency: ``_per_frame``), up to ``MEMO_MAX_BYTES`` of them, and the
    small summaries (the captures' spans: ``_summary_per_frame``). A report computes
    them from the same frame dozens of times (each a few pandas steps over every row).
    Only for a frame not changed meanwhile (the report's: its sections only read it);
    other frames (subsets) are computed as usual."""
    global _memo
    outer = _memo
    if outer is None or outer.frame is not df:
        _memo = _Memo(df)
    try:
        yield
    finally:
        _memo = outer


_T = TypeVar("_T")


def _per_frame(fn: Callable[[pd.DataFrame], _T]) -> Callable[[pd.DataFrame], _T]:
    """``fn(df)``, a value with a row per row of ``df``, once per ``memoized`` frame
    while the memo has room for it (``MEMO_MAX_BYTES``); a copy to each caller (callers
    may change what they get: the shared value stays as computed)."""
    return _once_per_frame(fn, _row_bytes)


def _summary_per_frame(fn: Callable[[pd.DataFrame], _T]) -> Callable[[pd.DataFrame], _T]:
    """``fn(df)``, a value whose size does not grow with ``df``'s rows, once per
    ``memoized`` frame; a copy to each caller."""
    return _once_per_frame(fn, lambda value: 0)


def _row_bytes(value: object) -> int:
    """The memory of a Series' or DataFrame's values; text held as references to
    shared strings (the labels) counts its references only, not the strings again."""
    usage = getattr(value, "memory_usage", None)
    if usage is None:
        return 0
    used = usage(index=False, deep=False)
    return int(used.sum()) if hasattr(used, "sum") else int(used)


def _once_per_frame(
    fn: Callable[[pd.DataFrame], _T], size: Callable[[object], int]
) -> Callable[[pd.DataFrame], _T]:
    @functools.wraps(fn)
    def once(df: pd.DataFrame) -> _T:
        memo = _memo
        if memo is None or memo.frame is not df:
            return fn(df)
        if fn.__name__ not in memo.values:
            value = fn(df)
            cost = size(value)
            if memo.kept_bytes + cost > MEMO_MAX_BYTES:
                return value  # computed again by the next caller
            memo.kept_bytes += cost
            memo.values[fn.__name__] = value
        value = memo.values[fn.__name__]
        return value.copy() if hasattr(value, "copy") else value

    return once


@_per_frame
def event_time(df: pd.DataFrame) -> pd.Series:
    """Each row's time (see ``EVENT_TIME_COLUMNS``), tz-aware UTC."""
    first, second = EVENT_TIME_COLUMNS
    return df[first].fillna(df[second])


@_summary_per_frame
def span_seconds(df: pd.DataFrame) -> float:
    """First to last event time, seconds; 0.0 for fewer than two timed rows."""
    times = event_time(df).dropna()
    if len(times) < 2:
        return 0.0
    return float((times.max() - times.min()).total_seconds())


def as_float(series: pd.Series) -> pd.Series:
    """Nullable numbers -> float64 with NaN, what numpy-style quantiles expect (a new
    array: callers may change it)."""
    import numpy as np
    import pandas as pd

    try:
        # one conversion (an Arrow or masked column's values, nulls as NaN), not two
        values = series.to_numpy(dtype="float64", na_value=np.nan, copy=True)
    except (TypeError, ValueError):  # e.g. numbers written as text: pandas parses them
        return series.astype("Float64").astype("float64")
    return pd.Series(values, index=series.index, name=series.name)


def _label(series: pd.Series, missing: str = MISSING_LABEL) -> pd.Series:
    import pandas as pd

    if isinstance(series.dtype, pd.CategoricalDtype):  # decoded by Arrow: text_series
        codes = series.cat.codes.to_numpy().astype("int64")
        names = [str(c) for c in series.cat.categories]
        codes[codes < 0] = len(names)
        return text_series(codes, [*names, missing], series.index, str(series.name))
    return series.astype("object").where(series.notna(), missing).astype(str)


def _orphan_or(df: pd.DataFrame, missing: str) -> pd.Series:
    orphan = df["status"].eq(ORPHAN_STATUS).fillna(False).astype(bool)
    return orphan.map({True: ORPHAN_LABEL, False: missing})


@_per_frame
def api_labels(df: pd.DataFrame) -> pd.Series:
    """api_name, or what a missing one means (``ORPHAN_LABEL``, ``UNKNOWN_API_LABEL``)."""
    return _named_or(df, "api_name", UNKNOWN_API_LABEL)


@_per_frame
def client_labels(df: pd.DataFrame) -> pd.Series:
    """client_id, or what a missing one means (``ORPHAN_LABEL``, ``MISSING_LABEL``)."""
    return _named_or(df, "client_id", MISSING_LABEL)


def _named_or(df: pd.DataFrame, column: str, missing: str) -> pd.Series:
    """``column`` as text (object dtype), a missing value named by ``_orphan_or``."""
    import numpy as np
    import pandas as pd

    values = df[column]
    if not isinstance(values.dtype, pd.CategoricalDtype):
        named = values.astype("object")
        return named.where(named.notna(), _orphan_or(df, missing)).astype(str)
    # The core's categories: each name made text once, not once per row (a long
    # capture has a million rows and a few dozen names); a missing one takes one of
    # the two labels appended after them
    codes = values.cat.codes.to_numpy().astype(np.int64)
    names = [str(c) for c in values.cat.categories] + [ORPHAN_LABEL, missing]
    absent = codes < 0
    if absent.any():
        orphan = df["status"].eq(ORPHAN_STATUS).fillna(False).to_numpy(dtype=bool)
        codes[absent] = np.where(orphan[absent], len(names) - 2, len(names) - 1)
    return text_series(codes, names, df.index, column)


def text_series(
    codes: np.ndarray, names: list[str], index: pd.Index, name: str, dtype: str = "str"
) -> pd.Series:
    """The text ``names[code]`` of each row (a code below 0: null) as a pandas text
    column of ``dtype`` (``str`` or ``string``), decoded by Arrow: a million rows of a
    few dozen names in milliseconds, where a Series of Python strings takes a tenth of a
    second or more."""
    import pandas as pd
    import pyarrow as pa

    indices = pa.array(codes, mask=codes < 0)
    text = pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string()))
    return pd.Series(pd.array(text.dictionary_decode(), dtype=dtype), index=index, name=name)


def as_text(series: pd.Series, dtype: str = "string") -> pd.Series:
    """``series.astype(dtype)``; a categorical decoded by Arrow (``text_series``)."""
    import pandas as pd

    if not isinstance(series.dtype, pd.CategoricalDtype):
        return series.astype(dtype)
    names = [str(c) for c in series.cat.categories]
    codes = series.cat.codes.to_numpy()
    return text_series(codes, names, series.index, str(series.name), dtype)


def _labels_of(df: pd.DataFrame, column: str) -> pd.Series:
    if column == "api_name":
        return api_labels(df)
    if column == "client_id":
        return client_labels(df)
    return _label(df[column])


def broker_label(ip: object, port: object) -> str:
    if ip is None or (isinstance(ip, float) and math.isnan(ip)):
        return MISSING_LABEL
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"{host}:{port}"


@_per_frame
def broker_labels(df: pd.DataFrame) -> pd.Series:
    """``broker_label`` of each row, formatted once per distinct (broker_ip,
    broker_port): a long capture has tens of thousands of rows and a few brokers."""
    import numpy as np
    import pandas as pd

    keys = ["broker_ip", "broker_port"]
    ids = df.groupby(keys, dropna=False, observed=True, sort=False).ngroup().to_numpy()
    _, first = np.unique(ids, return_index=True)  # a row of each pair, by pair id
    pairs = df[keys].iloc[first]
    labels = np.array(
        [broker_label(ip, port) for ip, port in pairs.itertuples(index=False)], dtype=object
    )
    return pd.Series(labels[ids] if len(ids) else [], index=df.index, dtype=object)


@_per_frame
def _prepared(df: pd.DataFrame) -> pd.DataFrame:
    """The columns every metric needs, with plain dtypes."""
    import pandas as pd

    return pd.DataFrame(
        {
            "event_time": event_time(df),
            "is_error": df["status"].isin(ERROR_STATUSES).astype(bool),
            "is_unanswered": df["status"].isin(UNANSWERED_STATUSES).astype(bool),
            "latency": as_float(df[LATENCY_COLUMN]),
            "bytes_in": as_float(df[BYTES_IN_COLUMN]).fillna(0.0),
            "bytes_out": as_float(df[BYTES_OUT_COLUMN]).fillna(0.0),
            "records": as_float(df["records"]).fillna(0.0),
            "throttled": (as_float(df["throttle_ms"]).fillna(0.0) > 0),
        },
        index=df.index,
    )


def _keyed(df: pd.DataFrame, by: str) -> tuple[pd.DataFrame, list[str]]:
    """Prepared columns plus the breakdown key columns of ``by``."""
    if by not in GROUP_KEYS:
        raise ValueError(f"unknown breakdown {by!r}: use one of {', '.join(GROUP_KEYS)}")
    frame = _prepared(df)
    if by == "api":
        frame["api_name"] = api_labels(df)
        frame["api_version"] = df["api_version"].astype("Int64")
    elif by == "client":
        frame["client_id"] = client_labels(df)
    elif by == "broker":
        frame["broker_ip"] = df["broker_ip"]
        frame["broker_port"] = df["broker_port"].astype("Int64")
    else:
        frame = _by_topic(frame, df["topics"])
    return frame, list(GROUP_KEYS[by])


def _by_topic(frame: pd.DataFrame, topics: pd.Series) -> pd.DataFrame:
    """``frame``'s rows once per topic its pair touches (a topic named twice, once),
    in row order, with a ``topic`` column; rows without a topic left out."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = topics.array.__arrow_array__() if isinstance(topics.dtype, pd.ArrowDtype) else None
    if (
        lists is not None
        and pa.types.is_list(lists.type)
        and pa.types.is_string(lists.type.value_type)
    ):
        # The core's Arrow lists, flattened at once (a long capture has tens of
        # thousands of rows: a Python call per row took a tenth of the topics table)
        names = pc.list_flatten(lists)
        if names.null_count == 0:
            # each (row, topic) once, in order of first appearance, on the topics'
            # dictionary codes: each name made text once, not once per row
            parent = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
            encoded = pc.dictionary_encode(names).combine_chunks()
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            texts = np.array(encoded.dictionary.to_pylist(), dtype=object)
            _, first = np.unique(parent * max(len(texts), 1) + codes, return_index=True)
            first.sort()
            picked = frame.iloc[parent[first]]
            return picked.assign(topic=texts[codes[first]])
    # As objects: mapped in its own Arrow list dtype, a frame with no topic at all
    # would become list<null>, which explode cannot fill.
    frame = frame.assign(topic=topics.astype(object).map(_topic_list)).explode("topic")
    return frame[frame["topic"].notna()]


def _topic_list(value: Iterable[object] | float | None) -> list[str]:
    if value is None or isinstance(value, float):  # a missing cell: None or NaN
        return []
    # A pair naming a topic twice (two partitions) touches it once.
    return list(dict.fromkeys(str(t) for t in value))


# ---------------------------------------------------------------------------
# Breakdowns
# ---------------------------------------------------------------------------

BREAKDOWN_COLUMNS: tuple[str, ...] = (
    "count",
    "rate_per_s",
    "errors",
    "error_rate",
    "unanswered",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
    "bytes_in",
    "bytes_out",
    "records",
    "throttled",
)


def breakdown(df: pd.DataFrame, by: str) -> pd.DataFrame:
    """count, rate, errors, latency percentiles and bytes per group of ``by``.

    ``by`` is one of ``GROUP_KEYS``: api, client, broker, topic. One row per group,
    the key columns first (for brokers also a ``broker`` "host:port" label), sorted
    by count (largest first) then key.
    """
    import pandas as pd

    frame, keys = _keyed(df, by)
    if frame.empty:
        label = ["broker"] if by == "broker" else []
        return pd.DataFrame(columns=[*label, *keys, *BREAKDOWN_COLUMNS])
    grouped = frame.groupby(keys, dropna=False, sort=True)
    # the sums in one grouped pass, not one per column (a named aggregation each)
    summed = ["is_error", "is_unanswered", "bytes_in", "bytes_out", "records", "throttled"]
    sums = grouped[summed].sum()
    count = grouped.size()
    quantiles = grouped["latency"].quantile(list(PERCENTILES)).unstack()
    span = span_seconds(df)
    # every column at once (a column added at a time was most of this table's time)
    out = pd.DataFrame(
        {
            "count": count,
            "errors": sums["is_error"].astype("int64"),
            "unanswered": sums["is_unanswered"].astype("int64"),
            "max_ms": grouped["latency"].max(),
            **{
                column: sums[column].astype("int64")
                for column in ("bytes_in", "bytes_out", "records", "throttled")
            },
            **{
                percentile_column(q): quantiles[q] if q in quantiles else float("nan")
                for q in PERCENTILES
            },
            "rate_per_s": count / span if span > 0 else float("nan"),
            "error_rate": sums["is_error"] / count,
        }
    )
    out = out.reset_index()
    out = out.sort_values(["count", *keys], ascending=[False, *([True] * len(keys))])
    if by == "broker":
        # One readable column as well, "host:port" ([v6]:port), for tables and charts.
        out.insert(
            0,
            "broker",
            [
                broker_label(ip, port)
                for ip, port in zip(out["broker_ip"], out["broker_port"], strict=True)
            ],
        )
        keys = ["broker", *keys]
    return out[[*keys, *BREAKDOWN_COLUMNS]].reset_index(drop=True)


def per_api(df: pd.DataFrame) -> pd.DataFrame:
    return breakdown(df, "api")


def per_client(df: pd.DataFrame) -> pd.DataFrame:
    return breakdown(df, "client")


def per_broker(df: pd.DataFrame) -> pd.DataFrame:
    return breakdown(df, "broker")


def per_topic(df: pd.DataFrame) -> pd.DataFrame:
    return breakdown(df, "topic")


def latency_summary(df: pd.DataFrame) -> dict[str, float]:
    """Percentiles and max of all measured latencies, in ms (NaN when none)."""
    return _summary(as_float(df[LATENCY_COLUMN]))


# ---------------------------------------------------------------------------
# Time series
# ---------------------------------------------------------------------------

_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 360, 720, 1440)
_BUCKETS_S: tuple[int, ...] = (1, 2, 5, 10, 15, 30, *(60 * m for m in _MINUTES))


def auto_bucket_seconds(span_s: float, max_buckets: int = 600) -> int:
    """Smallest round bucket width that keeps a time series within ``max_buckets``."""
    for width in _BUCKETS_S:
        if span_s / width < max_buckets:
            return width
    return max(_BUCKETS_S[-1], math.ceil(span_s / max_buckets))


MAX_BUCKETS = 200_000
"""A time series longer than this is refused (memory): ask for wider buckets."""


def _bucketed(df: pd.DataFrame, bucket_s: int | None) -> tuple[pd.DataFrame, int]:
    span = span_seconds(df)
    width = bucket_s if bucket_s is not None else auto_bucket_seconds(span)
    if width <= 0:
        raise ValueError(f"bucket width must be positive, got {width}")
    if span / width >= MAX_BUCKETS:
        raise ValueError(
            f"{width} s buckets over a {span:,.0f} s capture make more than {MAX_BUCKETS:,} "
            f"buckets: use wider buckets (or bucket_s=None to pick a width)"
        )
    if width == auto_bucket_seconds(span):  # the report's charts: the same each time
        return _auto_buckets(df), width
    return _in_buckets(df, width), width


def _in_buckets(df: pd.DataFrame, width: int) -> pd.DataFrame:
    """The prepared columns of the timed rows, with each row's bucket start."""
    frame = _prepared(df)
    frame = frame[frame["event_time"].notna()]
    frame["bucket"] = frame["event_time"].dt.floor(f"{width}s")
    return frame


@_per_frame
def _auto_buckets(df: pd.DataFrame) -> pd.DataFrame:
    """``_in_buckets`` at the automatic width (``memoized``: the time series of a report
    bucket the same rows eight times)."""
    return _in_buckets(df, auto_bucket_seconds(span_seconds(df)))


def _full_index(frame: pd.DataFrame, width: int) -> pd.DatetimeIndex:
    import pandas as pd

    return pd.date_range(
        frame["bucket"].min(), frame["bucket"].max(), freq=f"{width}s", name="time"
    )


TIMESERIES_COLUMNS: tuple[str, ...] = (
    "requests",
    "errors",
    "unanswered",
    "bytes_in",
    "bytes_out",
    "records",
    "requests_per_s",
    "bytes_in_per_s",
    "bytes_out_per_s",
    "p50_ms",
    "p99_ms",
)


def timeseries(df: pd.DataFrame, bucket_s: int | None = None) -> pd.DataFrame:
    """Per-bucket totals (``bucket_s`` seconds; None, the default, picks a round width
    that keeps at most 600 buckets), indexed by bucket start (UTC). Empty buckets between
    the first and last are present with zero counts."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    if frame.empty:
        return pd.DataFrame(
            columns=list(TIMESERIES_COLUMNS), index=pd.DatetimeIndex([], tz="UTC", name="time")
        )
    grouped = frame.groupby("bucket")
    out = grouped.agg(
        requests=("is_error", "size"),
        errors=("is_error", "sum"),
        unanswered=("is_unanswered", "sum"),
        bytes_in=("bytes_in", "sum"),
        bytes_out=("bytes_out", "sum"),
        records=("records", "sum"),
    )
    q = grouped["latency"].quantile([0.5, 0.99]).unstack()
    out["p50_ms"] = q[0.5]
    out["p99_ms"] = q[0.99]
    index = _full_index(frame, width)
    out = out.reindex(index)
    for col in ("requests", "errors", "unanswered", "bytes_in", "bytes_out", "records"):
        out[col] = out[col].fillna(0).astype("int64")
    out["requests_per_s"] = out["requests"] / width
    out["bytes_in_per_s"] = out["bytes_in"] / width
    out["bytes_out_per_s"] = out["bytes_out"] / width
    out.attrs["bucket_s"] = width
    return out[list(TIMESERIES_COLUMNS)]


def timeseries_by(
    df: pd.DataFrame, column: str = "api_name", bucket_s: int | None = None
) -> pd.DataFrame:
    """Rows per bucket, one column per value of ``column`` (e.g. per API)."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    if frame.empty:
        return pd.DataFrame(index=pd.DatetimeIndex([], tz="UTC", name="time"))
    # the whole frame's labels (once per report: ``memoized``), of the timed rows
    frame["key"] = _labels_of(df, column).loc[frame.index]
    counts = frame.groupby(["bucket", "key"]).size().unstack(fill_value=0)
    counts = counts.reindex(_full_index(frame, width), fill_value=0)
    counts.columns.name = column
    counts.attrs["bucket_s"] = width
    return counts.astype("int64")


RATE_UNITS: tuple[tuple[float, str], ...] = ((1.0, "per s"), (60.0, "per min"), (3600.0, "per h"))
"""Rates are shown per second, or per minute or hour when per second would read 0.00."""


def rate_unit(df: pd.DataFrame) -> tuple[float, str]:
    """(seconds per unit, label) for every rate of one report: the shortest unit in
    which the whole capture's request rate is at least 1 (per hour at most)."""
    span = span_seconds(df)
    rate = len(df) / span if span > 0 else math.inf
    for seconds, label in RATE_UNITS:
        if rate * seconds >= 1:
            return seconds, label
    return RATE_UNITS[-1]


LATENCY_SERIES_COLUMNS: tuple[str, ...] = ("time", "key", "count", "p50_ms", "p99_ms")


def latency_timeseries(
    df: pd.DataFrame, by: str = "api", bucket_s: int | None = None
) -> pd.DataFrame:
    """p50 and p99 of ``service_ms`` (long-poll waits left out) per bucket and per API
    (``by="api"``) or broker (``by="broker"``), long format: one row per bucket and key
    that has answered pairs. ``attrs["bucket_s"]`` is the width."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    service = service_latency(df)["service_ms"]
    if by == "api":
        keys = api_labels(df)
    elif by == "broker":
        keys = broker_labels(df)
    else:
        raise ValueError(f"unknown latency series {by!r}: use api or broker")
    frame = frame.assign(key=keys.loc[frame.index], service=service.loc[frame.index])
    frame = frame[frame["service"].notna()]
    if frame.empty:
        out = pd.DataFrame(columns=list(LATENCY_SERIES_COLUMNS))
    else:
        grouped = frame.groupby(["bucket", "key"], sort=True)["service"]
        q = grouped.quantile([0.5, 0.99]).unstack()
        out = pd.DataFrame(
            {"count": grouped.size(), "p50_ms": q[0.5], "p99_ms": q[0.99]}
        ).reset_index()
        out = out.rename(columns={"bucket": "time"})[list(LATENCY_SERIES_COLUMNS)]
    out.attrs["bucket_s"] = width
    return out


def error_label(rows: pd.DataFrame) -> pd.Series:
    """Error name, or the status when there is no Kafka error code (``malformed``)."""
    names = rows["error_name"].astype("object")
    return names.where(names.notna(), rows["status"].astype("object")).astype(str)


def error_timeseries(df: pd.DataFrame, bucket_s: int | None = None) -> pd.DataFrame:
    """Error rows per bucket, one column per error name (``error_label``), most frequent
    first; buckets span the whole capture."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    errors = frame[frame["is_error"]]
    if errors.empty:
        out = pd.DataFrame(index=pd.DatetimeIndex([], tz="UTC", name="time"))
    else:
        labels = error_label(df.loc[errors.index])
        counts = errors.assign(error=labels).groupby(["bucket", "error"]).size()
        out = counts.unstack(fill_value=0).reindex(_full_index(frame, width), fill_value=0)
        ranked = sorted(out.columns, key=lambda c: (-int(out[c].sum()), str(c)))
        out = out[ranked].astype("int64")
    out.attrs["bucket_s"] = width
    return out


def throttle_timeseries(df: pd.DataFrame, bucket_s: int | None = None) -> pd.DataFrame:
    """Per bucket: ``responses``, ``throttled`` (throttle_ms > 0), ``max_throttle_ms``
    and ``total_throttle_ms`` (the broker's quota delays asked of clients)."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    cols = ["responses", "throttled", "max_throttle_ms", "total_throttle_ms"]
    if frame.empty:
        out = pd.DataFrame(columns=cols, index=pd.DatetimeIndex([], tz="UTC", name="time"))
        out.attrs["bucket_s"] = width
        return out
    throttle = as_float(df.loc[frame.index, "throttle_ms"])
    frame = frame.assign(throttle=throttle.fillna(0.0), answered=throttle.notna())
    grouped = frame.groupby("bucket")
    out = grouped.agg(
        responses=("answered", "sum"),
        throttled=("throttled", "sum"),
        max_throttle_ms=("throttle", "max"),
        total_throttle_ms=("throttle", "sum"),
    ).reindex(_full_index(frame, width), fill_value=0)
    out = out.fillna(0)
    for col in ("responses", "throttled"):
        out[col] = out[col].astype("int64")
    out.attrs["bucket_s"] = width
    return out[cols]


def connection_timeseries(df: pd.DataFrame, bucket_s: int | None = None) -> pd.DataFrame:
    """Connection churn per bucket: ``opened`` (connections whose first Kafka message is
    in the bucket), ``closed`` (whose last one is) and ``active`` (with messages both
    at or before the bucket's end and at or after its start). A connection is a
    (capture, stream); its first message is not its TCP handshake when the capture
    started after it was opened."""
    import numpy as np
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    cols = ["opened", "closed", "active"]
    if frame.empty:
        out = pd.DataFrame(columns=cols, index=pd.DatetimeIndex([], tz="UTC", name="time"))
        out.attrs["bucket_s"] = width
        return out
    # per connection, its first and last bucket by number (0: the first bucket), on
    # arrays: a connection is told apart by codes, not by a string per row
    connection = _connection_ids(df.loc[frame.index, "capture"], df.loc[frame.index, "stream"])
    index = _full_index(frame, width)
    since = (frame["bucket"] - index[0]).to_numpy()
    number = (since // np.timedelta64(width, "s")).astype(np.int64)
    first = np.full(int(connection.max()) + 1, len(index), dtype=np.int64)
    last = np.full(len(first), -1, dtype=np.int64)
    np.minimum.at(first, connection, number)
    np.maximum.at(last, connection, number)
    out = pd.DataFrame(
        {
            "opened": np.bincount(first, minlength=len(index))[: len(index)],
            "closed": np.bincount(last, minlength=len(index))[: len(index)],
        },
        index=index,
    )
    started = out["opened"].cumsum()
    ended_before = out["closed"].cumsum() - out["closed"]
    out["active"] = started - ended_before
    out = out.astype("int64")
    out.attrs["bucket_s"] = width
    return out[cols]


def _connection_ids(capture: pd.Series, stream: pd.Series) -> np.ndarray:
    """One id (0 .. n - 1) per (capture, stream) of the rows; a missing capture is the
    capture "" and a missing stream a stream of its own, as when grouped as text."""
    import numpy as np
    import pandas as pd

    captures, names = pd.factorize(capture)
    if (captures < 0).any():
        blank = np.flatnonzero(np.asarray(names, dtype=object) == "")
        captures = np.where(captures < 0, blank[0] if len(blank) else len(names), captures)
    streams, _ = pd.factorize(stream, use_na_sentinel=False)
    pairs = captures.astype(np.int64) * (int(streams.max()) + 1 if len(streams) else 1) + streams
    return pd.factorize(pairs)[0]


def latency_matrix(df: pd.DataFrame, value: str = "p99_ms") -> pd.DataFrame:
    """Broker x API: ``value`` (p50_ms, p99_ms of ``service_ms``, or ``count``) with one
    row per API (busiest first) and one column per broker; NaN where a broker answered
    no pair of that API."""
    import pandas as pd

    frame = pd.DataFrame(
        {
            "api": api_labels(df),
            "broker": broker_labels(df),
            "service": service_latency(df)["service_ms"],
        }
    )
    frame = frame[frame["service"].notna()]
    if frame.empty:
        return pd.DataFrame()
    grouped = frame.groupby(["api", "broker"])["service"]
    if value == "count":
        cells = grouped.size().astype("float64")
    elif value in ("p50_ms", "p99_ms"):
        cells = grouped.quantile(0.5 if value == "p50_ms" else 0.99)
    else:
        raise ValueError(f"unknown matrix value {value!r}: use count, p50_ms or p99_ms")
    out = cells.unstack()
    volume = frame["api"].value_counts()
    apis = sorted(out.index, key=lambda a: (-int(volume[a]), str(a)))
    brokers = sorted(out.columns, key=lambda b: (-int((frame["broker"] == b).sum()), str(b)))
    return out.loc[apis, brokers]


# ---------------------------------------------------------------------------
# Several captures
# ---------------------------------------------------------------------------


CAPTURE_COLUMNS: tuple[str, ...] = ("capture", "first", "last", "span_s", "rows", "connections")


@_summary_per_frame
def per_capture(df: pd.DataFrame) -> pd.DataFrame:
    """One row per capture file: first and last event time, span, rows, connections;
    in time order."""
    import pandas as pd

    if df.empty:
        return pd.DataFrame(columns=list(CAPTURE_COLUMNS))
    frame = pd.DataFrame(
        {
            "capture": df["capture"].astype("object").fillna(MISSING_LABEL).astype(str),
            "time": event_time(df),
            "connection": df["stream"].astype("object"),
        }
    )
    grouped = frame.groupby("capture", sort=True)
    out = grouped.agg(
        first=("time", "min"),
        last=("time", "max"),
        rows=("time", "size"),
        connections=("connection", "nunique"),
    ).reset_index()
    out["span_s"] = (out["last"] - out["first"]).dt.total_seconds().fillna(0.0)
    out = out.sort_values(["first", "capture"], na_position="last")
    return out[list(CAPTURE_COLUMNS)].reset_index(drop=True)


TIMELINE_GAP_FACTOR = 2.0
"""Captures are drawn on one timeline when together they cover at least half of the
merged span; otherwise (captures days or years apart) the merged timeline would be
mostly empty buckets, and time charts show the busiest capture only."""


@_summary_per_frame
def timeline_capture(df: pd.DataFrame) -> str | None:
    """The capture the time charts should show alone, or None when one shared timeline
    of every capture reads well (one capture, or captures close in time)."""
    if df["capture"].nunique(dropna=False) < 2:
        return None
    captures = per_capture(df)
    if len(captures) < 2:
        return None
    covered = float(captures["span_s"].sum())
    merged = span_seconds(df)
    if merged <= 3600 or merged <= TIMELINE_GAP_FACTOR * covered:
        return None
    busiest = captures.sort_values(["rows", "capture"], ascending=[False, True]).iloc[0]
    return str(busiest["capture"])


# ---------------------------------------------------------------------------
# Errors, slow and unanswered requests
# ---------------------------------------------------------------------------


def error_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"].isin(ERROR_STATUSES).astype(bool)]


@_per_frame
def error_table(df: pd.DataFrame) -> pd.DataFrame:
    """The error rows (``error_rows``), indexed as in ``df``: each one's ``error``
    (``error_label``), ``api`` (``api_labels``), ``client`` (``client_labels``) and
    ``time`` (``event_time``). The per-row columns are those of the whole frame, picked:
    a report's frame has them once (``memoized``), and its errors table and chart read
    them three times."""
    import pandas as pd

    picked = df["status"].isin(ERROR_STATUSES).astype(bool)
    return pd.DataFrame(
        {
            "error": error_label(df[["error_name", "status"]][picked]),
            "api": api_labels(df)[picked],
            "client": client_labels(df)[picked],
            "time": event_time(df)[picked],
        }
    )


def top_errors(df: pd.DataFrame, n: int = 10) -> pd.DataFrame:
    """Most frequent errors: error name (or the status when there is no Kafka error
    code, e.g. ``malformed``), count, share of all rows, the APIs and clients."""
    import pandas as pd

    frame = error_table(df)
    cols = ["error", "count", "share", "apis", "client_ids", "first_seen", "last_seen"]
    if frame.empty:
        return pd.DataFrame(columns=cols)
    grouped = frame.groupby("error", sort=True)
    out = grouped.agg(
        count=("api", "size"),
        apis=("api", lambda s: ", ".join(sorted(set(s)))),
        client_ids=("client", lambda s: ", ".join(sorted(set(s)))),
        first_seen=("time", "min"),
        last_seen=("time", "max"),
    ).reset_index()
    out["share"] = out["count"] / len(df)
    out = out.sort_values(["count", "error"], ascending=[False, True]).head(n)
    return out[cols].reset_index(drop=True)


PAIR_COLUMNS: tuple[str, ...] = (
    "capture",
    "request_time",
    "api_name",
    "api_version",
    "client_id",
    "broker",
    "topics",
    "latency_ms",
    "status",
    "error_name",
    "request_size",
    "response_size",
    "stream",
    "correlation_id",
)
"""Columns of the slowest/unanswered tables: enough to find the pair in Wireshark
(stream, correlation id) and to see what it was."""


def _pair_table(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.copy()
    out["broker"] = [
        broker_label(ip, port)
        for ip, port in zip(rows["broker_ip"], rows["broker_port"], strict=True)
    ]
    return out[list(PAIR_COLUMNS)]


def slowest(df: pd.DataFrame, n: int = 20) -> pd.DataFrame:
    """The ``n`` pairs with the largest latency, slowest first."""
    timed = df[df[LATENCY_COLUMN].notna()]
    order = as_float(timed[LATENCY_COLUMN]).sort_values(ascending=False, kind="stable")
    return _pair_table(timed.loc[order.index[:n]]).reset_index(drop=True)


def unanswered(df: pd.DataFrame) -> pd.DataFrame:
    """Requests without a response, in time order."""
    # of the columns ``_pair_table`` reads only
    needed = [c for c in (*PAIR_COLUMNS, "broker_ip", "broker_port") if c in df.columns]
    rows = df[needed][df["status"].isin(UNANSWERED_STATUSES).astype(bool)]
    rows = rows.sort_values("request_time", kind="stable")
    return _pair_table(rows).reset_index(drop=True)


# ---------------------------------------------------------------------------
# Long polls: Fetch latency that is waiting, not service
# ---------------------------------------------------------------------------


MAX_WAIT_COLUMN = "max_wait_ms"
"""Optional pairs column: the Fetch/ShareFetch request's max_wait_ms. Used when present."""

SERVICE_LATENCY_RULE = (
    "Fetch and ShareFetch are long polls: the broker holds the request up to its "
    "max_wait_ms while it has too little data. fetch_wait classifies each answered one: "
    "data = it returned records; empty_poll = no records and it took at least "
    f"{LONG_POLL_WAIT_SHARE:.0%} of max_wait_ms (without a known max_wait_ms: no records "
    "and no error); early = no records, returned sooner (or with an error). service_ms is "
    "latency minus the wait: max(latency - max_wait_ms, 0) for an empty poll whose "
    "max_wait_ms is known, unknown (left out) for one whose max_wait_ms is not, and the "
    "latency itself for every other pair. Headline latency percentiles use service_ms; "
    "long-poll waits are shown on their own."
)


def _is_long_poll_api(df: pd.DataFrame) -> pd.Series:
    keys = df["api_key"].astype("Int64")
    return keys.isin([int(k) for k in LONG_POLLS]).fillna(False).astype(bool)


def _max_wait(df: pd.DataFrame) -> pd.Series:
    """max_wait_ms per row as float (NaN where unknown, or the column is absent).
    A negative or zero max wait is no wait to subtract: unknown."""
    import pandas as pd

    if MAX_WAIT_COLUMN not in df.columns:
        return pd.Series(math.nan, index=df.index, dtype="float64")
    wait = as_float(df[MAX_WAIT_COLUMN])
    return wait.where(wait > 0)


def fetch_wait_by_rule(df: pd.DataFrame) -> pd.Series:
    """``SERVICE_LATENCY_RULE``'s long-poll class in pandas, from the raw columns: the
    oracle of the native core's ``fetch_wait`` column (and how frames built from
    records without it get one)."""
    import pandas as pd

    latency = as_float(df[LATENCY_COLUMN])
    fetched = (as_float(df["records"]).fillna(0) > 0) | (as_float(df["record_bytes"]).fillna(0) > 0)
    wait = _max_wait(df)
    failed = df["status"].isin(ERROR_STATUSES).fillna(False).astype(bool)
    waited_out = latency >= LONG_POLL_WAIT_SHARE * wait
    # Without max_wait_ms, an empty answer without error is the best sign of a poll
    # that waited: brokers answer errors at once.
    empty_poll = waited_out.where(wait.notna(), ~failed)
    out = pd.Series(pd.NA, index=df.index, dtype="string")
    polls = _is_long_poll_api(df) & latency.notna()
    out[polls & fetched] = FETCH_WAIT_DATA
    out[polls & ~fetched & empty_poll] = FETCH_WAIT_EMPTY_POLL
    out[polls & ~fetched & ~empty_poll] = FETCH_WAIT_EARLY
    return out


def service_latency_by_rule(df: pd.DataFrame) -> pd.DataFrame:
    """``fetch_wait`` and ``service_ms`` by ``SERVICE_LATENCY_RULE`` in pandas: the
    oracle of the native core's columns."""
    import pandas as pd

    classes = fetch_wait_by_rule(df)
    latency = as_float(df[LATENCY_COLUMN])
    wait = _max_wait(df)
    poll = classes.eq(FETCH_WAIT_EMPTY_POLL).fillna(False).astype(bool)
    service = latency.copy()
    service[poll] = (latency[poll] - wait[poll]).clip(lower=0.0)
    return pd.DataFrame({"fetch_wait": classes, "service_ms": service}, index=df.index)


def _has_columns(df: pd.DataFrame, names: tuple[str, ...]) -> bool:
    """Whether the frame carries the core's derived columns. Frames without them (built
    from hand-made records, or read from a file written before they existed) are
    answered by the pandas rules, which compute the same values."""
    return all(n in df.columns for n in names) and (
        df.empty or any(df[n].notna().any() for n in names)
    )


@_per_frame
def fetch_wait(df: pd.DataFrame) -> pd.Series:
    """Each answered Fetch/ShareFetch's long-poll class (``FETCH_WAIT_CLASSES``), null
    for every other row: the ``fetch_wait`` column (``SERVICE_LATENCY_RULE``)."""
    if not _has_columns(df, ("fetch_wait",)):
        return fetch_wait_by_rule(df)
    return as_text(df["fetch_wait"])


@_per_frame
def service_latency(df: pd.DataFrame) -> pd.DataFrame:
    """``fetch_wait`` and ``service_ms`` (float, NaN where unknown) for every row:
    latency without the long-poll wait (``SERVICE_LATENCY_RULE``), read from the
    columns the core computed."""
    import pandas as pd

    if not _has_columns(df, ("fetch_wait", "service_ms")):
        return service_latency_by_rule(df)
    # The core filled both columns (fetch_wait null on every row of a capture without
    # a long poll: not a frame without the column, so not ``fetch_wait``'s fallback)
    return pd.DataFrame(
        {"fetch_wait": as_text(df["fetch_wait"]), "service_ms": as_float(df["service_ms"])},
        index=df.index,
    )


def service_summary(df: pd.DataFrame) -> dict[str, float]:
    """Headline percentiles and max of ``service_ms`` (long-poll waits left out), ms."""
    return _summary(service_latency(df)["service_ms"])


def long_poll_summary(df: pd.DataFrame) -> dict[str, float]:
    """How many answered fetches were empty long polls, and percentiles of their raw
    latency (the time the broker held them): ``polls``, ``p50_ms``... ``max_ms``."""
    classes = service_latency(df)["fetch_wait"]
    polls = as_float(df[LATENCY_COLUMN])[classes.eq(FETCH_WAIT_EMPTY_POLL).fillna(False)]
    return {"polls": float(len(polls)), **_summary(polls)}


def _summary(values: pd.Series) -> dict[str, float]:
    lat = values.dropna()
    out = {
        percentile_column(q): float(lat.quantile(q)) if len(lat) else math.nan for q in PERCENTILES
    }
    out["max_ms"] = float(lat.max()) if len(lat) else math.nan
    return out


# ---------------------------------------------------------------------------
# Head-of-line queueing per connection
# ---------------------------------------------------------------------------

QUEUEING_RULE = (
    "A broker reads one request per connection at a time: it mutes the connection while "
    "a request is in flight, and for throttle_ms more after a throttled response. "
    "queue_ms is how long a request waited behind earlier requests of its connection: "
    "max(0, latest earlier response_time + that response's throttle_ms - request_time), "
    "over the connection's earlier requests, in the order they were sent (a response whose "
    "request is not in the capture counts as earlier than the requests answered after it "
    "arrived, as Kafka answers in order). inflight is how many earlier requests of the "
    "connection had no response yet when it was sent (one never answered stays in flight; "
    "Produce with acks=0 expects none and never is). Both are null for rows without a "
    "request."
)


def queueing(df: pd.DataFrame) -> pd.DataFrame:
    """``queue_ms`` (float) and ``inflight`` (Int64) per row (``QUEUEING_RULE``), read
    from the columns the core computed."""
    import pandas as pd

    if not _has_columns(df, ("queue_ms", "inflight")):
        return queueing_by_rule(df)
    return pd.DataFrame(
        {"queue_ms": as_float(df["queue_ms"]), "inflight": df["inflight"].astype("Int64")},
        index=df.index,
    )


def queueing_by_rule(df: pd.DataFrame) -> pd.DataFrame:
    """``queue_ms`` (float) and ``inflight`` (Int64) by ``QUEUEING_RULE`` in pandas: the
    oracle of the native core's columns. A response without a request is taken before
    the first request whose turn comes after it arrived: a request's turn is when it and
    every earlier request of the connection were settled (answered; sent, for those that
    expect no answer; never, for unanswered ones)."""
    import heapq

    import numpy as np
    import pandas as pd

    request = df["request_time"]
    has_request = request.notna().to_numpy(dtype=bool)
    times = event_time(df).dropna()
    origin = times.min() if len(times) else None
    req_ns = _ns_since(request, origin)
    resp_ns = _ns_since(df["response_time"], origin)
    throttle_ns = (as_float(df["throttle_ms"]).fillna(0.0).clip(lower=0.0) * 1e6).to_numpy()
    status = df["status"]
    waits_for_answer = ~status.isin((Status.NO_RESPONSE.value,)).fillna(False).to_numpy(dtype=bool)
    settles_when_sent = (
        status.isin((Status.NO_RESPONSE.value, Status.MALFORMED.value))
        .fillna(False)
        .to_numpy(dtype=bool)
    )
    settled = np.where(~np.isnan(resp_ns), resp_ns, np.where(settles_when_sent, req_ns, math.inf))
    frame = pd.DataFrame(
        {
            "capture": df["capture"].astype("object").fillna(""),
            "stream": df["stream"].astype("Float64").astype("float64").fillna(-1.0),
            "pre": has_request,
            "t": np.where(has_request, req_ns, resp_ns),
            # Requests completed in the same instant: the client numbered them in order.
            "corr": as_float(df["correlation_id"]).to_numpy(),
            "pos": np.arange(len(df)),
            "turn": np.where(has_request, settled, resp_ns),
        }
    )
    # Requests in the order they were sent; each one's turn is the latest settling of
    # it and the requests before it. Responses without a request go by arrival.
    sent_order = frame[frame["pre"]].sort_values(
        ["capture", "stream", "t", "corr", "pos"], kind="stable"
    )
    turns = sent_order.groupby(["capture", "stream"], sort=False)["turn"].cummax()
    frame.loc[turns.index, "turn"] = turns
    order = frame.sort_values(
        ["capture", "stream", "turn", "pre", "t", "corr", "pos"], kind="stable"
    )
    queue = np.full(len(df), np.nan)
    inflight = np.full(len(df), -1, dtype=np.int64)
    connection: tuple[object, float] | None = None
    busy_until = -math.inf
    pending: list[float] = []
    for cap, stream, pos in zip(order["capture"], order["stream"], order["pos"], strict=True):
        if (cap, stream) != connection:
            connection, busy_until, pending = (cap, stream), -math.inf, []
        sent = req_ns[pos]
        if has_request[pos]:
            while pending and pending[0] <= sent:
                heapq.heappop(pending)
            inflight[pos] = len(pending)
            queue[pos] = max(0.0, busy_until - sent) / 1e6
        answered = not math.isnan(resp_ns[pos])
        if answered:
            busy_until = max(busy_until, resp_ns[pos] + throttle_ns[pos])
            heapq.heappush(pending, resp_ns[pos])
        elif has_request[pos] and waits_for_answer[pos]:
            heapq.heappush(pending, math.inf)
    counts = pd.arrays.IntegerArray(np.maximum(inflight, 0), mask=inflight < 0)
    return pd.DataFrame({"queue_ms": queue, "inflight": counts}, index=df.index)


def _ns_since(times: pd.Series, origin: pd.Timestamp | None) -> np.ndarray:
    """Timestamps as float nanoseconds since ``origin``, NaN where missing. Relative to
    the capture's start, so float stays exact to the nanosecond (since the epoch it
    would round to 256 ns)."""
    import numpy as np

    values = times.to_numpy(dtype="datetime64[ns]", na_value=np.datetime64("NaT"))
    missing = np.isnat(values)
    base = np.datetime64(0, "ns") if origin is None else origin.tz_localize(None).to_datetime64()
    out = (values - base).astype("int64").astype("float64")
    out[missing] = np.nan
    return out


QUEUEING_COLUMNS: tuple[str, ...] = (
    "client_id",
    "connections",
    "requests",
    "pipelined",
    "mean_inflight",
    "max_inflight",
    "queued",
    "queue_total_ms",
    "queue_p99_ms",
    "queue_max_ms",
)


def queueing_per_client(df: pd.DataFrame) -> pd.DataFrame:
    """Pipelining depth and head-of-line time per client id: requests sent while others
    were in flight (``pipelined``), mean and max ``inflight``, requests that waited
    (``queued``: queue_ms > 0) and their total, p99 and max queue_ms. Longest total
    queueing first."""
    import pandas as pd

    q = queueing(df)
    frame = pd.DataFrame(
        {
            "client_id": client_labels(df),
            # one id per (capture, stream): what is counted, without a string per row
            "connection": df.groupby(["capture", "stream"], dropna=False, observed=True)
            .ngroup()
            .to_numpy(),
            "inflight": q["inflight"].astype("Float64").astype("float64"),
            "queue_ms": q["queue_ms"],
        }
    )
    frame = frame[frame["inflight"].notna()]
    if frame.empty:
        return pd.DataFrame(columns=list(QUEUEING_COLUMNS))
    frame = frame.assign(pipelined=frame["inflight"] > 0, queued=frame["queue_ms"] > 0)
    grouped = frame.groupby("client_id", sort=True)
    out = grouped.agg(
        connections=("connection", "nunique"),
        requests=("inflight", "size"),
        pipelined=("pipelined", "sum"),
        mean_inflight=("inflight", "mean"),
        max_inflight=("inflight", "max"),
        queued=("queued", "sum"),
        queue_total_ms=("queue_ms", "sum"),
        queue_max_ms=("queue_ms", "max"),
    )
    out["queue_p99_ms"] = grouped["queue_ms"].quantile(0.99)
    for col in ("pipelined", "queued", "max_inflight"):
        out[col] = out[col].astype("int64")
    out = out.reset_index().sort_values(
        ["queue_total_ms", "requests", "client_id"], ascending=[False, False, True]
    )
    return out[list(QUEUEING_COLUMNS)].reset_index(drop=True)


# ---------------------------------------------------------------------------
# Consumer-group and share-group activity
# ---------------------------------------------------------------------------


@_per_frame
def group_activity_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of group APIs (``GROUP_ACTIVITY``) with their protocol and activity (once
    per report: ``memoized``; its chart and table read them)."""
    import numpy as np
    import pandas as pd

    keys = df["api_key"].astype("Int64")
    mask = keys.isin(list(GROUP_ACTIVITY)).fillna(False).astype(bool)
    rows = df[["api_key", "error_name", "status"]][mask]
    # each API's (protocol, activity) looked up once, not once per row
    apis, row_api = np.unique(rows["api_key"].to_numpy(dtype=np.int64), return_inverse=True)
    activity = [GROUP_ACTIVITY[int(k)] for k in apis]
    named = row_api.reshape(-1).tolist()
    return pd.DataFrame(
        {
            "time": event_time(df)[mask],
            "protocol": [activity[i][0] for i in named],
            "activity": [activity[i][1] for i in named],
            "rebalance": rows["error_name"].isin(REBALANCE_ERROR_NAMES).fillna(False).astype(bool),
            "status": rows["status"],
        },
        index=rows.index,
    )


def group_activity(df: pd.DataFrame, bucket_s: int | None = None) -> pd.DataFrame:
    """Group API calls per bucket, one column per activity (see ``GROUP_ACTIVITY``)
    plus ``rebalance in progress`` (responses carrying ``REBALANCE_ERROR_NAMES``).
    Buckets span the whole capture so the chart lines up with the others."""
    import pandas as pd

    frame, width = _bucketed(df, bucket_s)
    acts = group_activity_rows(df)
    if frame.empty or acts.empty:
        return pd.DataFrame(index=pd.DatetimeIndex([], tz="UTC", name="time"))
    acts = acts[acts["time"].notna()].copy()
    acts["bucket"] = acts["time"].dt.floor(f"{width}s")
    counts = acts.groupby(["bucket", "activity"]).size().unstack(fill_value=0)
    order = [a for a in dict.fromkeys(v[1] for v in GROUP_ACTIVITY.values()) if a in counts]
    counts = counts[order]
    counts[REBALANCE_LABEL] = acts.groupby("bucket")["rebalance"].sum()
    counts = counts.reindex(_full_index(frame, width), fill_value=0).fillna(0)
    counts.attrs["bucket_s"] = width
    return counts.astype("int64")


def group_activity_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Totals per group protocol and activity: calls, errors, rebalance signals."""
    import pandas as pd

    acts = group_activity_rows(df)
    cols = ["protocol", "activity", "calls", "errors", "rebalance_in_progress"]
    if acts.empty:
        return pd.DataFrame(columns=cols)
    acts = acts.assign(is_error=acts["status"].isin(ERROR_STATUSES).astype(bool))
    out = acts.groupby(["protocol", "activity"], sort=True).agg(
        calls=("status", "size"),
        errors=("is_error", "sum"),
        rebalance_in_progress=("rebalance", "sum"),
    )
    return out.reset_index()[cols]


# ---------------------------------------------------------------------------
# Capture facts
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CaptureFacts:
    """What a capture contains, for the report's header."""

    captures: tuple[str, ...]
    first: pd.Timestamp | None
    last: pd.Timestamp | None
    span_s: float
    rows: int
    statuses: Mapping[str, int]
    connections: int
    brokers: tuple[str, ...]
    client_ips: tuple[str, ...]
    client_ids: tuple[str, ...]
    api_versions: tuple[str, ...]
    kafka_floor: str | None
    """Oldest Apache Kafka release that supports every API version answered without
    error by any broker: the newest broker is at least that release."""
    kafka_floors: Mapping[str, str | None]
    """The same per broker address."""


def capture_facts(df: pd.DataFrame) -> CaptureFacts:
    times = event_time(df).dropna()
    # Distinct rows first: a long capture has tens of thousands of pairs, few kinds.
    pairs = df[["api_key", "api_version"]].dropna().drop_duplicates()
    seen = sorted({(int(k), int(v)) for k, v in pairs.itertuples(index=False)})
    # Only versions the broker answered without error prove what it supports (a
    # client probing ApiVersions v99 says nothing about the broker).
    ok = df["status"].eq("ok").fillna(False).astype(bool)
    accepted = df[["broker_ip", "broker_port", "api_key", "api_version"]][ok]
    accepted_pairs = accepted.dropna().drop_duplicates()
    by_broker: dict[str, set[tuple[int, int]]] = {}
    for ip, port, key, version in accepted_pairs.itertuples(index=False):
        by_broker.setdefault(broker_label(ip, port), set()).add((int(key), int(version)))
    supported = sorted(set().union(*by_broker.values()))
    # keep="last": a version named twice takes its last row's name, as row order would
    named = df[["api_key", "api_version", "api_name"]].dropna().drop_duplicates(keep="last")
    names = {(int(k), int(v)): str(n) for k, v, n in named.itertuples(index=False)}
    brokers = df[["broker_ip", "broker_port"]].drop_duplicates()
    return CaptureFacts(
        captures=tuple(sorted(set(df["capture"].dropna().unique().astype(str)))),
        first=times.min() if len(times) else None,
        last=times.max() if len(times) else None,
        span_s=span_seconds(df),
        rows=len(df),
        statuses={str(k): int(v) for k, v in df["status"].value_counts().sort_index().items()},
        connections=len(df[["capture", "stream"]].drop_duplicates()),
        brokers=tuple(sorted({broker_label(ip, p) for ip, p in brokers.itertuples(index=False)})),
        client_ips=tuple(sorted(set(df["client_ip"].dropna().unique().astype(str)))),
        client_ids=tuple(sorted(set(df["client_id"].dropna().unique().astype(str)))),
        api_versions=tuple(f"{names.get((k, v), f'api {k}')} v{v}" for k, v in seen),
        kafka_floor=kafka_release_floor(supported),
        kafka_floors={b: kafka_release_floor(sorted(v)) for b, v in sorted(by_broker.items())},
    )


def _release_table() -> Mapping[tuple[int, ...], Mapping[int, tuple[int, int]]]:
    # The API version ranges each Apache Kafka release supports, shipped with the
    # bundled specs (copied by scripts/specs/generate.py from kafka-python's
    # maintained table, so the package needs no client library to read it).
    from dissector.protocol.bundled import release_ranges

    return release_ranges()


def kafka_release_floor(seen: Iterable[tuple[int, int]]) -> str | None:
    """Oldest Kafka release that supports every (api_key, api_version) in ``seen``.

    ``"newer than X"`` when a version is past what the newest release in the table
    supports; keys the table never lists (e.g. telemetry) are left out. None when
    nothing seen is in the table.
    """
    table = _release_table()
    releases = sorted(table)
    known_keys = {key for ranges in table.values() for key in ranges}
    floor_index = -1
    for key, version in seen:
        if key not in known_keys:
            continue
        for i, release in enumerate(releases):
            lo_hi = table[release].get(key)
            if lo_hi is not None and lo_hi[0] <= version <= lo_hi[1]:
                floor_index = max(floor_index, i)
                break
        else:
            if version > max(r[key][1] for r in table.values() if key in r):
                return "newer than " + ".".join(map(str, releases[-1]))
            # A version only older releases had, below a later minimum: it still
            # needs no newer broker than the first release listing the key.
            first = next(i for i, r in enumerate(releases) if key in table[r])
            floor_index = max(floor_index, first)
    if floor_index < 0:
        return None
    return ".".join(map(str, releases[floor_index]))


def describe_kafka_floor(floor: str | None, broker: str = "broker") -> str:
    """``capture_facts().kafka_floor`` (or one of ``kafka_floors``) as a sentence."""
    if floor is None:
        return f"{broker}: not enough answered requests to tell its Kafka version"
    if floor.startswith("newer than "):
        return (
            f"{broker} is newer than Apache Kafka {floor.removeprefix('newer than ')} "
            "(it answered API versions that release does not have)"
        )
    return (
        f"{broker} is Apache Kafka {floor} or newer (oldest release supporting every API "
        "version it answered without error)"
    )


__all__ = [
    "BYTES_IN_COLUMN",
    "BYTES_OUT_COLUMN",
    "ERROR_STATUSES",
    "EVENT_TIME_COLUMNS",
    "GROUP_ACTIVITY",
    "GROUP_KEYS",
    "LATENCY_COLUMN",
    "METRIC_DOCS",
    "PERCENTILES",
    "PERCENTILE_INTERPOLATION",
    "RATE_BASIS",
    "REBALANCE_ERROR_NAMES",
    "UNANSWERED_STATUSES",
    "CaptureFacts",
    "breakdown",
    "capture_facts",
    "describe_kafka_floor",
    "group_activity",
    "group_activity_summary",
    "kafka_release_floor",
    "latency_summary",
    "per_api",
    "per_broker",
    "per_client",
    "per_topic",
    "slowest",
    "timeseries",
    "timeseries_by",
    "top_errors",
    "unanswered",
]
