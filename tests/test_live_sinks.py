"""live's Parquet sink gathers the core's tables into large row groups.

A Parquet writer keeps each row group's metadata for the footer until it closes (about
30 KiB for the pairs schema), so one row group per interval made a long live run grow
without bound. The sink is fed the core's own Arrow tables (``core.iter_tables`` in
small batches, each with dictionaries of its own, as live's intervals are) and must
write the rows ``analyze -o`` writes, in few row groups.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dissector.live.sinks import ParquetSink
from dissector.options import Options
from dissector.table.frame import write_pairs_parquet
from dissector.wire import core

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"


class _Clock:
    """Seconds as a test sets them: a live run's intervals without waiting for them."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _own_dictionaries(table: pa.Table) -> pa.Table:
    """A slice re-encoded with dictionaries of its own, as each of live's tables has."""
    columns = [
        pc.dictionary_encode(col.cast(col.type.value_type))
        if pa.types.is_dictionary(col.type)
        else col
        for col in table.columns
    ]
    return pa.Table.from_arrays(columns, names=table.column_names)


@pytest.fixture(scope="module")
def pieces() -> list[pa.Table]:
    whole = pa.concat_tables(core.iter_tables([str(CAPTURE)], Options()))
    tables = [_own_dictionaries(whole.slice(i, 16)) for i in range(0, whole.num_rows, 16)]
    assert len(tables) > 20
    return tables


def _whole(tmp_path: Path) -> pd.DataFrame:
    """``analyze -o``'s file of the same capture, read back: the oracle."""
    path = tmp_path / "analyze.parquet"
    write_pairs_parquet(
        pd.concat([t.to_pandas() for t in core.iter_tables([str(CAPTURE)], Options())]), path
    )
    return pd.read_parquet(path)


def test_row_groups_by_rows_and_by_time(pieces: list[pa.Table], tmp_path: Path) -> None:
    clock = _Clock()
    path = tmp_path / "live.parquet"
    sink = ParquetSink(str(path), group_rows=100, group_seconds=60.0, clock=clock)
    sizes = []
    for table in pieces:
        clock.now += 1.0  # one interval a second
        sink.write(table)
        sizes.append(table.num_rows)
    sink.close()
    meta = pq.ParquetFile(path).metadata
    # a row group as soon as 100 rows wait (the pieces are 16 rows or fewer)
    assert meta.num_row_groups == sink.row_groups
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(groups) == sum(sizes) == sink.rows
    assert all(100 <= g < 100 + 16 for g in groups[:-1]) and 0 < groups[-1] < 100 + 16
    pd.testing.assert_frame_equal(pd.read_parquet(path), _whole(tmp_path))


def test_a_quiet_run_writes_a_row_group_a_minute(pieces: list[pa.Table], tmp_path: Path) -> None:
    clock = _Clock()
    path = tmp_path / "live.parquet"
    sink = ParquetSink(str(path), clock=clock)  # default 262,144 rows: never reached here
    for table in pieces:
        clock.now += 10.0  # ten seconds between intervals with rows
        sink.write(table)
    sink.close()
    meta = pq.ParquetFile(path).metadata
    # the first piece opens a group, the seventh (60 s later) closes it: 7 pieces a group
    expected = -(-len(pieces) // 7)
    assert meta.num_row_groups == sink.row_groups == expected
    pd.testing.assert_frame_equal(pd.read_parquet(path), _whole(tmp_path))


def test_empty_run_is_a_readable_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "live.parquet"
    ParquetSink(str(path)).close()
    assert pq.ParquetFile(path).metadata.num_rows == 0
