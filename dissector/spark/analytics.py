"""The analytics tables (partitions, groups, versions, lag) on Spark, one capture per task.

Each task runs the pandas functions themselves (``dissector.partitions``,
``dissector.groups``, ``dissector.versions``; ``lag``: ``analytics.lag.lag_at_end``
of the capture's partitions) on a ``binaryFile`` row's bytes
(``options.CaptureBytes``: read in place, no temporary file), so the Spark tables are
the pandas tables: same column names, in order, and the same values; times are
floored to microseconds (Spark's unit), as in the pairs table.

One ``mapInArrow`` pass reads each capture once for all the tables asked for: its
rows carry one struct column per table, exactly one of them set, and
``analytics_tables`` splits them into one DataFrame per table.

A capture the pairs pass could not decode yields no rows here; the ``captures``
table already says why. Needs pyarrow and pandas in the workers, never pyspark
outside the driver functions.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dissector.options import CaptureBytes, Options
from dissector.spark.read import DEFAULT_GLOB, read_binary, resolve_paths
from dissector.spark.tasks import capture_files
from dissector.spark.typemap import ARROW_TIMESTAMP

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

ANALYTICS_TABLES: tuple[str, ...] = ("partitions", "groups", "versions", "lag")
"""Output names (folders under the job's output directory), in writing order."""

# The contracts' pandas dtypes as Arrow types. ``object`` columns are lists of ints
# (versions_used, unknown_versions): named one by one, so a new object column fails
# loudly here instead of landing as something Spark cannot read.
_ARROW_BY_DTYPE: dict[str, pa.DataType] = {
    "string": pa.string(),
    "Int64": pa.int64(),
    "Float64": pa.float64(),
    "boolean": pa.bool_(),
    "datetime64[ns, UTC]": ARROW_TIMESTAMP,
}
_OBJECT_COLUMNS: dict[str, pa.DataType] = {
    "versions_used": pa.list_(pa.int64()),
    "unknown_versions": pa.list_(pa.int64()),
}


def _contract(name: str) -> tuple[tuple[str, str, str], ...]:
    """The column contract (name, pandas dtype, meaning) of one analytics table."""
    if name == "partitions":
        from dissector.analytics.partitions import PARTITION_COLUMNS

        return PARTITION_COLUMNS
    if name == "groups":
        from dissector.analytics.groups import GROUP_COLUMNS

        return GROUP_COLUMNS
    if name == "versions":
        from dissector.analytics.versions import VERSION_COLUMNS

        return VERSION_COLUMNS
    if name == "lag":
        from dissector.analytics.lag import LAG_COLUMNS

        return LAG_COLUMNS
    raise ValueError(f"unknown analytics table {name!r}; one of {', '.join(ANALYTICS_TABLES)}")


def _function(name: str) -> Callable[..., pd.DataFrame]:
    """The pandas function that builds one table (``dissector.<name>``)."""
    if name == "partitions":
        from dissector.analytics.partitions import partitions

        return partitions
    if name == "groups":
        from dissector.analytics.groups import groups

        return groups
    if name == "lag":
        return capture_lag
    from dissector.analytics.versions import versions

    return versions


def capture_lag(source: Any, *, ports: Iterable[int] | None = None) -> pd.DataFrame:
    """Committed lag at the end of one capture (``lag.lag_at_end`` of its partitions);
    ``source`` as ``dissector.partitions`` takes it (a ``CaptureBytes`` in the tasks)."""
    from dissector.analytics.lag import lag_at_end
    from dissector.analytics.partitions import partitions

    return lag_at_end(partitions(source, ports=ports))


def arrow_schema(name: str) -> pa.Schema:
    """One analytics table as Arrow, in Spark's units (timestamps in microseconds)."""
    fields = []
    for column, dtype, _ in _contract(name):
        if dtype == "object":
            if column not in _OBJECT_COLUMNS:
                raise ValueError(f"{name}.{column}: object column without an Arrow type")
            fields.append(pa.field(column, _OBJECT_COLUMNS[column]))
        else:
            fields.append(pa.field(column, _ARROW_BY_DTYPE[dtype]))
    return pa.schema(fields)


def combined_arrow_schema(names: Iterable[str]) -> pa.Schema:
    """The pass's output: one nullable struct column per table."""
    return pa.schema([pa.field(n, pa.struct(list(arrow_schema(n)))) for n in names])


def parse_tables(text: str) -> tuple[str, ...]:
    """``--tables`` value: comma-separated names, or ``all`` / ``none``."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words == ["all"]:
        return ANALYTICS_TABLES
    if words in ([], ["none"]):
        return ()
    unknown = [w for w in words if w not in ANALYTICS_TABLES]
    if unknown:
        raise ValueError(
            f"unknown table {unknown[0]!r}; choose from {', '.join(ANALYTICS_TABLES)}, all, none"
        )
    return tuple(n for n in ANALYTICS_TABLES if n in words)


def to_arrow(df: pd.DataFrame, name: str) -> pa.Table:
    """A pandas table of the contract as Arrow of ``arrow_schema(name)``."""
    schema = arrow_schema(name)
    table = pa.Table.from_pandas(df[list(schema.names)], preserve_index=False)
    # ns -> us floors (Spark's unit, as the pairs' times); the rest is exact.
    return table.cast(schema, safe=False).replace_schema_metadata(None)


@dataclass(frozen=True, slots=True)
class AnalyticsConfig:
    """What every task needs; pickled into the tasks, so only plain data."""

    tables: tuple[str, ...] = ANALYTICS_TABLES
    options: Options = field(default_factory=Options)


def capture_batches(capture: str, data: bytes, config: AnalyticsConfig) -> Iterator[pa.RecordBatch]:
    """Batches of one capture: each table's rows under its struct column."""
    schema = combined_arrow_schema(config.tables)
    for name in config.tables:
        try:
            df = _function(name)(CaptureBytes(capture, data), ports=config.options.ports)
        except Exception:  # a capture that cannot be read is reported in captures/
            continue
        table = to_arrow(df, name)
        if table.num_rows == 0:
            continue
        structs = pa.StructArray.from_arrays(
            [c.combine_chunks() for c in table.columns], fields=list(table.schema)
        )
        columns = [
            structs if other == name else pa.nulls(table.num_rows, schema.field(other).type)
            for other in config.tables
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=schema)


def analytics_batches(
    batches: Iterable[pa.RecordBatch], config: AnalyticsConfig
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: binaryFile batches (path, content) -> table rows."""
    for path, data in capture_files(batches):
        yield from capture_batches(path, bytes(data), config)


@dataclass(frozen=True)
class Analytics:
    """The analytics tables of a run (cached until ``unpersist``)."""

    tables: dict[str, DataFrame]
    cached: DataFrame | None = None

    def unpersist(self) -> None:
        if self.cached is not None:
            self.cached.unpersist()


def spark_schema(names: Collection[str]) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(combined_arrow_schema(names))


def load_analytics(
    spark: SparkSession,
    paths: Iterable[str],
    names: Collection[str],
    *,
    options: Options | None = None,
    recursive: bool = False,
    glob: str | None = DEFAULT_GLOB,
    skip_missing: bool = False,
) -> Analytics:
    """The analytics tables ``names`` of the captures under ``paths`` (as ``read.load``
    selects them), one DataFrame each, columns as the pandas functions return them."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    wanted = tuple(n for n in ANALYTICS_TABLES if n in names)
    if not wanted:
        return Analytics({})
    targets = resolve_paths(spark, list(paths), skip_missing=skip_missing)
    binary = read_binary(spark, targets, recursive=recursive, glob=glob)
    config = AnalyticsConfig(tables=wanted, options=options or Options())
    rows = binary.mapInArrow(partial(analytics_batches, config=config), spark_schema(wanted))
    cached = rows.persist(StorageLevel.MEMORY_AND_DISK)
    tables = {n: cached.where(F.col(n).isNotNull()).select(f"{n}.*") for n in wanted}
    return Analytics(tables, cached)
