"""Fleet summary tables: pure functions from the pairs DataFrame to small DataFrames.

Conventions shared by every table:

* a group key that is null (e.g. ``client_id`` of an orphan response) is a group of
  its own, as in ``pandas.groupby(dropna=False)``;
* rows flagging a capture that failed to decode are not pairs and are left out;
* "answered" means ``status`` is ``ok`` or ``error`` (a response was matched);
* "errors" and "unanswered" follow ``dissector.analytics.stats`` (``ERROR_STATUSES``,
  ``UNANSWERED_STATUSES``), the rules of the offline report and the CLI summary, and
  an error rate is errors over all rows of the group, as there;
* percentiles are ``percentile_approx`` over ``latency_ms`` (nulls ignored), which
  returns a value that occurs in the data: the smallest one with at least the
  requested share of values at or below it (exact while a group holds fewer values
  than ``accuracy``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dissector.analytics.stats import ERROR_STATUSES, EVENT_TIME_COLUMNS, UNANSWERED_STATUSES
from dissector.schema import Status
from dissector.spark.tasks import CAPTURE_FAILED

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

PERCENTILES: tuple[float, ...] = (0.5, 0.9, 0.99)
ANSWERED: tuple[str, ...] = (Status.OK.value, Status.ERROR.value, Status.UNKNOWN.value)
API_KEYS: tuple[str, ...] = ("api_key", "api_name", "api_version")
BROKER_KEYS: tuple[str, ...] = ("broker_ip", "broker_port")
CLIENT_KEYS: tuple[str, ...] = ("client_id",)
TOPIC_KEYS: tuple[str, ...] = ("topic",)
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


def latency_percentiles(
    pairs: DataFrame,
    by: Sequence[str],
    percentiles: Sequence[float] = PERCENTILES,
    accuracy: int = 10_000,
) -> DataFrame:
    """Per group: requests, answered, latency percentiles, mean and max (ms)."""
    from pyspark.sql import functions as F

    names = [percentile_name(p) for p in percentiles]
    grouped = pairs.groupBy(*by).agg(
        F.count(F.lit(1)).alias("requests"),
        F.count("latency_ms").alias("answered"),
        F.percentile_approx("latency_ms", list(percentiles), accuracy).alias("_pct"),
        F.mean("latency_ms").alias("mean_ms"),
        F.max("latency_ms").alias("max_ms"),
    )
    pct = [F.col("_pct")[i].alias(f"{name}_ms") for i, name in enumerate(names)]
    return ordered(grouped.select(*by, "requests", "answered", *pct, "mean_ms", "max_ms"), *by)


def latency_by_topic(pairs: DataFrame, percentiles: Sequence[float] = PERCENTILES) -> DataFrame:
    return latency_percentiles(explode_topics(pairs), TOPIC_KEYS, percentiles)


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


def error_rates(pairs: DataFrame, by: Sequence[str]) -> DataFrame:
    """Per group: rows, answered, errors, unanswered, error codes seen, error rate."""
    from pyspark.sql import functions as F

    grouped = pairs.groupBy(*by).agg(
        F.count(F.lit(1)).alias("requests"),
        _count_where(_is_answered()).alias("answered"),
        _count_where(_is_error()).alias("errors"),
        _count_where(_is_unanswered()).alias("unanswered"),
        F.sum("error_count").alias("error_codes"),
    )
    return ordered(grouped.withColumn("error_rate", F.col("errors") / F.col("requests")), *by)


def top_errors(pairs: DataFrame, n: int = DEFAULT_TOP) -> DataFrame:
    """The ``n`` most frequent (api, error) combinations among answered pairs."""
    from pyspark.sql import functions as F

    if n < 1:
        raise ValueError(f"top must be at least 1: {n}")
    keys = ("api_name", "error_code", "error_name")
    failing = pairs.where(_is_answered() & (F.col("error_code") != 0))
    return (
        failing.groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("pairs"),
            F.countDistinct("broker_ip", "broker_port").alias("brokers"),
            F.countDistinct("capture").alias("captures"),
        )
        .orderBy(F.desc("pairs"), *keys)
        .limit(n)
    )


def unanswered_requests(pairs: DataFrame) -> DataFrame:
    """The requests that expected a response and have none in the capture."""

    return pairs.where(_is_unanswered())


def unanswered_summary(pairs: DataFrame) -> DataFrame:
    """Unanswered requests per broker and API, with the time span they cover."""
    from pyspark.sql import functions as F

    keys = (*BROKER_KEYS, "api_name", "api_version")
    grouped = (
        unanswered_requests(pairs)
        .groupBy(*keys)
        .agg(
            F.count(F.lit(1)).alias("unanswered"),
            F.countDistinct("capture").alias("captures"),
            F.min("request_time").alias("first_request"),
            F.max("request_time").alias("last_request"),
        )
    )
    return ordered(grouped, F.desc("unanswered"), *keys)


def throughput(pairs: DataFrame, window: str = DEFAULT_WINDOW, by: Sequence[str] = ()) -> DataFrame:
    """Traffic per tumbling time window (of the request, else the response, time)."""
    from pyspark.sql import functions as F

    at = F.coalesce(*(F.col(c) for c in EVENT_TIME_COLUMNS))
    timed = pairs.where(at.isNotNull()).withColumn("_w", F.window(at, window))
    grouped = timed.groupBy("_w", *by).agg(
        F.count(F.lit(1)).alias("pairs"),
        _count_where(_is_answered()).alias("answered"),
        _count_where(_is_error()).alias("errors"),
        F.sum("request_size").alias("request_bytes"),
        F.sum("response_size").alias("response_bytes"),
        F.sum("records").alias("records"),
        F.sum("record_bytes").alias("record_bytes"),
    )
    table = grouped.select(
        F.col("_w.start").alias("window_start"),
        F.col("_w.end").alias("window_end"),
        *by,
        "pairs",
        "answered",
        "errors",
        "request_bytes",
        "response_bytes",
        "records",
        "record_bytes",
    )
    return ordered(table, "window_start", *by)


def summaries(
    pairs: DataFrame, *, window: str = DEFAULT_WINDOW, top: int = DEFAULT_TOP
) -> dict[str, DataFrame]:
    """Every summary table the ``spark`` command writes, by output name.

    Rows flagging failed captures are left out: they are counted in ``captures``.
    """
    pairs = drop_capture_failures(pairs)
    return {
        "latency_by_api": latency_percentiles(pairs, API_KEYS),
        "latency_by_broker": latency_percentiles(pairs, BROKER_KEYS),
        "latency_by_client": latency_percentiles(pairs, CLIENT_KEYS),
        "latency_by_topic": latency_by_topic(pairs),
        "errors_by_api": error_rates(pairs, API_KEYS),
        "errors_by_broker": error_rates(pairs, BROKER_KEYS),
        "top_errors": top_errors(pairs, top),
        "unanswered_requests": unanswered_requests(pairs),
        "unanswered_summary": unanswered_summary(pairs),
        "throughput": throughput(pairs, window),
        "throughput_by_broker": throughput(pairs, window, BROKER_KEYS),
    }


# ---------------------------------------------------------------- fewer jobs

GROUPED_SETS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("latency_by_api", "errors_by_api", API_KEYS),
    ("latency_by_broker", "errors_by_broker", BROKER_KEYS),
    ("latency_by_client", "", CLIENT_KEYS),
)
"""(latency table, errors table or "", keys): the tables ``summary_tables`` computes
in one aggregation, one grouping set per key list."""


def _latency_and_errors(pairs: DataFrame) -> DataFrame:
    """``latency_percentiles`` and ``error_rates`` of every key list of ``GROUPED_SETS``
    in one aggregation (grouping sets): one scan of the pairs for five tables. Each
    row says its set in ``_set`` (``grouping_id``), and is sorted by it, then by keys."""
    from pyspark.sql import functions as F

    keys = [k for _, _, by in GROUPED_SETS for k in by]
    names = [percentile_name(p) for p in PERCENTILES]
    grouped = pairs.groupingSets([list(by) for _, _, by in GROUPED_SETS], *keys).agg(
        F.grouping_id().alias("_set"),
        F.count(F.lit(1)).alias("requests"),
        F.count("latency_ms").alias("_latencies"),
        F.percentile_approx("latency_ms", list(PERCENTILES), 10_000).alias("_pct"),
        F.mean("latency_ms").alias("mean_ms"),
        F.max("latency_ms").alias("max_ms"),
        _count_where(_is_answered()).alias("answered"),
        _count_where(_is_error()).alias("errors"),
        _count_where(_is_unanswered()).alias("unanswered"),
        F.sum("error_count").alias("error_codes"),
    )
    pct = [F.col("_pct")[i].alias(f"{name}_ms") for i, name in enumerate(names)]
    table = grouped.select(
        "_set",
        *keys,
        "requests",
        "_latencies",
        *pct,
        "mean_ms",
        "max_ms",
        "answered",
        "errors",
        "unanswered",
        "error_codes",
        (F.col("errors") / F.col("requests")).alias("error_rate"),
    )
    return ordered(table, "_set", *keys)


def _set_id(keys: Sequence[str], chosen: Sequence[str]) -> int:
    """``grouping_id()`` of the set ``chosen`` among ``keys``: a bit per key, the
    first the highest, set when the key is not in the set."""
    return sum(1 << (len(keys) - 1 - i) for i, k in enumerate(keys) if k not in chosen)


def _split_sets(table: pa.Table) -> dict[str, pa.Table]:
    """The tables of ``_latency_and_errors``' rows, with the columns (and order) the
    one-table functions give."""
    import pyarrow.compute as pc

    keys = [k for _, _, by in GROUPED_SETS for k in by]
    latency = ["requests", "_latencies", *(f"{percentile_name(p)}_ms" for p in PERCENTILES)]
    latency += ["mean_ms", "max_ms"]
    errors = ["requests", "answered", "errors", "unanswered", "error_codes", "error_rate"]
    out = {}
    for latency_name, errors_name, by in GROUPED_SETS:
        rows = table.filter(pc.equal(table.column("_set"), _set_id(keys, by)))
        out[latency_name] = rows.select([*by, *latency]).rename_columns(
            [*by, "requests", "answered", *latency[2:]]
        )
        if errors_name:
            out[errors_name] = rows.select([*by, *errors])
    return out


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
    pairs: DataFrame, *, window: str = DEFAULT_WINDOW, top: int = DEFAULT_TOP
) -> dict[str, pa.Table]:
    """``summaries`` but ``unanswered_requests`` (rows, not counts), computed and
    brought to the driver as Arrow, by name and in ``SUMMARY_TABLES``' order: the
    same tables in five Spark jobs instead of ten, so five scans of the pairs.
    Latency and error rates per API, per broker and per client are one aggregation
    (grouping sets); ``throughput`` is the sum over brokers of
    ``throughput_by_broker``."""
    pairs = drop_capture_failures(pairs)
    tables = _split_sets(_latency_and_errors(pairs).toArrow())
    tables["latency_by_topic"] = latency_by_topic(pairs).toArrow()
    tables["top_errors"] = top_errors(pairs, top).toArrow()
    tables["unanswered_summary"] = unanswered_summary(pairs).toArrow()
    tables["throughput_by_broker"] = throughput(pairs, window, BROKER_KEYS).toArrow()
    tables["throughput"] = _rolled_up(tables["throughput_by_broker"])
    return {n: tables[n] for n in SUMMARY_TABLES if n in tables}
