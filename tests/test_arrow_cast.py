"""``dissector.arrow_cast`` gives what Arrow's public ``cast``/``take`` give (the
oracle), and the ``analyze -o x.parquet`` path never imports ``pyarrow.compute`` or
pandas (start-up time, issue #10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dissector import arrow_cast
from dissector.arrow_cast import retype_array, retype_column, take

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"

UTC_NS = pa.timestamp("ns", tz="UTC")
UTC_US = pa.timestamp("us", tz="UTC")
WORDS = pa.array(["", "orders", "ü-topic", "payments-with-a-longer-name"])


def _same(got: pa.Array | pa.ChunkedArray, want: pa.Array | pa.ChunkedArray) -> None:
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist()
    assert got.null_count == want.null_count
    if isinstance(got, pa.Array):
        got.validate(full=True)


@pytest.mark.parametrize(
    "values",
    [
        [1_700_000_000_123_456_789, None, 5, 999, 1_000, 0],
        [-1, -999, -1_000, -1_001, -1_700_000_000_123_456_789, None],  # towards zero
        [],
        [None, None],
    ],
)
def test_times_to_a_coarser_unit_truncate_as_cast_does(values: list[int | None]) -> None:
    arr = pa.array(values, pa.int64()).view(UTC_NS)
    _same(retype_array(arr, UTC_US, safe=False), arr.cast(UTC_US, safe=False))
    sliced = arr.slice(1)
    _same(retype_array(sliced, UTC_US, safe=False), sliced.cast(UTC_US, safe=False))


def test_int64_as_times_and_renamed_list_items_are_views() -> None:
    ints = pa.array([3, None, 1_700_000_000_000_000_000], pa.int64())
    _same(retype_array(ints, UTC_NS), ints.cast(UTC_NS))
    lists = pa.array([["a", "b"], None, [], ["c"]], pa.list_(pa.string()))
    element = pa.list_(pa.field("element", pa.string()))
    _same(retype_array(lists, element), lists.cast(element))


@pytest.mark.parametrize("index_type", [pa.int8(), pa.int32(), pa.int64(), pa.uint16()])
def test_dictionary_of_strings_spelled_out_as_cast_does(index_type: pa.DataType) -> None:
    indices = pa.array([1, None, 3, 0, 2, 2, None, 1], index_type)
    arr = pa.DictionaryArray.from_arrays(indices, WORDS)
    _same(retype_array(arr, pa.string()), arr.cast(pa.string()))
    for start, length in ((1, 5), (3, 0), (7, 1)):
        part = arr.slice(start, length)
        _same(retype_array(part, pa.string()), part.cast(pa.string()))


def test_dictionary_without_words_and_all_nulls() -> None:
    none = pa.DictionaryArray.from_arrays(
        pa.array([None, None], pa.int32()), pa.array([], pa.string())
    )
    _same(retype_array(none, pa.string()), none.cast(pa.string()))
    empty = pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    _same(retype_array(empty, pa.string()), empty.cast(pa.string()))


def test_chunked_columns_keep_their_chunks() -> None:
    chunks = [
        pa.DictionaryArray.from_arrays(pa.array([0, 1], pa.int32()), WORDS),
        pa.DictionaryArray.from_arrays(pa.array([None, 3, 2], pa.int32()), WORDS.slice(0)),
    ]
    column = pa.chunked_array(chunks)
    got = retype_column(column, pa.string())
    assert got.num_chunks == 2
    _same(got, column.cast(pa.string()))


def test_take_matches_take() -> None:
    idx = pa.array([3, 0, None, 1, 2, 3], pa.int32())
    _same(take(WORDS, idx), WORDS.take(idx))


@pytest.mark.parametrize("kernels", ["private", "public"])
def test_other_casts_and_the_public_route(kernels: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if kernels == "public":  # as if a pyarrow release moved pyarrow._compute's functions
        monkeypatch.setattr(arrow_cast, "_kernels", lambda: None)
    ints = pa.array([1, None, 300], pa.int64())
    _same(retype_array(ints, pa.int32()), ints.cast(pa.int32()))
    with pytest.raises(pa.ArrowInvalid):  # a lossy safe cast still refuses
        retype_array(pa.array([1, 2**40], pa.int64()), pa.int32())
    times = pa.array([1_999, -1_999, None], pa.int64()).view(UTC_NS)
    _same(retype_array(times, UTC_US, safe=False), times.cast(UTC_US, safe=False))
    idx = pa.array([2, None, 0], pa.int32())
    _same(take(WORDS, idx), WORDS.take(idx))


_PROBE = """
import json, sys
from dissector.cli import main
try:
    main(["analyze", sys.argv[1], "-o", sys.argv[2], "--quiet"])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code,
      "loaded": sorted(m for m in ("pyarrow.compute", "pandas") if m in sys.modules)}))
"""


def test_analyze_to_parquet_imports_neither_compute_nor_pandas(tmp_path: Path) -> None:
    out = tmp_path / "pairs.parquet"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("KAFKA_DISSECTOR_CACHE", None)
    for _ in range(2):  # the first run builds the start-up cache (which uses pandas)
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(BUNDLED), str(out)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "loaded": []}
    # And the file is the one pandas' route writes.
    import dissector
    from dissector.table.frame import export

    export(dissector.analyze(BUNDLED), tmp_path / "via-pandas.parquet")
    assert pq.read_table(out).equals(pq.read_table(tmp_path / "via-pandas.parquet"))
