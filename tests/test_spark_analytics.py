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
from dissector.spark.analytics import (
    ANALYTICS_TABLES,
    AnalyticsConfig,
    arrow_schema,
    capture_batches,
    parse_tables,
)

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
    path = _captures()[0]
    batches = list(capture_batches("cap-uri", path.read_bytes(), AnalyticsConfig((name,))))
    table = pa.Table.from_batches(batches)
    rows = pa.Table.from_arrays(
        table.column(name).combine_chunks().flatten(), schema=arrow_schema(name)
    )
    want = _pandas(name, path, "cap-uri")
    assert rows.schema.names == list(want.columns)
    assert len(want) > 0, f"{path.name} has no {name} rows: pick another capture"
    assert _canonical(rows.to_pandas()) == _canonical(want)


def test_task_skips_a_capture_that_is_not_one() -> None:
    assert list(capture_batches("junk", b"not a capture", AnalyticsConfig())) == []


@pytest.mark.spark
def test_spark_tables_equal_the_pandas_functions(spark: Any, tmp_path: Path) -> None:
    from dissector.spark.job import run_job

    captures = _captures()
    out = tmp_path / "out"
    report = run_job(spark, [str(p) for p in captures], str(out), window="1 minute")
    uris = {p: f"file:{p}" for p in captures}  # Spark's spelling of a local path
    for name in ANALYTICS_TABLES:
        got = pd.read_parquet(out / name)
        want = pd.concat([_pandas(name, p, uris[p]) for p in captures], ignore_index=True)
        assert list(got.columns) == list(want.columns), name
        assert report.tables[name] == len(want) > 0, name
        assert _canonical(got) == _canonical(want), name
        schema = spark.read.parquet(str(out / name)).schema
        assert [f.name for f in schema.fields] == list(want.columns)


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
