"""The analytics tables (partitions, groups, versions, lag) on Spark: their contracts
as Arrow in Spark's units, and their rows for one capture, made inside the task that
decodes its pairs, in the same pass of the native core.

The core builds the partitions, groups and versions rows beside the pairs
(``dissector.wire.tables``: the rows ``dissector.partitions``, ``groups`` and
``versions`` give); ``PassTables`` takes its batches as they come, and where they go
they are in Spark's units (dictionaries -> strings, nanoseconds floored to
microseconds, as in the pairs table): cast (``in_spark_units``) for rows handed to
Spark, written so by the Parquet writer itself (``PARQUET_AS_SPARK``). ``lag`` is
``analytics.lag.lag_at_end`` of the capture's partitions rows, of which ``LagRows``
keeps the few lag reads (as the core's compact Arrow) only when ``lag`` is asked for,
computed on them by ``analytics.lag_arrow`` (numpy: the same rows, no pandas frame).
So the Spark tables are the pandas tables: same column names, in order, and the same
values.

Needs pyarrow and numpy, never pyspark; pandas only for ``to_arrow`` (a pandas table
of a contract as Arrow: the tests' oracle side), not in a task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from dissector.analytics.lag_arrow import (
    column_codes,
    column_int64s,
    is_fetch,
    lag_inputs,
    needed_fetches,
)
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


def in_spark_units(table: pa.Table, name: str) -> pa.Table:
    """A batch of table ``name`` as ``PassTables`` hands it on (the core's units for
    the pass's tables, ``to_spark``'s for ``lag``) in ``arrow_schema(name)``."""
    return to_spark(table, name) if name in PASS_TABLES else table


def written_as_is(name: str) -> bool:
    """Whether a Parquet writer takes the core's batches of table ``name`` as they
    are (``PARQUET_AS_SPARK``): a table of the pass without list columns (whose
    field names a file without a stored schema would not keep)."""
    return name in PASS_TABLES and not any(pa.types.is_list(f.type) for f in arrow_schema(name))


PARQUET_AS_SPARK = {
    "coerce_timestamps": "us",  # floored to microseconds, Spark's unit, as ``to_spark``
    "allow_truncated_timestamps": True,
    "store_schema": False,  # readers see the Parquet types: strings, not dictionaries
}
"""``pyarrow.parquet.ParquetWriter`` options that write the core's batches (dictionary
strings, nanosecond times) as a file of ``arrow_schema``'s types: the same file as
the batches cast by ``to_spark`` (a Spark, pandas or pyarrow reader reads the same
columns), without the cast, and the dictionaries written as Parquet's own (about a
fifth less of the writer's time on a long-poll capture's partitions table alone; within
a task, beside the core's pass, the difference is in the noise)."""


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


_TIMES = ("request_time", "response_time")


@dataclass
class LagRows:
    """The rows of one capture's partitions table that ``lag.lag_at_end`` reads, kept
    as the core's batches come: the columns it reads (``lag.INPUTS``), every row but
    the Fetch entries it never reads (``needed_fetches``: of the 235,089 rows of a
    37.6 MB long-poll capture, 221,724 are Fetch entries, a few hundred needed), and
    each capture's evaluation time (its latest request or response time, which the
    dropped rows count in)."""

    others: list[pa.Table] = field(default_factory=list)
    fetches: pa.Table | None = None
    ends: dict[str, int] = field(default_factory=dict)  # capture -> ns since the epoch
    commits: bool = False  # a batch may hold a commit (``may_commit``)

    def add(self, partitions: pa.Table) -> None:
        """One batch of the core's partitions table (capture names as written)."""
        if partitions.num_rows == 0:
            return
        rows = lag_inputs(partitions)
        self.commits = self.commits or may_commit(rows)
        self._note_ends(rows)
        self.others.append(rows.filter(pa.array(~is_fetch(rows))))
        # this batch's candidates, then those of the ones before and them together
        taken = rows.take(pa.array(needed_fetches(rows)))
        both = taken if self.fetches is None else pa.concat_tables([self.fetches, taken])
        both = both.unify_dictionaries().combine_chunks()
        self.fetches = both.take(pa.array(needed_fetches(both)))

    def _note_ends(self, rows: pa.Table) -> None:
        import numpy as np

        column = rows.column("capture").chunk(0)
        if len(column.dictionary) == 1 and column.null_count == 0:
            # one capture (a task's batch always): its latest time in Arrow, without
            # the numpy arrays and the per-capture masks below (a fifth of the lag work)
            self._note_end(column.dictionary[0].as_py(), rows)
            return
        floor = np.iinfo(np.int64).min
        latest = np.maximum(
            column_int64s(rows.column("request_time"), floor),
            column_int64s(rows.column("response_time"), floor),
        )
        captures = column_codes(rows.column("capture"))
        names = rows.column("capture").chunk(0).dictionary.to_pylist()
        for code in np.unique(captures):
            at = int(latest[captures == code].max())
            name = names[code] if code >= 0 else None
            if at != floor and name is not None:
                self.ends[name] = max(self.ends.get(name, at), at)

    def _note_end(self, name: str, rows: pa.Table) -> None:
        """The latest request or response time of ``rows``, all of capture ``name``."""
        import pyarrow.compute as pc

        latest = [pc.max(rows.column(c).cast(pa.int64())).as_py() for c in _TIMES]
        at = max((t for t in latest if t is not None), default=None)
        if at is not None:
            self.ends[name] = max(self.ends.get(name, at), at)

    def table(self) -> pa.Table:
        """``lag.lag_at_end`` of the rows kept, in ``arrow_schema("lag")``: computed on
        Arrow and numpy (``analytics.lag_arrow``, the same rows), without pandas."""
        from dissector.analytics.lag_arrow import lag_at_end_arrow

        kept = [*self.others, *([self.fetches] if self.fetches is not None else [])]
        self.others, self.fetches = [], None
        if not self.commits or not kept:
            return arrow_schema("lag").empty_table()
        # the Fetch entries kept are those lag reads at these times: none superseded
        rows = lag_at_end_arrow(pa.concat_tables(kept), self.ends)
        return rows.cast(arrow_schema("lag"), safe=False)  # ns -> us floors, as to_arrow


Rename = Callable[[pa.Table], pa.Table]


@dataclass
class PassTables:
    """Takes the analytics tables of one capture's pass as the core builds them
    (``wire.tables.TableCollector`` writers): each batch of a wanted table, renamed
    by ``rename`` (the ``capture`` column: local paths -> URIs), as the core built it
    (``in_spark_units`` gives Spark's), waits in ``pending`` until the task hands it
    on (``drain``): memory holds one core batch, not the capture. When ``lag`` is
    wanted, ``LagRows`` also keeps what lag reads of the partitions batches: the lag
    table needs the whole capture's (``finish``)."""

    wanted: tuple[str, ...]
    rename: Rename
    pending: list[tuple[str, pa.Table]] = field(default_factory=list)
    lag: LagRows = field(default_factory=LagRows)

    def collector(self) -> TableCollector:
        """The ``TableCollector`` to hand the pass (``wire.core.iter_tables``)."""
        from dissector.wire.tables import TableCollector

        built = {n for n in PASS_TABLES if n in self.wanted}
        if self.keeps:
            built.add("partitions")  # what lag reads
        return TableCollector(
            writers={n: self._writer(n) for n in PASS_TABLES}, wanted=frozenset(built)
        )

    def _writer(self, name: str) -> Callable[[pa.Table], None]:
        def take(batch: pa.Table) -> None:
            if name not in self.wanted and not (name == "partitions" and self.keeps):
                return
            batch = self.rename(batch)
            if name in self.wanted:
                self.pending.append((name, batch))
            if name == "partitions" and self.keeps:
                self.lag.add(batch)

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
            yield "lag", self.lag.table()
