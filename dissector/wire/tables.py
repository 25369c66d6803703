"""The analytics tables (partitions, groups, versions) from the native core's pass.

The core builds them beside the pairs, in the same read of each capture
(``native/src/rows/tables.rs``), by the roles ``dissector.protocol.tables`` declares; this
module turns its column buffers into Arrow tables of the contracts in
``dissector.tables_schema`` and answers the core's rare questions about pairs it leaves
to the Python decoder (``TablesFallback``).

The pass itself is ``wire.core.capture_tables`` (the tables alone), or
``wire.core.iter_tables`` with a ``TableCollector`` (the pairs too).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dissector.protocol.tables import Names, PairFacts, pair_facts
from dissector.tables_schema import CONTRACTS, Contract, arrow_schema, arrow_type
from dissector.wire.native import arrow_column

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector._core import TableBuffers, TablesBatch
    from dissector.stages import Decoder
    from dissector.wire.native import ColumnBuffer


TABLE_NAMES: tuple[str, ...] = tuple(CONTRACTS)
"""partitions, groups, versions: the tables a pass builds, in that order."""

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _int64(value: Any) -> Any:
    """Python ints past int64 (from damaged bytes) become null: Arrow cannot hold them."""
    if type(value) is int and not _INT64[0] <= value <= _INT64[1]:
        return None
    if isinstance(value, list):
        return [_int64(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_int64(v) for v in value)
    return value


def _bounded(obj: Any) -> Any:
    changes = {f.name: _int64(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return dataclasses.replace(obj, **changes)


class TablesFallback:
    """The facts of a pair the core's native reading leaves to the Python decoder (a
    malformed body, a record batch with anomalies): ``protocol.tables.pair_facts``."""

    def __init__(self, decoder: Decoder) -> None:
        self.decoder = decoder

    def __call__(
        self,
        api_key: int,
        api_version: int,
        request: bytes | None,
        response: bytes | None,
        names: Names,
    ) -> PairFacts:
        facts = pair_facts(self.decoder, api_key, api_version, request, response, names)
        negotiation = facts.negotiation
        if negotiation is not None and negotiation.advertised is not None:
            advertised = {
                k: v
                for k, v in negotiation.advertised.items()
                if _int64(k) is not None and None not in _int64(v)
            }
            negotiation = dataclasses.replace(negotiation, advertised=advertised or None)
        return dataclasses.replace(
            facts,
            partitions=[_bounded(p) for p in facts.partitions],
            group=_bounded(facts.group) if facts.group is not None else None,
            negotiation=negotiation,
        )


@dataclass(frozen=True)
class CaptureTables:
    """The analytics tables of one pass (one capture, or several in a row) as Arrow.

    ``partitions``, ``groups`` and ``versions`` follow ``dissector.tables_schema``'s
    contracts (column names in order; int64, float64, bool, list<int64>, timestamps in
    ns UTC, strings dictionary-encoded as the core built them: ``dictionary<int32,
    string>``, one dictionary per chunk; ``tables_schema.arrow_schema(contract)`` gives
    the plain-string schema to cast to). ``counters`` holds each table's counters (what
    ``df.attrs["counters"]`` of ``dissector.partitions`` ... holds); ``deferred_pairs``
    how many pairs the core left to the Python decoder (malformed bodies).
    """

    partitions: pa.Table
    groups: pa.Table
    versions: pa.Table
    counters: dict[str, dict[str, int]]
    deferred_pairs: int = 0

    def table(self, name: str) -> pa.Table:
        if name not in CONTRACTS:
            raise ValueError(f"unknown table {name!r}; one of {', '.join(TABLE_NAMES)}")
        table: pa.Table = getattr(self, name)
        return table

    def frame(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """One table as the pandas frame of its contract (``string``, ``Int64``,
        ``Float64``, ``boolean``, ``datetime64[ns, UTC]``, lists of ints), its counters
        in ``df.attrs["counters"]``; ``columns``: only these (less memory), in the
        contract's order."""
        contract = CONTRACTS[name]
        if columns is not None:
            wanted = set(columns)
            contract = tuple(c for c in contract if c[0] in wanted)
        df = to_frame(self.table(name), contract)
        df.attrs["counters"] = dict(self.counters.get(name, {}))
        return df


def to_frame(table: pa.Table, contract: Contract) -> pd.DataFrame:
    """A table of the core as the pandas frame of its contract."""
    import pandas as pd

    data = {name: to_series(table.column(name), dtype) for name, dtype, _ in contract}
    return pd.DataFrame(data, columns=[c[0] for c in contract])


def to_series(column: pa.ChunkedArray, dtype: str) -> pd.Series:
    """One column of a table of the core as the pandas series of its contract's
    ``dtype`` (``to_frame``'s columns, one at a time)."""
    import pandas as pd
    import pyarrow as pa

    from dissector.arrow_cast import retype_column

    if pa.types.is_dictionary(column.type):
        column = retype_column(column, pa.string())
    if dtype == "object":
        return pd.Series(column.to_pylist(), dtype="object")
    mapper = {
        pa.string(): pd.StringDtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.float64(): pd.Float64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }
    series: pd.Series = column.to_pandas(types_mapper=mapper.get)
    return series


TableWriter = Callable[["pa.Table"], None]
"""Takes the batches of one table as they come (a Parquet writer), instead of a
collector keeping them."""


@dataclass
class TableCollector:
    """Takes the core's table buffers batch by batch (``Batch.tables``) and gives the
    pass's ``CaptureTables``. A table with a writer in ``writers`` is handed over
    batch by batch and not kept (its rows in ``written``): memory stays flat."""

    writers: dict[str, TableWriter] = field(default_factory=dict)
    wanted: frozenset[str] = frozenset(CONTRACTS)
    """The tables the pass builds; the others' stay empty, their APIs' bodies not read
    for them (the versions table is always built: it costs a counter a pair)."""
    parts: dict[str, list[pa.Table]] = field(default_factory=lambda: {n: [] for n in CONTRACTS})
    counters: dict[str, Counter[str]] = field(
        default_factory=lambda: {n: Counter() for n in CONTRACTS}
    )
    written: Counter[str] = field(default_factory=Counter)
    deferred: int = 0

    def add(self, taken: TablesBatch) -> None:
        """One ``Analyzer.take_tables()`` result."""
        for name, contract in CONTRACTS.items():
            buffers: TableBuffers = getattr(taken, name)
            self.counters[name].update(buffers.counters)
            if not buffers.rows:
                continue
            batch = _arrow(buffers.columns, contract, name)
            writer = self.writers.get(name)
            if writer is not None:
                writer(batch)
                self.written[name] += batch.num_rows
            else:
                self.parts[name].append(batch)
        self.deferred += taken.deferred_pairs

    def merge(self, other: TableCollector) -> None:
        """Add the tables another collector took (a capture read on its own)."""
        for name in CONTRACTS:
            self.parts[name].extend(other.parts[name])
            self.counters[name].update(other.counters[name])
        self.written.update(other.written)
        self.deferred += other.deferred

    def rows(self) -> int:
        """Rows taken so far, kept or handed to a writer."""
        kept = sum(t.num_rows for parts in self.parts.values() for t in parts)
        return kept + sum(self.written.values())

    def result(self) -> CaptureTables:
        import pyarrow as pa

        tables = {}
        for name, contract in CONTRACTS.items():
            parts = self.parts[name]
            schema = arrow_schema(contract, dictionary=True)
            tables[name] = pa.concat_tables(parts) if parts else schema.empty_table()
        return CaptureTables(
            partitions=tables["partitions"],
            groups=tables["groups"],
            versions=tables["versions"],
            counters={n: dict(c) for n, c in self.counters.items()},
            deferred_pairs=self.deferred,
        )


def _arrow(columns: dict[str, ColumnBuffer], contract: Contract, name: str) -> pa.Table:
    """One batch of a table's column buffers as Arrow, typed by its contract."""
    import pyarrow as pa

    from dissector.arrow_cast import retype_array

    given = list(columns)
    expected = [c[0] for c in contract]
    if given != expected:  # the core and the contract must agree, in order
        raise RuntimeError(f"{name} table: the core gave columns {given}, expected {expected}")
    arrays = [
        retype_array(arrow_column(columns[column]), arrow_type(dtype, dictionary=True))
        for column, dtype, _ in contract
    ]
    return pa.Table.from_arrays(arrays, schema=arrow_schema(contract, dictionary=True))
