"""One Parquet writer: ``analyze -o`` and ``live -o`` files read back alike (no Spark here).

The Spark job's pairs table is checked against the same files in test_spark_cli.py.
The oracle for values is the in-memory frame of ``dissector.analyze``, times floored
to microseconds (the unit Spark can read, ``frame.PARQUET_TIME_UNIT``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.schema import COLUMN_NAMES, COLUMNS, NEVER_NULL
from dissector.table.frame import (
    compact_frame,
    pairs_arrow_schema,
    pairs_table,
    write_pairs_parquet,
)

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return dissector.analyze(str(BUNDLED))


def _analyze_file(tmp: Path) -> Path:
    out = tmp / "analyze.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "analyze", str(BUNDLED), "-o", str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def _live_file(tmp: Path) -> Path:
    from dissector.live.sinks import open_sink
    from dissector.options import Options
    from dissector.wire.core import iter_tables

    out = tmp / "live.parquet"
    # Arrow tables as live gets them from the native core (wire.core.arrow_schema).
    tables = list(iter_tables([str(BUNDLED)], Options()))
    assert len(tables) == 1
    sink = open_sink(str(out))
    # Two intervals, as a live run appends them: one row group (the sink gathers them:
    # tests/test_live_sinks.py), one schema.
    half = tables[0].num_rows // 2
    sink.write(tables[0].slice(0, half))
    sink.write(tables[0].slice(half))
    sink.close()
    return out


def test_analyze_and_live_files_read_back_identically(frame: pd.DataFrame, tmp_path: Path) -> None:
    analyze, live = _analyze_file(tmp_path), _live_file(tmp_path)
    assert pq.ParquetFile(live).num_row_groups == 1
    a, b = pq.read_schema(analyze), pq.read_schema(live)
    assert a.equals(b, check_metadata=True)
    assert a.equals(pairs_arrow_schema(), check_metadata=True)
    back_a, back_b = pd.read_parquet(analyze), pd.read_parquet(live)
    assert back_a.dtypes.to_dict() == back_b.dtypes.to_dict()
    pd.testing.assert_frame_equal(back_a, back_b)
    assert len(back_a) == len(frame) > 0


def test_file_restores_the_contract_dtypes(frame: pd.DataFrame, tmp_path: Path) -> None:
    """The file keeps the wide types of each kind (what Spark reads); ``compact_frame``
    turns what pandas reads back into the in-memory frame, dtypes and values."""
    out = tmp_path / "pairs.parquet"
    write_pairs_parquet(frame, out)
    schema = pq.read_schema(out)
    assert schema.names == list(COLUMN_NAMES)
    assert schema.field("request_time").type == pa.timestamp("us", tz="UTC")
    assert schema.field("capture").type == pa.string()  # not large_string: one type for all
    assert schema.field("api_key").type == pa.int64()
    back = pd.read_parquet(out)
    wide = {"str": "string", "int": "Int64", "float": "Float64", "str_list": "object"}
    for col in COLUMNS:
        if col.kind == "timestamp":
            assert str(back[col.name].dtype) == "datetime64[us, UTC]", col.name
        else:
            assert str(back[col.name].dtype) == wide[col.kind], (col.name, back[col.name].dtype)
    compact = compact_frame(back)
    for name in COLUMN_NAMES:
        assert compact[name].dtype == frame[name].dtype, (name, compact[name].dtype)
    # Values: equal, times floored to microseconds.
    expect = frame.copy()
    for name in ("request_time", "response_time"):
        expect[name] = expect[name].dt.floor("us")
    pd.testing.assert_frame_equal(compact, expect)


def test_arrow_input_and_empty_frames_write_the_same_schema(tmp_path: Path) -> None:
    from dissector.table.frame import records_to_frame

    empty = tmp_path / "empty.parquet"
    write_pairs_parquet(records_to_frame([]), empty)
    table = pairs_table(records_to_frame([]))
    arrow = tmp_path / "arrow.parquet"
    write_pairs_parquet(table.to_batches()[0] if table.num_rows else table, arrow)
    assert pq.read_schema(empty).equals(pq.read_schema(arrow), check_metadata=True)
    assert pq.read_metadata(empty).num_rows == 0


def test_a_table_without_the_contract_columns_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="missing columns"):
        write_pairs_parquet(pa.table({"capture": ["x"]}), tmp_path / "bad.parquet")
    assert not (tmp_path / "bad.parquet").exists()


def test_nanoseconds_are_floored_not_rounded(tmp_path: Path) -> None:
    from dissector.table.frame import records_to_frame

    frame = records_to_frame([])
    # Every column null but those a pair always has (schema.NEVER_NULL).
    row = {name: [0 if name in NEVER_NULL else None] for name in COLUMN_NAMES}
    row["request_time"] = [pd.Timestamp(1_700_000_000_123_456_999, tz="UTC")]
    df = pd.DataFrame(row).astype(frame.dtypes.to_dict())
    out = tmp_path / "t.parquet"
    write_pairs_parquet(df, out)
    got = pd.read_parquet(out)["request_time"].iloc[0]
    assert got.value == 1_700_000_000_123_456_000
