"""The fleet summaries' partial aggregates, built inside a task from its pairs.

Every summary table of the ``spark`` command (``aggregate.summary_tables``) is made of
counts, sums, minima, maxima, distinct counts and latency percentiles per group. All
but the percentiles merge exactly: the sum of the tasks' sums is the fleet's sum. A
task therefore folds its captures' pairs, batch by batch, into a few small *partial*
tables (pyarrow's hash aggregation over the Arrow batches it writes anyway), writes
them beside the pairs, and Spark adds the partials of every task
(``aggregate.merge_summaries``): Spark never scans the pairs again. On a long-poll
capture the partials hold about a fifth of the pairs' rows, in a few columns.

Percentiles merge through a latency histogram with logarithmic buckets: a latency
``v > 0`` falls in bucket ``floor(log(v) / log(GAMMA))``, so every value of a bucket is
within a factor ``GAMMA`` of the others (``NONPOSITIVE_BUCKET`` holds the zeros). Each
bucket keeps its count and its smallest and largest value. The p-th percentile is the
value of rank ``ceil(p * n)`` (the smallest value with at least a share p of the values
at or below it, numpy's ``inverted_cdf``); the merge finds the bucket holding that rank
and answers its smallest value when the rank is the bucket's first, its largest when
the last (both exact), else the middle of the two, within ``(GAMMA - 1) / 2`` (0.5%)
of the exact value. The same buckets merge in any order, so the result does not depend
on how captures fall into tasks.

Needs pyarrow, never pyspark: the Spark side of the same tables is ``aggregate``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dissector.analytics.stats import ERROR_STATUSES, UNANSWERED_STATUSES
from dissector.schema import Status

if TYPE_CHECKING:
    import pyarrow as pa

GAMMA = 1.01
"""Ratio of a latency bucket's upper bound to its lower bound."""
LOG_GAMMA = math.log(GAMMA)
NONPOSITIVE_BUCKET = -(2**31)
"""The bucket of latencies of 0 (or below: a clock step between two packets)."""

ANSWERED: tuple[str, ...] = (Status.OK.value, Status.ERROR.value, Status.UNKNOWN.value)
API_KEYS: tuple[str, ...] = ("api_key", "api_name", "api_version")
BROKER_KEYS: tuple[str, ...] = ("broker_ip", "broker_port")
CLIENT_KEYS: tuple[str, ...] = ("client_id",)
TOPIC_KEYS: tuple[str, ...] = ("topic",)
GROUP_SETS: dict[str, tuple[str, ...]] = {
    "api": API_KEYS,
    "broker": BROKER_KEYS,
    "client": CLIENT_KEYS,
    "topic": TOPIC_KEYS,
}
"""The latency and error tables' groupings, by the name their partial rows carry in
``set``: per API, per broker, per client, per topic (a pair counts once for each
topic it touches)."""
GROUP_KEYS: tuple[str, ...] = (*API_KEYS, *BROKER_KEYS, *CLIENT_KEYS, *TOPIC_KEYS)
"""Every grouping's keys: a partial row of one set has the others' null."""
TOP_ERROR_KEYS: tuple[str, ...] = ("api_name", "error_code", "error_name")
UNANSWERED_KEYS: tuple[str, ...] = (*BROKER_KEYS, "api_name", "api_version")

# The partial tables, by the folder each task writes them to.
GROUPS = "groups"
LATENCY = "latency"
ERRORS = "errors"
UNANSWERED = "unanswered"
THROUGHPUT = "throughput"
PARTIAL_TABLES: tuple[str, ...] = (GROUPS, LATENCY, ERRORS, UNANSWERED, THROUGHPUT)

GROUP_VALUES: tuple[str, ...] = (
    "requests",
    "latencies",
    "latency_sum",
    "latency_max",
    "answered",
    "errors",
    "unanswered",
    "error_codes",
)
"""A group's partial sums (``latency_max`` a maximum)."""
THROUGHPUT_SUMS: tuple[tuple[str, str], ...] = (
    ("request_size", "request_bytes"),
    ("response_size", "response_bytes"),
    ("records", "records"),
    ("record_bytes", "record_bytes"),
)
"""(pairs column, throughput column) of the byte and record sums."""


def partial_schemas() -> dict[str, pa.Schema]:
    """Each partial table's Arrow schema, in Spark's types (the pairs' types for keys)."""
    import pyarrow as pa

    from dissector.table.frame import pairs_arrow_schema

    pairs = pairs_arrow_schema()
    key = {name: pairs.field(name).type for name in pairs.names}
    key["topic"] = pa.string()
    ts = pa.timestamp("us", tz="UTC")

    def keys(names: tuple[str, ...]) -> list[pa.Field]:
        return [pa.field(n, key[n]) for n in names]

    count = pa.int64()
    return {
        GROUPS: pa.schema(
            [
                pa.field("set", pa.string()),
                *keys(GROUP_KEYS),
                *(pa.field(n, count) for n in ("requests", "latencies")),
                pa.field("latency_sum", pa.float64()),
                pa.field("latency_max", pa.float64()),
                *(pa.field(n, count) for n in GROUP_VALUES[4:]),
            ]
        ),
        LATENCY: pa.schema(
            [
                pa.field("set", pa.string()),
                *keys(GROUP_KEYS),
                pa.field("bucket", pa.int32()),
                pa.field("n", count),
                pa.field("vmin", pa.float64()),
                pa.field("vmax", pa.float64()),
            ]
        ),
        ERRORS: pa.schema(
            [*keys((*TOP_ERROR_KEYS, *BROKER_KEYS, "capture")), pa.field("pairs", count)]
        ),
        UNANSWERED: pa.schema(
            [
                *keys(UNANSWERED_KEYS),
                *keys(("capture",)),
                pa.field("unanswered", count),
                pa.field("first_request", ts),
                pa.field("last_request", ts),
            ]
        ),
        THROUGHPUT: pa.schema(
            [
                pa.field("window_start", ts),
                *keys(BROKER_KEYS),
                *(pa.field(n, count) for n in ("pairs", "answered", "errors")),
                *(pa.field(out, count) for _, out in THROUGHPUT_SUMS),
            ]
        ),
    }


# ------------------------------------------------------------------ one batch


def latency_buckets(latency: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each latency's bucket (int32; null where the latency is null)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.fill_null(latency, 0.0).to_numpy(zero_copy_only=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        buckets = np.floor(np.log(values) / LOG_GAMMA)
    buckets = np.where(values > 0, buckets, NONPOSITIVE_BUCKET).astype(np.int32)
    return pa.array(buckets, mask=pc.is_null(latency).to_numpy(zero_copy_only=False))


def _flags(pairs: pa.Table) -> dict[str, pa.Array]:
    """Per pair, 0/1 int64: answered, an error, unanswered; and whether it has a latency."""
    import pyarrow as pa
    import pyarrow.compute as pc

    status = pairs.column("status")

    def one_if(mask: pa.ChunkedArray) -> pa.ChunkedArray:
        return pc.cast(pc.fill_null(mask, False), pa.int64())

    return {
        "answered": one_if(pc.is_in(status, pa.array(ANSWERED))),
        "errors": one_if(pc.is_in(status, pa.array(ERROR_STATUSES))),
        "unanswered": one_if(pc.is_in(status, pa.array(UNANSWERED_STATUSES))),
        "latencies": one_if(pc.is_valid(pairs.column("latency_ms"))),
    }


def _with_topics(pairs: pa.Table) -> pa.Table:
    """One row per (pair, distinct topic of its ``topics``) of ``_SET_VALUES`` and the
    topic; pairs without topics drop out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topics = pairs.column("topics").combine_chunks()
    parent = pc.list_parent_indices(topics)
    flat = pa.table({"_pair": parent, "topic": pc.list_flatten(topics)})
    distinct = flat.group_by(["_pair", "topic"], use_threads=False).aggregate([])
    rows = pairs.select(list(_SET_VALUES)).take(distinct.column("_pair"))
    return rows.append_column("topic", distinct.column("topic"))


_FLAG_NAMES = ("answered", "errors", "unanswered", "latencies")
_SET_VALUES = ("latency_ms", "error_count", "bucket", *_FLAG_NAMES)
"""The columns a set's partials read besides its keys."""


def _set_partials(
    rows: pa.Table, name: str, schemas: dict[str, pa.Schema]
) -> tuple[pa.Table, pa.Table]:
    """(``GROUPS`` rows, ``LATENCY`` rows) of set ``name``: ``rows`` (its keys and
    ``_SET_VALUES``) grouped by its own keys alone, the other sets' keys null. Grouped
    set by set, on one to three keys, not on every set's keys over all sets' rows at
    once: a seventh of the time, the same rows."""
    import pyarrow.compute as pc

    own = list(GROUP_SETS[name])
    rows = rows.select([*own, *_SET_VALUES])  # the others' keys and topics: not copied
    some = pc.ScalarAggregateOptions(min_count=1)
    groups = rows.group_by(own, use_threads=False).aggregate(
        [
            ([], "count_all"),
            ("latencies", "sum"),
            ("latency_ms", "sum", some),
            ("latency_ms", "max"),
            ("answered", "sum"),
            ("errors", "sum"),
            ("unanswered", "sum"),
            ("error_count", "sum", some),
        ]
    )
    timed = rows.filter(pc.is_valid(rows.column("latency_ms")))
    latency = timed.group_by([*own, "bucket"], use_threads=False).aggregate(
        [([], "count_all"), ("latency_ms", "min"), ("latency_ms", "max")]
    )
    return (
        _of_set(_by_name(groups, own, GROUP_VALUES), name, schemas[GROUPS]),
        _of_set(_by_name(latency, [*own, "bucket"], ("n", "vmin", "vmax")), name, schemas[LATENCY]),
    )


def _of_set(columns: dict[str, pa.ChunkedArray], name: str, schema: pa.Schema) -> pa.Table:
    """A set's aggregated columns (by name) as rows of ``schema``: ``set`` its name,
    the keys of the other sets null."""
    import pyarrow as pa

    n = len(next(iter(columns.values())))
    given = {"set": pa.array([name] * n, pa.string()), **columns}
    others = {f.name: pa.nulls(n, f.type) for f in schema if f.name not in given}
    return _in_schema({**given, **others}, schema)


def group_partials(
    pairs: pa.Table, flags: dict[str, pa.Array], schemas: dict[str, pa.Schema]
) -> tuple[pa.Table, pa.Table]:
    """(``GROUPS`` rows, ``LATENCY`` rows) of one batch of pairs (``flags``: its
    ``_flags``)."""
    import pyarrow as pa

    keys = [k for k in GROUP_KEYS if k != "topic"]
    flagged = pairs.select([*keys, "topics", "latency_ms", "error_count"])
    for name, column in flags.items():
        flagged = flagged.append_column(name, column)
    flagged = flagged.append_column("bucket", latency_buckets(pairs.column("latency_ms")))
    made = [
        _set_partials(flagged if name != "topic" else _with_topics(flagged), name, schemas)
        for name in GROUP_SETS
    ]
    return pa.concat_tables([g for g, _ in made]), pa.concat_tables([lat for _, lat in made])


def _named(
    aggregated: pa.Table, keys: list[str], values: tuple[str, ...], schema: pa.Schema
) -> pa.Table:
    """pyarrow's ``group_by().aggregate()`` output (the aggregates first, named
    ``<column>_<function>``, then the keys) as ``schema``'s columns, in order."""
    return _in_schema(_by_name(aggregated, keys, values), schema)


def _in_schema(columns: Mapping[str, pa.Array | pa.ChunkedArray], schema: pa.Schema) -> pa.Table:
    """``schema``'s columns (each by name in ``columns``, cast to its type), in order."""
    import pyarrow as pa

    return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _by_name(
    aggregated: pa.Table, keys: list[str], values: tuple[str, ...]
) -> dict[str, pa.ChunkedArray]:
    """``group_by().aggregate()`` output's columns: the keys by their names, the
    aggregates by ``values`` (in their order)."""
    results = [n for n in aggregated.column_names if n not in keys]
    named = dict(zip(values, results, strict=True))
    return {
        **{k: aggregated.column(k) for k in keys},
        **{v: aggregated.column(named[v]) for v in values},
    }


def error_partials(pairs: pa.Table, schema: pa.Schema) -> pa.Table:
    """``ERRORS`` rows: answered pairs with a non-zero error code, counted per (API,
    error, broker, capture): what the fleet's top errors and their brokers and
    captures are counted from."""
    import pyarrow as pa
    import pyarrow.compute as pc

    answered = pc.is_in(pairs.column("status"), pa.array(ANSWERED))
    failing = pc.and_kleene(answered, pc.not_equal(pairs.column("error_code"), 0))
    keys = [*TOP_ERROR_KEYS, *BROKER_KEYS, "capture"]
    rows = pairs.select(keys).filter(pc.fill_null(failing, False))
    counted = rows.group_by(keys, use_threads=False).aggregate([([], "count_all")])
    return _named(counted, keys, ("pairs",), schema)


def unanswered_partials(pairs: pa.Table, schema: pa.Schema) -> pa.Table:
    """``UNANSWERED`` rows: unanswered requests per (broker, API, capture), with the
    first and last request time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = [*UNANSWERED_KEYS, "capture"]
    lost = pairs.select([*keys, "request_time"])
    lost = lost.filter(pc.is_in(pairs.column("status"), pa.array(UNANSWERED_STATUSES)))
    counted = lost.group_by(keys, use_threads=False).aggregate(
        [([], "count_all"), ("request_time", "min"), ("request_time", "max")]
    )
    return _named(counted, keys, ("unanswered", "first_request", "last_request"), schema)


def window_starts(pairs: pa.Table, window_us: int) -> pa.Array:
    """Each pair's tumbling window (start, UTC-aligned as Spark's ``window``) by its
    request time, else its response time; null when it has neither."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    at = pc.coalesce(pairs.column("request_time"), pairs.column("response_time"))
    micros = pc.cast(at, pa.int64())
    values = pc.fill_null(micros, 0).to_numpy(zero_copy_only=False)
    starts = values - np.mod(values, window_us)  # a floor, also before 1970
    mask = pc.is_null(micros).to_numpy(zero_copy_only=False)
    return pa.array(starts, mask=mask).cast(pa.timestamp("us", tz="UTC"))


def throughput_partials(
    pairs: pa.Table, flags: dict[str, pa.Array], window_us: int, schema: pa.Schema
) -> pa.Table:
    """``THROUGHPUT`` rows: per window and broker, pairs, answered, errors and the sums
    (``flags``: the batch's ``_flags``)."""
    import pyarrow.compute as pc

    keys = ["window_start", *BROKER_KEYS]
    rows = pairs.select([*BROKER_KEYS, *(column for column, _ in THROUGHPUT_SUMS)])
    rows = rows.append_column("window_start", window_starts(pairs, window_us))
    for name in ("answered", "errors"):
        rows = rows.append_column(f"_{name}", flags[name])
    rows = rows.filter(pc.is_valid(rows.column("window_start")))
    some = pc.ScalarAggregateOptions(min_count=1)
    counted = rows.group_by(keys, use_threads=False).aggregate(
        [([], "count_all"), ("_answered", "sum"), ("_errors", "sum")]
        + [(column, "sum", some) for column, _ in THROUGHPUT_SUMS]
    )
    values = ("pairs", "answered", "errors", *(out for _, out in THROUGHPUT_SUMS))
    return _named(counted, keys, values, schema)


# ------------------------------------------------------------------ a task's


@dataclass
class SummaryPartials:
    """A task's partial tables, folded from each batch of pairs it writes (``add``:
    the pairs in the Parquet schema, ``frame.pairs_table``) and merged by this task
    when it ends (``tables``), so that each task writes one small file per table.

    ``window_us``: the throughput windows' length, microseconds."""

    window_us: int
    pieces: dict[str, list[pa.Table]] = field(default_factory=dict)
    _schemas: dict[str, pa.Schema] = field(default_factory=partial_schemas)

    def add(self, pairs: pa.Table) -> None:
        if not pairs.num_rows:
            return
        flags = _flags(pairs)
        groups, latency = group_partials(pairs, flags, self._schemas)
        made = {
            GROUPS: groups,
            LATENCY: latency,
            ERRORS: error_partials(pairs, self._schemas[ERRORS]),
            UNANSWERED: unanswered_partials(pairs, self._schemas[UNANSWERED]),
            THROUGHPUT: throughput_partials(
                pairs, flags, self.window_us, self._schemas[THROUGHPUT]
            ),
        }
        for name, table in made.items():
            if table.num_rows:
                self.pieces.setdefault(name, []).append(table)

    def tables(self) -> Iterator[tuple[str, pa.Table]]:
        """(partial table, its rows) of everything added, each merged to one row per key."""
        import pyarrow as pa

        for name in PARTIAL_TABLES:
            pieces = self.pieces.get(name, [])
            if pieces:
                table = pa.concat_tables(pieces)
                yield name, table if len(pieces) == 1 else merge_partial(name, table)
        self.pieces = {}


MERGES: dict[str, tuple[tuple[str, str], ...]] = {
    GROUPS: (
        ("requests", "sum"),
        ("latencies", "sum"),
        ("latency_sum", "sum"),
        ("latency_max", "max"),
        ("answered", "sum"),
        ("errors", "sum"),
        ("unanswered", "sum"),
        ("error_codes", "sum"),
    ),
    LATENCY: (("n", "sum"), ("vmin", "min"), ("vmax", "max")),
    ERRORS: (("pairs", "sum"),),
    UNANSWERED: (("unanswered", "sum"), ("first_request", "min"), ("last_request", "max")),
    THROUGHPUT: (
        ("pairs", "sum"),
        ("answered", "sum"),
        ("errors", "sum"),
        *((out, "sum") for _, out in THROUGHPUT_SUMS),
    ),
}
"""How rows of a partial table with the same key merge (the merge of
``aggregate.merge_summaries`` applies the same rules in Spark)."""


def merge_partial(name: str, table: pa.Table) -> pa.Table:
    """Rows of partial table ``name`` with equal keys merged into one."""
    import pyarrow.compute as pc

    merges = MERGES[name]
    values = {column for column, _ in merges}
    keys = [n for n in table.column_names if n not in values]
    some = pc.ScalarAggregateOptions(min_count=1)
    merged = table.group_by(keys, use_threads=False).aggregate(
        [(column, how, some) if how == "sum" else (column, how) for column, how in merges]
    )
    return _named(merged, keys, tuple(column for column, _ in merges), table.schema)
