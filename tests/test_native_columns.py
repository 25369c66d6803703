"""The typed boundary of the native core's rows: column buffers and endpoints.

The pairs table's column names live in ``schema.COLUMNS`` alone; the core's list is
generated from it (``scripts/native-columns`` -> ``native/src/rows/columns.rs``) and the
buffers cross as one typed record per Arrow layout (``_core.Int64Column``, ...), the
connection ends as ``_core.Endpoint``. Endpoints are checked against the pure-Python
pipeline (``tests/oracle``), an implementation independent of the core.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from collections import Counter
from pathlib import Path

from dissector import _core
from dissector.options import Options
from dissector.schema import COLUMN_NAMES, COLUMNS
from dissector.wire.core import arrow_schema, columns_to_table, new_analyzer, open_capture
from dissector.wire.tables import TABLE_NAMES
from tests.oracle.pipeline import iter_exchanges as oracle_exchanges

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"

# What a schema kind crosses as.
BUFFER_OF_KIND: dict[str, type] = {
    "str": _core.DictColumn,
    "int": _core.Int64Column,
    "timestamp": _core.Int64Column,
    "float": _core.Float64Column,
    "str_list": _core.StrListColumn,
}


def _run_all(exchanges: bool) -> tuple[dict[str, object], list[_core.Exchange]]:
    """One run of the mixed capture: the first column batch and every exchange."""
    analyzer = new_analyzer(Options(), exchanges=exchanges)
    open_capture(analyzer, str(MIXED))
    first: dict[str, object] = {}
    kept: list[_core.Exchange] = []
    for _ in range(1000):  # the capture holds a few thousand pairs: a few batches
        more = analyzer.run(1_000_000)
        columns = analyzer.take_columns()
        first = first or dict(columns)
        kept += analyzer.take_exchanges()
        if not more:
            return first, kept
    raise AssertionError("the run did not end")


def test_generated_column_module_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "native-columns"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_every_schema_column_crosses_once_as_its_typed_buffer() -> None:
    columns, _ = _run_all(exchanges=False)
    assert sorted(columns) == sorted(COLUMN_NAMES)  # the model's extracts come last
    for c in COLUMNS:
        assert isinstance(columns[c.name], BUFFER_OF_KIND[c.kind]), c.name
    table = columns_to_table(columns, arrow_schema())  # type: ignore[arg-type]
    assert table.num_rows > 100
    assert set(table.column("api_name").to_pylist()) >= {"Produce", "Fetch", "Metadata"}


def test_exchange_endpoints_are_records_equal_to_the_python_pipeline() -> None:
    _, exchanges = _run_all(exchanges=True)
    native: Counter[tuple[str, int, str, int]] = Counter()
    for x in exchanges:
        for end in (x.client, x.broker):
            assert isinstance(end, _core.Endpoint)
            ipaddress.ip_address(end.ip)  # the address as text
        for frame in (x.request, x.response):
            if frame is not None:
                assert isinstance(frame.src, _core.Endpoint)
                assert {(frame.src.ip, frame.src.port), (frame.dst.ip, frame.dst.port)} == {
                    (x.client.ip, x.client.port),
                    (x.broker.ip, x.broker.port),
                }
        native[(x.client.ip, x.client.port, x.broker.ip, x.broker.port)] += 1
    oracle: Counter[tuple[str, int, str, int]] = Counter(
        (*ex.client, *ex.broker) for _, ex in oracle_exchanges(str(MIXED))
    )
    assert len(native) > 3
    assert native == oracle


def test_stage_exchanges_carry_typed_endpoints() -> None:
    """``wire.core.iter_exchanges`` hands ``stages.Exchange`` records whose ends are
    ``stages.Endpoint`` (ip, port by name), equal to the pure-Python pipeline's."""
    from dissector.stages import Endpoint
    from dissector.wire.core import iter_exchanges

    seen: Counter[tuple[Endpoint, Endpoint]] = Counter()
    for _, ex in iter_exchanges([str(MIXED)], Options()):
        ends = [ex.client, ex.broker]
        for frame in (ex.request, ex.response):
            if frame is not None:
                ends += [frame.src, frame.dst]
        for end in ends:
            assert type(end) is Endpoint
            ipaddress.ip_address(end.ip)
            assert 0 < end.port < 65536
        seen[(ex.client, ex.broker)] += 1
    oracle = Counter((ex.client, ex.broker) for _, ex in oracle_exchanges(str(MIXED)))
    for client, broker in oracle:
        assert type(client) is Endpoint and type(broker) is Endpoint
    assert len(seen) > 3
    assert seen == oracle


def test_table_int_columns_are_lent_to_arrow_without_a_copy() -> None:
    """The analytics tables' int64 columns cross as an ``Int64Buffer``: read-only, wrapped
    by Arrow in place (the array's data is the core's memory, not a copy), and still
    readable once the core's records of the batch are gone (Arrow holds the buffer)."""
    import ctypes
    import gc

    import pyarrow as pa
    import pytest

    from dissector.wire.native import arrow_column

    analyzer = new_analyzer(Options(), tables=TABLE_NAMES)
    open_capture(analyzer, str(REPO / "captures" / "kafka-4-lag.pcapng"))
    analyzer.run(1_000_000)
    batch = analyzer.take_tables()
    assert batch is not None
    rows = batch.partitions.rows
    assert rows > 100
    column = batch.partitions.columns["partition"]
    assert isinstance(column, _core.Int64Column)
    values = column.values
    assert isinstance(values, _core.Int64Buffer)
    view = memoryview(values)
    assert view.readonly and view.nbytes == len(values) == rows * 8
    with pytest.raises(TypeError):  # no writable export: Arrow's data must not change
        (ctypes.c_char * 8).from_buffer(values)  # type: ignore[arg-type]
    array = arrow_column(column)
    assert array.buffers()[1].address == pa.py_buffer(values).address
    expected = [int.from_bytes(view[i : i + 8], "little", signed=True) for i in range(0, 80, 8)]
    view.release()
    del view, values, column, batch
    gc.collect()
    assert array.fill_null(0).to_pylist()[:10] == expected
