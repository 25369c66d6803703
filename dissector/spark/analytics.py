"""The analytics tables (partitions, groups, versions, lag) on Spark: their contracts
as Arrow, and their rows for one capture, made inside the task that decodes its pairs.

The rows are the pandas functions' own (``dissector.partitions``, ``groups``,
``versions``; ``lag``: ``analytics.lag.lag_at_end`` of the capture's partitions) run on
the capture the task holds (a local path, or the bytes Spark read:
``options.CaptureBytes``), so the Spark tables are the pandas tables: same column names,
in order, and the same values; times are floored to microseconds (Spark's unit), as in
the pairs table.

A capture the pairs pass could not decode yields no rows here; the ``captures``
table already says why. Needs pyarrow and pandas, never pyspark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dissector.options import AnySource, Options
from dissector.spark.typemap import ARROW_TIMESTAMP

if TYPE_CHECKING:
    import pandas as pd

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


def struct_column(name: str) -> str:
    """The struct column holding a table's rows among the rows handed to Spark (not the
    table's name: the pairs have a ``partitions`` column)."""
    return f"_{name}"


def struct_fields(names: Iterable[str]) -> list[pa.Field]:
    """One struct column per table, for rows handed to Spark (``typemap.decoded_arrow_schema``)."""
    return [pa.field(struct_column(n), pa.struct(list(arrow_schema(n)))) for n in names]


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


def capture_tables(
    source: AnySource, capture: str, names: Iterable[str], options: Options
) -> Iterator[tuple[str, pa.Table]]:
    """(name, rows) of each analytics table of one capture that has rows, ``capture``
    in the ``capture`` column (a path read here is renamed to its URI).

    A capture that cannot be read yields nothing: the pairs pass reports why.
    """
    for name in names:
        try:
            df = _function(name)(source, ports=options.ports)
        except Exception:  # a capture that cannot be read is reported in captures/
            continue
        if df.empty:
            continue
        df["capture"] = capture
        yield name, to_arrow(df, name)
