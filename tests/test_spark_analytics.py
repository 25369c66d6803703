"""The analytics tables (partitions, groups, versions, lag) in the Spark job's output.

The oracle is the pandas functions themselves (``dissector.partitions``, ``groups``,
``versions``) run on each capture file offline; the Spark tables, read back from the
job's Parquet, must hold the same columns (names, order, types) and the same rows,
with the capture named by its Spark URI and times floored to microseconds (Spark's
unit, as in the pairs table). The first tests need no Spark: they run the task-side
function directly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import dissector
from dissector.analytics.lag import lag_at_end
from dissector.options import Options
from dissector.spark.analytics import ANALYTICS_TABLES, arrow_schema, parse_tables

REPO = Path(__file__).resolve().parent.parent
OWN = REPO / "captures"
SHARED = REPO.parent / "shared" / "captures"
# captures with partitions (Produce/Fetch), group calls and ApiVersions negotiations
CHOSEN = [OWN / "kafka-4-mixed.pcapng", SHARED / "local-tansu-confluent-kafka.pcapng"]

FUNCTIONS: dict[str, Callable[..., pd.DataFrame]] = {
    "partitions": dissector.partitions,
    "groups": dissector.groups,
    "versions": dissector.versions,
    "lag": lambda capture: lag_at_end(dissector.partitions(capture)),
}


def _captures() -> list[Path]:
    found = [p for p in CHOSEN if p.is_file()]
    if not found:
        pytest.skip("no bundled capture")
    return found


def _pandas(name: str, path: Path, capture: str) -> pd.DataFrame:
    """The pandas table of one capture, as Spark holds it: capture renamed, times in us."""
    df = FUNCTIONS[name](str(path)).copy()
    df["capture"] = capture
    for column, dtype in df.dtypes.items():
        if str(dtype).startswith("datetime64"):
            df[column] = df[column].dt.floor("us").astype("datetime64[us, UTC]")
    return df


def _canonical(df: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Rows as comparable tuples: nulls as None, lists as tuples; sorted."""

    def cell(v: Any) -> Any:
        if hasattr(v, "tolist"):  # numpy scalars and arrays
            v = v.tolist()
        if isinstance(v, list | tuple):
            return tuple(v)
        if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v):
            return None
        return v.value // 1000 if isinstance(v, pd.Timestamp) else v

    rows = [tuple(cell(v) for v in row) for row in df.itertuples(index=False)]
    return sorted(rows, key=repr)


def test_tables_option_parses_names() -> None:
    assert parse_tables("all") == ANALYTICS_TABLES
    assert parse_tables("none") == parse_tables("") == ()
    assert parse_tables("versions, partitions") == ("partitions", "versions")
    with pytest.raises(ValueError, match="unknown table 'lags'"):
        parse_tables("lags")


@pytest.mark.parametrize("name", ANALYTICS_TABLES)
def test_task_rows_equal_the_pandas_function(name: str) -> None:
    from dissector.spark.tasks import DecodeConfig, RowOutput, decode_units

    path = _captures()[0]
    want = _pandas(name, path, "cap-uri")
    assert len(want) > 0, f"{path.name} has no {name} rows: pick another capture"
    for content in (path.read_bytes(), None):  # bytes Spark read, or the local file
        uri = "cap-uri" if content is not None else f"file:{path}"
        config = DecodeConfig(tables=(name,))
        out = RowOutput(config.tables, config.spark_batch_rows)
        table = pa.Table.from_batches(list(decode_units([([uri], content)], config, out)))
        mine = table.filter(pa.compute.equal(table.column("_table"), name))
        rows = pa.Table.from_arrays(
            mine.column(f"_{name}").combine_chunks().flatten(), schema=arrow_schema(name)
        )
        assert rows.schema.names == list(want.columns)
        want["capture"] = uri
        assert _canonical(rows.to_pandas()) == _canonical(want)


def _lag_captures() -> list[Path]:
    """Bundled and shared captures whose partitions tables give lag rows."""
    found = [OWN / "kafka-4-lag.pcapng", OWN / "kafka-4-longpoll-rotation.pcapng"]
    found += sorted(SHARED.glob("*.pcap*")) if SHARED.is_dir() else []
    return [p for p in found if p.is_file()]


def _mutant(table: pa.Table) -> pa.Table:
    """``table`` with each high watermark moved by -3..+3 (a partition's highest is
    then often not its latest, nor a client's latest position at its highest), and
    the last Fetch request unanswered, a second after the last time in the table (a
    capture that ends in a long poll: its end is that request, which lag never reads)."""
    import numpy as np

    rng = np.random.default_rng(19)
    watermark = table.column("high_watermark").to_numpy(zero_copy_only=False)
    shaken = np.where(np.isnan(watermark), np.nan, watermark + rng.integers(-3, 4, len(table)))
    table = _replaced(table, "high_watermark", pa.array(shaken, from_pandas=True).cast(pa.int64()))
    last_fetch = table.column("api_name").to_pylist()[::-1].index("Fetch")
    row = table.num_rows - 1 - last_fetch
    requests, responses = (table.column(c).cast(pa.int64()).to_pylist() for c in TIMES)
    latest = max(t for t in requests + responses if t is not None)
    requests[row], responses[row] = latest + 10**9, None
    for name, values in zip(TIMES, (requests, responses), strict=True):
        table = _replaced(table, name, pa.array(values, table.schema.field(name).type))
    return table


TIMES = ("request_time", "response_time")


def _replaced(table: pa.Table, name: str, column: pa.Array) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.field(index), column)


def test_lag_from_the_rows_kept_equals_lag_of_the_whole_table() -> None:
    """A task keeps of a capture's partitions rows only those lag reads (``LagRows``:
    most Fetch entries dropped, batch by batch); ``lag_at_end`` of them is
    ``lag_at_end`` of the whole table, however the batches are cut."""
    from dissector.analytics.lag import INPUTS
    from dissector.spark.analytics import LagRows, to_arrow
    from dissector.tables_schema import PARTITION_COLUMNS
    from dissector.wire.core import capture_tables
    from dissector.wire.tables import to_frame

    contract = tuple(c for c in PARTITION_COLUMNS if c[0] in INPUTS)
    compared = dropped = 0
    tables = [(p.name, capture_tables(str(p)).partitions) for p in _lag_captures()]
    tables += [(f"{name} (mutant)", _mutant(t)) for name, t in tables[:2]]
    for name, table in tables:
        want = to_arrow(lag_at_end(to_frame(table, contract)), "lag")
        for rows_per_batch in (7, 65_536):  # cut anywhere, or the core's batches
            kept = LagRows()
            for batch in table.to_batches(rows_per_batch):
                kept.add(pa.Table.from_batches([batch]))
            left = sum(t.num_rows for t in kept.others) + (
                kept.fetches.num_rows if kept.fetches is not None else 0
            )
            dropped += table.num_rows - left
            got = kept.table()
            assert got.schema == want.schema
            assert got.to_pylist() == want.to_pylist(), (name, rows_per_batch)
            compared += want.num_rows
    if compared == 0:
        pytest.skip("no capture with lag rows (../shared/captures absent?)")
    assert dropped > 0  # the long-poll capture's superseded Fetch entries


def test_task_gives_no_table_rows_for_a_capture_that_is_not_one() -> None:
    from dissector.spark.tasks import DecodeConfig, RowOutput, decode_units

    config = DecodeConfig(tables=ANALYTICS_TABLES)
    out = RowOutput(config.tables, config.spark_batch_rows)
    junk = [(["junk"], b"not a capture at all, just some bytes")]
    rows = pa.Table.from_batches(list(decode_units(junk, config, out))).to_pylist()
    assert sorted(r["_table"] for r in rows) == ["captures", "pairs"]
    trailer = next(r for r in rows if r["_table"] == "captures")["_capture_info"]
    assert trailer["failed"] and trailer["error"]


def test_task_reads_each_capture_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table of a capture comes from the one pass of the core that gives its
    pairs: the core opens each capture once."""
    from dissector.spark.tasks import DecodeConfig, RowOutput, decode_units
    from dissector.wire import core

    opened: list[str] = []
    real = core.open_capture

    def counting(analyzer: Any, source: Any) -> Any:
        opened.append(str(source))
        return real(analyzer, source)

    monkeypatch.setattr(core, "open_capture", counting)
    path = _captures()[0]
    config = DecodeConfig(tables=ANALYTICS_TABLES)
    out = RowOutput(config.tables, config.spark_batch_rows)
    table = pa.Table.from_batches(list(decode_units([([f"file:{path}"], None)], config, out)))
    kinds = set(table.column("_table").to_pylist())
    assert kinds == {"pairs", "captures", *ANALYTICS_TABLES}
    assert len(opened) == 1 and str(path) in opened[0], opened


def _every_capture(folder: Path) -> list[Path]:
    return sorted(p.resolve() for p in folder.rglob("*") if ".pcap" in p.name and p.is_file())


@pytest.fixture(scope="module")
def job(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Any]:
    """The command's job (every table) on every bundled and shared capture, each file
    its own capture (no chaining: the pandas side reads each file alone)."""
    from dissector.options import ChainRule
    from dissector.spark.job import run_job

    captures = _every_capture(OWN) + (_every_capture(SHARED) if SHARED.is_dir() else [])
    out = tmp_path_factory.mktemp("spark-analytics") / "out"
    options = Options(chain=ChainRule(mode="none"))
    report = run_job(spark, [str(p) for p in captures], str(out), options=options)
    assert report.captures == len(captures)
    return out, captures, report


def _pairs(path: Path, capture: str) -> list[tuple[Any, ...]]:
    """``dissector.analyze`` of one file in the pairs Parquet schema, canonical rows."""
    from dissector.table.frame import pairs_table

    df = dissector.analyze(str(path)).copy()
    df["capture"] = capture
    return _canonical(pairs_table(df).to_pandas())


def _spark_equals_pandas(job: tuple[Path, list[Path], Any], captures: list[Path]) -> dict[str, int]:
    import pyarrow.parquet as pq

    out, _, report = job
    got_pairs = pd.read_parquet(out / "pairs")
    got = {n: pd.read_parquet(out / n) for n in ANALYTICS_TABLES}
    for name in ANALYTICS_TABLES:  # every file in Spark's units (written as the core's)
        for part in (out / name).glob("*.parquet"):
            assert pq.read_schema(part).remove_metadata() == arrow_schema(name), part
    rows = dict.fromkeys(ANALYTICS_TABLES, 0)
    for path in captures:
        uri = f"file:{path}"  # Spark's spelling of a local path
        mine = got_pairs[got_pairs["capture"] == uri]
        assert _canonical(mine) == _pairs(path, uri), f"pairs of {path.name}"
        for name in ANALYTICS_TABLES:
            want = _pandas(name, path, uri)
            table = got[name]
            assert list(table.columns) == list(want.columns), name
            theirs = table[table["capture"] == uri]
            assert _canonical(theirs) == _canonical(want), f"{name} of {path.name}"
            rows[name] += len(want)
    assert all(report.tables[n] >= rows[n] for n in ANALYTICS_TABLES)
    return rows


@pytest.mark.spark
def test_spark_tables_equal_pandas_on_every_bundled_capture(job: Any) -> None:
    """pairs, partitions, groups, versions and lag: the Parquet the command writes
    holds, per capture, exactly the rows of ``dissector.analyze``, ``partitions``,
    ``groups``, ``versions`` and ``lag_at_end``."""
    bundled = [p for p in job[1] if p.is_relative_to(OWN.resolve())]
    assert len(bundled) >= 5, "the bundled captures went missing"
    rows = _spark_equals_pandas(job, bundled)
    assert all(rows[n] > 0 for n in ANALYTICS_TABLES), rows


@pytest.mark.spark
def test_spark_tables_equal_pandas_on_every_shared_capture(job: Any) -> None:
    shared = [p for p in job[1] if not p.is_relative_to(OWN.resolve())]
    if not shared:
        pytest.skip("../shared/captures is absent: the shared captures are not checked")
    rows = _spark_equals_pandas(job, shared)
    assert rows["partitions"] > 0 and rows["versions"] > 0, rows


@pytest.mark.spark
def test_cli_analytics_none_writes_no_analytics_tables(spark: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    out = tmp_path / "out"
    capture = str(_captures()[0])
    args = [capture, "--master", "local[2]", "-o", str(out)]
    result = CliRunner().invoke(spark_command, [*args, "--analytics", "none"])
    assert result.exit_code == 0, result.output
    assert (out / "pairs").is_dir() and not any((out / n).exists() for n in ANALYTICS_TABLES)
    result = CliRunner().invoke(spark_command, [*args, "--analytics", "groups"])
    assert result.exit_code == 0, result.output
    assert (out / "groups").is_dir() and not (out / "partitions").exists()
    assert f"groups: {len(dissector.groups(capture))} rows" in result.output
    bad = CliRunner().invoke(spark_command, [*args, "--analytics", "lags"])
    assert bad.exit_code == 2 and "unknown table 'lags'" in bad.output
