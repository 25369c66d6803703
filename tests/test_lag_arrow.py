"""``analytics.lag_arrow.lag_at_end_arrow`` (what a Spark task computes lag with) against
``analytics.lag.lag_at_end`` (pandas, the definition) as the oracle: the same Arrow
table, floats to the last bit, on every bundled and shared capture, on mutants of the
captures with lag rows (inputs nulled, moved, flipped; earlier evaluation times), and on
every hand-built case of tests/test_lag.py."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dissector.analytics.lag import INPUTS, lag_at_end
from dissector.analytics.lag_arrow import lag_at_end_arrow
from dissector.spark.analytics import arrow_schema, lag_inputs, to_arrow
from dissector.tables_schema import PARTITION_COLUMNS
from dissector.wire.core import capture_tables
from dissector.wire.tables import to_frame
from tests import test_lag

REPO = Path(__file__).resolve().parent.parent
OWN = REPO / "captures"
SHARED = REPO.parent / "shared" / "captures"
CONTRACT = tuple(c for c in PARTITION_COLUMNS if c[0] in INPUTS)
TIMES = ("request_time", "response_time")
LAG_CAPTURES = ("kafka-4-lag.pcapng", "kafka-4-longpoll-rotation.pcapng", "kafka-4-mixed.pcapng")


def _captures() -> list[Path]:
    found = sorted(OWN.glob("*.pcap*"))
    found += sorted(SHARED.glob("*.pcap*")) if SHARED.is_dir() else []
    return [p for p in found if p.is_file()]


def _pandas(table: pa.Table, end: dict[str, int] | None = None) -> pa.Table:
    """The oracle: ``lag_at_end`` of the table as a pandas frame, as Arrow."""
    times = None if end is None else {c: pd.Timestamp(t, tz="UTC") for c, t in end.items()}
    return to_arrow(lag_at_end(to_frame(table, CONTRACT), times), "lag")


def _arrow(table: pa.Table, end: dict[str, int] | None = None) -> pa.Table:
    return lag_at_end_arrow(table, end).cast(arrow_schema("lag"), safe=False)


def _assert_same(table: pa.Table, end: dict[str, int] | None = None, what: str = "") -> int:
    want, got = _pandas(table, end), _arrow(table, end)
    assert got.schema == want.schema, what
    assert got.to_pylist() == want.to_pylist(), what
    return want.num_rows


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    """Each capture's partitions table (the core's Arrow), the columns lag reads."""
    return {p.name: lag_inputs(capture_tables(str(p)).partitions) for p in _captures()}


def test_equal_on_every_bundled_and_shared_capture(tables: dict[str, pa.Table]) -> None:
    rows = {name: _assert_same(table, what=name) for name, table in tables.items()}
    assert all(rows[name] > 0 for name in LAG_CAPTURES), rows


def _mutant(table: pa.Table, seed: int) -> pa.Table:
    """``table`` with inputs damaged at random: keys, times and offsets nulled, offsets
    and watermarks moved by a few, error codes set, transactions flipped (a Produce's
    first and last offsets nulled together: ``lag_at_end`` assumes a range has both)."""
    rng = np.random.default_rng(seed)
    n = table.num_rows

    def column(name: str) -> pa.Array:
        return table.column(name).combine_chunks()

    def nulled(array: pa.Array, share: float) -> pa.Array:
        mask = rng.random(n) < share
        return pa.array(
            [None if m else v for m, v in zip(mask, array.to_pylist(), strict=True)],
            array.type,
        )

    def moved(array: pa.Array, by: int) -> pa.Array:
        values = array.to_pylist()
        shifts = rng.integers(-by, by + 1, n).tolist()
        return pa.array([None if v is None else v + d for v, d in zip(values, shifts, strict=True)])

    out = {name: column(name) for name in table.column_names}
    out["high_watermark"] = moved(out["high_watermark"], 3)
    out["committed_offset"] = moved(out["committed_offset"], 2)
    for name in ("topic", "partition", "group_id", "client_id", "response_time"):
        out[name] = nulled(out[name], 0.03)
    out["error_code"] = pa.array(
        [3 if rng.random() < 0.03 else v for v in out["error_code"].to_pylist()], pa.int64()
    )
    flips = (rng.random(n) < 0.3).tolist()
    committed = out["txn_committed"].to_pylist()
    out["txn_committed"] = pa.array(
        [None if v is None else v != f for v, f in zip(committed, flips, strict=True)], pa.bool_()
    )
    gone = (rng.random(n) < 0.05).tolist()
    for name in ("first_offset", "last_offset"):
        values = out[name].to_pylist()
        out[name] = pa.array([None if g else v for g, v in zip(gone, values, strict=True)])
    return pa.table({name: out[name] for name in table.column_names})


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_equal_on_mutants_and_earlier_times(tables: dict[str, pa.Table], seed: int) -> None:
    compared = 0
    for name in LAG_CAPTURES:
        table = _mutant(tables[name], seed)
        compared += _assert_same(table, what=f"{name} mutant {seed}")
        times = pa.concat_arrays(
            [table.column(c).combine_chunks().cast(pa.int64()) for c in TIMES]
        ).drop_null()
        capture = table.column("capture").combine_chunks().dictionary.to_pylist()
        for share in (0.3, 0.7):  # evaluated part-way: later inputs left out
            end = {c: int(np.quantile(times.to_numpy(), share)) for c in capture}
            compared += _assert_same(table, end, f"{name} mutant {seed} at {share}")
    assert compared > 0


def _hand_built_cases() -> list[str]:
    """tests/test_lag.py's tests that call ``lag_at_end`` on frames they build (no
    fixture: the bundled capture is among the captures above)."""
    return [
        name
        for name, test in inspect.getmembers(test_lag, inspect.isfunction)
        if name.startswith("test_")
        and "lag_at_end(" in inspect.getsource(test)
        and not inspect.signature(test).parameters
    ]


@pytest.mark.parametrize("case", _hand_built_cases())
def test_equal_on_every_hand_built_case(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``lag_at_end`` call of the case, checked against the Arrow function on the
    same rows (the case's own assertions still run on the pandas result)."""
    calls: list[int] = []

    def both(parts: pd.DataFrame, end: Any = None, *, reduced: bool = False) -> pd.DataFrame:
        want = lag_at_end(parts, end, reduced=reduced)
        columns = parts[list(INPUTS)]
        table = pa.Table.from_pandas(columns, preserve_index=False)
        ns = None if end is None else {c: pd.Timestamp(t).value for c, t in end.items()}
        got = _arrow(table, ns)
        assert got.to_pylist() == to_arrow(want, "lag").to_pylist()
        calls.append(len(want))
        return want

    monkeypatch.setattr(test_lag, "lag_at_end", both)
    getattr(test_lag, case)()
    assert calls, f"{case} never called lag_at_end"
