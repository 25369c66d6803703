"""The analytics tables (partitions, groups, versions, lag) on Spark: their contracts
as Arrow in Spark's units, and their rows for one capture, made inside the task that
decodes its pairs, in the same pass of the native core.

The core builds the partitions, groups and versions rows beside the pairs
(``dissector.wire.tables``: the rows ``dissector.partitions``, ``groups`` and
``versions`` give); ``PassTables`` takes its batches as they come and casts them to
Spark's units (dictionaries -> strings, nanoseconds floored to microseconds, as in the
pairs table). ``lag`` is ``analytics.lag.lag_at_end`` of the capture's partitions rows,
of which ``PassTables`` keeps the columns lag reads (``lag.INPUTS``, as the core's
compact Arrow) only when ``lag`` is asked for.
So the Spark tables are the pandas tables: same column names, in order, and the same
values.

Needs pyarrow and pandas, never pyspark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.protocol.families import COMMITS, names
from dissector.spark.typemap import ARROW_TIMESTAMP
from dissector.tables_schema import CONTRACTS, Contract

if TYPE_CHECKING:
    import pandas as pd

    from dissector.wire.tables import TableCollector

ANALYTICS_TABLES: tuple[str, ...] = ("partitions", "groups", "versions", "lag")
"""Output names (folders under the job's output directory), in writing order."""

PASS_TABLES: tuple[str, ...] = tuple(CONTRACTS)
"""The tables the core builds in the pairs' pass (``lag`` is derived from partitions)."""

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


def _contract(name: str) -> Contract:
    """The column contract (name, pandas dtype, meaning) of one analytics table."""
    if name in CONTRACTS:
        return CONTRACTS[name]
    if name == "lag":
        from dissector.analytics.lag import LAG_COLUMNS

        return LAG_COLUMNS
    raise ValueError(f"unknown analytics table {name!r}; one of {', '.join(ANALYTICS_TABLES)}")


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


def to_spark(table: pa.Table, name: str) -> pa.Table:
    """A table of the core (``wire.tables``: dictionary strings, nanosecond times) in
    ``arrow_schema(name)``: strings decoded, times floored to microseconds."""
    from dissector.arrow_cast import retype_column

    schema = arrow_schema(name)
    columns = [
        retype_column(table.column(f.name), f.type, safe=not pa.types.is_timestamp(f.type))
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def lag_inputs(partitions: pa.Table) -> pa.Table:
    """The columns of a partitions batch that ``lag.lag_at_end`` reads
    (``lag.INPUTS``): what a task keeps of a capture for its lag table."""
    from dissector.analytics.lag import INPUTS

    return partitions.select(list(INPUTS))


COMMIT_APIS = frozenset(names(COMMITS))
"""The partitions rows ``lag.commit_events`` reads commits from: a capture without any
has no lag rows (``lag_at_end`` of it is empty), so its lag is not computed."""


def may_commit(partitions: pa.Table) -> bool:
    """Whether a partitions batch may hold a commit (``COMMIT_APIS``): its ``api_name``
    dictionaries name one (a dictionary may name more than its rows use: never a
    commit missed)."""
    column = partitions.column("api_name")
    for chunk in column.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        if COMMIT_APIS.intersection(v for v in values.to_pylist() if v is not None):
            return True
    return False


def lag_table(inputs: list[pa.Table]) -> pa.Table:
    """``lag.lag_at_end`` of one capture's partitions rows (``lag_inputs`` of the
    core's Arrow batches), in ``arrow_schema("lag")``."""
    from dissector.analytics.lag import INPUTS, lag_at_end
    from dissector.tables_schema import PARTITION_COLUMNS
    from dissector.wire.tables import to_frame

    if not inputs:
        return arrow_schema("lag").empty_table()
    contract = {c[0]: c for c in PARTITION_COLUMNS}
    frame = to_frame(pa.concat_tables(inputs), tuple(contract[n] for n in INPUTS))
    return to_arrow(lag_at_end(frame), "lag")


Rename = Callable[[pa.Table], pa.Table]


@dataclass
class PassTables:
    """Takes the analytics tables of one capture's pass as the core builds them
    (``wire.tables.TableCollector`` writers): each batch of a wanted table, renamed
    by ``rename`` (the ``capture`` column: local paths -> URIs) and cast to Spark's
    units, waits in ``pending`` until the task hands it on (``drain``): memory holds
    one core batch, not the capture. The partitions batches are also kept when
    ``lag`` is wanted: the lag table needs the whole capture's rows (``finish``)."""

    wanted: tuple[str, ...]
    rename: Rename
    pending: list[tuple[str, pa.Table]] = field(default_factory=list)
    kept: list[pa.Table] = field(default_factory=list)
    commits: bool = False  # a kept batch may hold a commit (``may_commit``)

    def collector(self) -> TableCollector:
        """The ``TableCollector`` to hand the pass (``wire.core.iter_tables``)."""
        from dissector.wire.tables import TableCollector

        return TableCollector(writers={n: self._writer(n) for n in PASS_TABLES})

    def _writer(self, name: str) -> Callable[[pa.Table], None]:
        def take(batch: pa.Table) -> None:
            if name not in self.wanted and not (name == "partitions" and self.keeps):
                return
            batch = self.rename(batch)
            if name in self.wanted:
                self.pending.append((name, to_spark(batch, name)))
            if name == "partitions" and self.keeps:
                self.kept.append(lag_inputs(batch))
                self.commits = self.commits or may_commit(batch)

        return take

    @property
    def keeps(self) -> bool:
        return "lag" in self.wanted

    def drain(self) -> list[tuple[str, pa.Table]]:
        """The batches taken since the last call, in order."""
        pending, self.pending = self.pending, []
        return pending

    def finish(self) -> Iterator[tuple[str, pa.Table]]:
        """What is left: the pending batches, then the lag table."""
        yield from self.drain()
        if self.keeps:
            kept, self.kept = self.kept, []
            yield "lag", lag_table(kept if self.commits else [])
