"""Fleet summary tables: Spark merges partial aggregates into small DataFrames.

The tables are built in two steps (``dissector.spark.partials`` says why): *partial*
rows (counts, sums, extremes and a latency histogram per group), then their merge by
Spark. In the ``spark`` command each task writes the partials of its captures beside
their pairs and Spark merges those files (``summary_tables``): the pairs are not read
again. From a pairs DataFrame (``summaries``: ``load()``, the rows that go through
Spark) each pair is its own partial row (``pair_partials``), merged the same way.

Conventions shared by every table:

* a group key that is null (e.g. ``client_id`` of an orphan response) is a group of
  its own, as in ``pandas.groupby(dropna=False)``;
* rows flagging a capture that failed to decode are not pairs and are left out;
* "answered" means ``status`` is ``ok`` or ``error`` (a response was matched);
* "errors" and "unanswered" follow ``dissector.analytics.stats`` (``ERROR_STATUSES``,
  ``UNANSWERED_STATUSES``), the rules of the offline report and the CLI summary, and
  an error rate is errors over all rows of the group, as there;
* the p-th latency percentile is the value of rank ``ceil(p * n)`` among the group's
  ``n`` latencies (nulls ignored; numpy's ``inverted_cdf``), exact when that value is
  the smallest or largest of its histogram bucket, else within 0.5% of it
  (``partials.GAMMA``).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from dissector.analytics import stats
from dissector.analytics.stats import ERROR_STATUSES, EVENT_TIME_COLUMNS, UNANSWERED_STATUSES
from dissector.spark.partials import (
    ANSWERED,
    BROKER_KEYS,
    ERRORS,
    GROUP_KEYS,
    GROUP_SETS,
    GROUPS,
    LATENCY,
    LOG_GAMMA,
    MERGES,
    NONPOSITIVE_BUCKET,
    THROUGHPUT,
    THROUGHPUT_SUMS,
    TOP_ERROR_KEYS,
    UNANSWERED,
    UNANSWERED_KEYS,
)
from dissector.spark.tasks import CAPTURE_FAILED

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

PERCENTILES = stats.PERCENTILES  # the fleet's percentiles are pandas' (analytics.stats)
DEFAULT_WINDOW = "1 minute"
SUMMARY_TABLES: tuple[str, ...] = (
    "latency_by_api",
    "latency_by_broker",
    "latency_by_client",
    "latency_by_topic",
    "errors_by_api",
    "errors_by_broker",
    "top_errors",
    "unanswered_requests",
    "unanswered_summary",
    "throughput",
    "throughput_by_broker",
)
"""The tables ``summaries`` returns, in order."""
DEFAULT_TOP = 20


def drop_capture_failures(pairs: DataFrame) -> DataFrame:
    """Without the rows that flag a capture that failed to decode (they are not pairs)."""
    from pyspark.sql import functions as F

    flag = F.col("decode_error").startswith(f"{CAPTURE_FAILED}:")
    return pairs.where(~F.coalesce(flag, F.lit(False)))


def ordered(table: DataFrame, *keys: str | Column) -> DataFrame:
    """``table`` sorted by ``keys``, in one partition: a summary table is small, and a
    global ``orderBy`` would cost a sampling job of its own (2.4 times the time of the
    aggregation it sorts, measured on the pairs of 8 captures)."""
    return table.coalesce(1).sortWithinPartitions(*keys)


def percentile_name(p: float) -> str:
    """0.5 -> p50, 0.999 -> p99_9 (a column name without dots)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"percentile must be within [0, 1]: {p}")
    return "p" + f"{p * 100:.6g}".replace(".", "_")


def explode_topics(pairs: DataFrame) -> DataFrame:
    """One row per (pair, topic); pairs without topics drop out."""
    from pyspark.sql import functions as F

    return pairs.withColumn("topic", F.explode(F.array_distinct("topics")))


def _is_answered() -> Column:
    from pyspark.sql import functions as F

    return F.col("status").isin(*ANSWERED)


def _count_where(condition: Column) -> Column:
    from pyspark.sql import functions as F

    return F.sum(F.when(condition, 1).otherwise(0))


def _is_error() -> Column:
    from pyspark.sql import functions as F

    return F.col("status").isin(*ERROR_STATUSES)


def _is_unanswered() -> Column:
    from pyspark.sql import functions as F

    return F.col("status").isin(*UNANSWERED_STATUSES)


def _flag(condition: Column) -> Column:
    """1 where ``condition`` holds, else 0 (a null condition included)."""
    from pyspark.sql import functions as F

    return F.when(condition, F.lit(1)).otherwise(F.lit(0)).cast("bigint")


def _one() -> Column:
    from pyspark.sql import functions as F

    return F.lit(1).cast("bigint")


def latency_bucket(latency: Column) -> Column:
    """``partials.latency_buckets`` in Spark."""
    from pyspark.sql import functions as F

    bucket = F.floor(F.log(latency) / F.lit(LOG_GAMMA)).cast("int")
    return F.when(latency > 0, bucket).otherwise(F.lit(NONPOSITIVE_BUCKET))


def window_micros(spark: SparkSession, window: str) -> int:
    """The length of Spark interval ``window`` (``'1 minute'``, ``'10 seconds'``) in
    microseconds, as ``functions.window`` reads it (a bad one raises Spark's error)."""
    from pyspark.sql import functions as F

    w = F.window(F.timestamp_micros(F.lit(0)), window).alias("w")
    length = F.unix_micros(F.col("w.end")) - F.unix_micros(F.col("w.start"))
    row = spark.range(1).select(w).select(length.alias("micros")).first()
    assert row is not None
    return int(row["micros"])


def pair_partials(pairs: DataFrame, window_us: int) -> dict[str, DataFrame]:
    """Every pair as partial rows of its own (``partials.PARTIAL_TABLES``, the rows a
    task pre-aggregates): the merge of these is the summaries of ``pairs``."""
    from functools import reduce

    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    pairs = drop_capture_failures(pairs)
    latency = F.col("latency_ms")
    types = {f.name: f.dataType for f in pairs.schema.fields}
    topics = explode_topics(pairs)

    def keyed(name: str) -> DataFrame:
        own = GROUP_SETS[name]
        keys = [
            F.col(k) if k in own else F.lit(None).cast(types.get(k, "string")).alias(k)
            for k in GROUP_KEYS
        ]
        source = topics if name == "topic" else pairs
        return source.select(F.lit(name).alias("set"), *keys, latency, "error_count", "status")

    rows = reduce(DataFrame.unionByName, [keyed(name) for name in GROUP_SETS])
    groups = rows.select(
        "set",
        *GROUP_KEYS,
        _one().alias("requests"),
        _flag(latency.isNotNull()).alias("latencies"),
        latency.alias("latency_sum"),
        latency.alias("latency_max"),
        _flag(_is_answered()).alias("answered"),
        _flag(_is_error()).alias("errors"),
        _flag(_is_unanswered()).alias("unanswered"),
        F.col("error_count").alias("error_codes"),
    )
    latencies = rows.where(latency.isNotNull()).select(
        "set",
        *GROUP_KEYS,
        latency_bucket(latency).alias("bucket"),
        _one().alias("n"),
        latency.alias("vmin"),
        latency.alias("vmax"),
    )
    failing = pairs.where(_is_answered() & (F.col("error_code") != 0))
    errors = failing.select(*TOP_ERROR_KEYS, *BROKER_KEYS, "capture", _one().alias("pairs"))
    lost = pairs.where(_is_unanswered()).select(
        *UNANSWERED_KEYS,
        "capture",
        _one().alias("unanswered"),
        F.col("request_time").alias("first_request"),
        F.col("request_time").alias("last_request"),
    )
    at = F.coalesce(*(F.col(c) for c in EVENT_TIME_COLUMNS))
    micros = F.unix_micros(at)
    start = F.timestamp_micros(micros - F.pmod(micros, F.lit(window_us)))
    traffic = pairs.where(at.isNotNull()).select(
        start.alias("window_start"),
        *BROKER_KEYS,
        _one().alias("pairs"),
        _flag(_is_answered()).alias("answered"),
        _flag(_is_error()).alias("errors"),
        *(F.col(column).alias(out) for column, out in THROUGHPUT_SUMS),
    )
    return {
        GROUPS: groups,
        LATENCY: latencies,
        ERRORS: errors,
        UNANSWERED: lost,
        THROUGHPUT: traffic,
    }


# ---------------------------------------------------------------- the merge

LATENCY_TABLES: dict[str, str] = {
    "api": "latency_by_api",
    "broker": "latency_by_broker",
    "client": "latency_by_client",
    "topic": "latency_by_topic",
}
ERROR_TABLES: dict[str, str] = {"api": "errors_by_api", "broker": "errors_by_broker"}
LATENCY_VALUES: tuple[str, ...] = (
    "requests",
    "answered",
    *(f"{percentile_name(p)}_ms" for p in PERCENTILES),
    "mean_ms",
    "max_ms",
)
ERROR_VALUES: tuple[str, ...] = (
    "requests",
    "answered",
    "errors",
    "unanswered",
    "error_codes",
    "error_rate",
)


def _rank(p: float, total: str) -> Column:
    """The rank ``ceil(p * n)`` (at least 1) of the p-th percentile among ``n`` values
    (column ``total``), in integer arithmetic: ``0.9 * 10`` in floating point is above 9."""
    from pyspark.sql import functions as F

    share = Fraction(p).limit_denominator(1_000_000)
    num, den = share.numerator, share.denominator
    return F.greatest(F.lit(1).cast("bigint"), F.expr(f"({num} * {total} + {den - 1}) div {den}"))


def merge_columns(name: str, names: Mapping[str, str] | None = None) -> list[Column]:
    """The aggregations that merge partial table ``name``'s value columns by its rule
    (``partials.MERGES``, the rule a task applies to its own rows), each column renamed
    by ``names``."""
    from pyspark.sql import functions as F

    rename = names or {}
    return [getattr(F, how)(c).alias(rename.get(c, c)) for c, how in MERGES[name]]


def merged(
    partials: Mapping[str, DataFrame],
    name: str,
    keys: list[str],
    names: Mapping[str, str] | None = None,
) -> DataFrame:
    """Partial table ``name``'s rows with equal ``keys`` merged (``merge_columns``)."""
    return partials[name].groupBy(*keys).agg(*merge_columns(name, names))


def _percentiles(latency: DataFrame, keys: list[str]) -> DataFrame:
    """Per group of ``keys``: each of ``PERCENTILES`` from the merged latency buckets
    (``partials`` says how a bucket answers)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    buckets = merged({LATENCY: latency}, LATENCY, [*keys, "bucket"])
    group = Window.partitionBy(*keys)
    upto = group.orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = buckets.select(
        *keys,
        "n",
        "vmin",
        "vmax",
        F.sum("n").over(upto).alias("_upto"),
        F.sum("n").over(group).alias("_total"),
    )
    first, last = F.col("_upto") - F.col("n") + 1, F.col("_upto")
    columns = []
    for p in PERCENTILES:
        rank = _rank(p, "_total")
        value = (
            F.when(rank == first, F.col("vmin"))
            .when(rank == last, F.col("vmax"))
            .otherwise((F.col("vmin") + F.col("vmax")) / 2)
        )
        holds = (first <= rank) & (rank <= last)
        columns.append(F.max(F.when(holds, value)).alias(f"{percentile_name(p)}_ms"))
    return ranked.groupBy(*keys).agg(*columns)


def latency_and_errors(partials: Mapping[str, DataFrame]) -> DataFrame:
    """The latency and error-rate rows of every grouping (``partials.GROUP_SETS``) in
    one aggregation, each row naming its grouping in ``set``, sorted by it and keys."""
    from pyspark.sql import functions as F

    keys = ["set", *GROUP_KEYS]
    hidden = {"latencies": "_latencies", "latency_sum": "_latency_sum", "latency_max": "max_ms"}
    groups = merged(partials, GROUPS, keys, hidden)
    pct = _percentiles(partials[LATENCY], keys).alias("pct")
    names = [f"{percentile_name(p)}_ms" for p in PERCENTILES]
    timed = F.col("_latencies") > 0
    joined = groups.alias("g").join(
        pct, on=[F.col(f"g.{k}").eqNullSafe(F.col(f"pct.{k}")) for k in keys], how="left"
    )
    table = joined.select(
        *(F.col(f"g.{k}").alias(k) for k in keys),
        "requests",
        F.col("_latencies").alias("_answered_latency"),
        *(F.col(f"pct.{n}").alias(n) for n in names),
        F.when(timed, F.col("_latency_sum") / F.col("_latencies")).alias("mean_ms"),
        "max_ms",
        "answered",
        "errors",
        "unanswered",
        "error_codes",
        (F.col("errors") / F.col("requests")).alias("error_rate"),
    )
    return ordered(table, *keys)


def _set_tables(name: str) -> list[tuple[str, list[str], list[str]]]:
    """(table, columns of ``latency_and_errors`` to take, their names) of grouping
    ``name``: its latency table and, for some, its error-rate table."""
    by = list(GROUP_SETS[name])
    latency = [*by, "requests", "_answered_latency", *LATENCY_VALUES[2:]]
    out = [(LATENCY_TABLES[name], latency, [*by, *LATENCY_VALUES])]
    if name in ERROR_TABLES:
        out.append((ERROR_TABLES[name], [*by, *ERROR_VALUES], [*by, *ERROR_VALUES]))
    return out


def _split_frames(merged: DataFrame) -> dict[str, DataFrame]:
    """``latency_and_errors`` as one DataFrame per table."""
    from pyspark.sql import functions as F

    out = {}
    for name in GROUP_SETS:
        rows = merged.where(F.col("set") == name)
        for table, columns, names in _set_tables(name):
            renamed = (F.col(c).alias(n) for c, n in zip(columns, names, strict=True))
            selected = rows.select(*renamed)
            out[table] = ordered(selected, *GROUP_SETS[name])
    return out


def _split_sets(merged: pa.Table) -> dict[str, pa.Table]:
    """``latency_and_errors``' rows (brought to the driver) as one table per table."""
    import pyarrow.compute as pc

    out = {}
    for name in GROUP_SETS:
        rows = merged.filter(pc.equal(merged.column("set"), name))
        for table, columns, names in _set_tables(name):
            out[table] = rows.select(columns).rename_columns(names)
    return out


def top_errors(partials: Mapping[str, DataFrame], n: int = DEFAULT_TOP) -> DataFrame:
    """The ``n`` most frequent (api, error) combinations among answered pairs, with the
    brokers (both key columns known) and captures they were seen in."""
    from pyspark.sql import functions as F

    if n < 1:
        raise ValueError(f"top must be at least 1: {n}")
    return (
        partials[ERRORS]
        .groupBy(*TOP_ERROR_KEYS)
        .agg(
            *merge_columns(ERRORS),
            F.countDistinct(*BROKER_KEYS).alias("brokers"),
            F.countDistinct("capture").alias("captures"),
        )
        .orderBy(F.desc("pairs"), *TOP_ERROR_KEYS)
        .limit(n)
    )


def unanswered_requests(pairs: DataFrame) -> DataFrame:
    """The requests that expected a response and have none in the capture."""

    return pairs.where(_is_unanswered())


def unanswered_summary(partials: Mapping[str, DataFrame]) -> DataFrame:
    """Unanswered requests per broker and API, with the time span they cover."""
    from pyspark.sql import functions as F

    grouped = (
        partials[UNANSWERED]
        .groupBy(*UNANSWERED_KEYS)
        .agg(*merge_columns(UNANSWERED), F.countDistinct("capture").alias("captures"))
        .select(*UNANSWERED_KEYS, "unanswered", "captures", "first_request", "last_request")
    )
    return ordered(grouped, F.desc("unanswered"), *UNANSWERED_KEYS)


def throughput(
    partials: Mapping[str, DataFrame], window_us: int, by: tuple[str, ...] = ()
) -> DataFrame:
    """Traffic per tumbling time window (of the request, else the response, time), and
    per ``by`` (``()`` or the broker keys)."""
    from pyspark.sql import functions as F

    values = tuple(column for column, _ in MERGES[THROUGHPUT])
    grouped = merged(partials, THROUGHPUT, ["window_start", *by])
    end = F.timestamp_micros(F.unix_micros("window_start") + F.lit(window_us))
    table = grouped.select("window_start", end.alias("window_end"), *by, *values)
    return ordered(table, "window_start", *by)


def merge_summaries(
    partials: Mapping[str, DataFrame], pairs: DataFrame, window_us: int, top: int = DEFAULT_TOP
) -> dict[str, DataFrame]:
    """Every summary table from ``partials``, by name, in ``SUMMARY_TABLES``' order
    (``unanswered_requests`` from ``pairs``)."""
    tables = _split_frames(latency_and_errors(partials))
    tables["top_errors"] = top_errors(partials, top)
    tables["unanswered_requests"] = unanswered_requests(drop_capture_failures(pairs))
    tables["unanswered_summary"] = unanswered_summary(partials)
    tables["throughput"] = throughput(partials, window_us)
    tables["throughput_by_broker"] = throughput(partials, window_us, BROKER_KEYS)
    return {n: tables[n] for n in SUMMARY_TABLES}


def summaries(
    pairs: DataFrame, *, window: str = DEFAULT_WINDOW, top: int = DEFAULT_TOP
) -> dict[str, DataFrame]:
    """Every summary table of ``pairs``, by output name (lazy DataFrames).

    Rows flagging failed captures are left out: they are counted in ``captures``.
    """
    window_us = window_micros(pairs.sparkSession, window)
    return merge_summaries(pair_partials(pairs, window_us), pairs, window_us, top)


def _rolled_up(by_broker: pa.Table) -> pa.Table:
    """``throughput`` from ``throughput_by_broker``: each window's sums over brokers
    (a sum of the brokers' sums; null where every broker's is null, as Spark's sum)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    window = ["window_start", "window_end"]
    values = [n for n in by_broker.column_names if n not in (*window, *BROKER_KEYS)]
    summed = by_broker.group_by(window, use_threads=False).aggregate(
        [(v, "sum", pc.ScalarAggregateOptions(min_count=1)) for v in values]
    )
    schema = pa.schema([by_broker.schema.field(n) for n in (*window, *values)])
    columns = [summed.column(n) for n in window] + [summed.column(f"{v}_sum") for v in values]
    table = pa.Table.from_arrays(columns, schema=schema)
    return table.sort_by([("window_start", "ascending")])


def summary_tables(
    partials: Mapping[str, DataFrame], *, window_us: int, top: int = DEFAULT_TOP
) -> dict[str, pa.Table]:
    """``merge_summaries`` but ``unanswered_requests`` (rows, not counts), brought to
    the driver as Arrow, by name and in ``SUMMARY_TABLES``' order, in four Spark jobs
    over the partials: the latency and error tables of every grouping are one
    aggregation; ``throughput`` is the sum over brokers of ``throughput_by_broker``."""
    tables = _split_sets(latency_and_errors(partials).toArrow())
    tables["top_errors"] = top_errors(partials, top).toArrow()
    tables["unanswered_summary"] = unanswered_summary(partials).toArrow()
    tables["throughput_by_broker"] = throughput(partials, window_us, BROKER_KEYS).toArrow()
    tables["throughput"] = _rolled_up(tables["throughput_by_broker"])
    return {n: tables[n] for n in SUMMARY_TABLES if n in tables}
