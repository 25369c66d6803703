"""Fleet analysis on Spark (local[2]) against the offline pipeline and plain-Python oracles.

The oracle for rows is ``dissector.analyze`` run per capture (the contract the Spark
job mirrors); the oracle for every summary table is computed here in plain Python and
numpy from those rows, without Spark. Broken captures are made here: random bytes and
an empty file, which the offline pipeline itself refuses (checked too).

One SparkSession serves the whole module (start-up costs tens of seconds on 2 cores).
The tests at the top need no Spark: they check the task-side decoder directly.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dissector
from dissector.schema import COLUMN_NAMES, COLUMNS
from dissector.spark.tasks import (
    CAPTURE_FAILED,
    DecodeConfig,
    ParquetOutput,
    RowOutput,
    decode_units,
    local_path,
)
from dissector.spark.typemap import INFO_COLUMN, TABLE_COLUMN, captures_arrow_schema
from tests.oracle.capture import CaptureError

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "captures"
OWN = REPO / "captures"
OWN_MAX_BYTES = 8 * 1024 * 1024  # keep the Spark run within a few minutes
OWN_MAX_FILES = 6
MIN_CAPTURES = 5
WINDOW_US = 60_000_000  # the job's default throughput window, 1 minute
KINDS = {c.name: c.kind for c in COLUMNS}

Row = dict[str, Any]


# --------------------------------------------------------------------------- captures


def _good_captures() -> list[Path]:
    found: list[Path] = []
    if SHARED.is_dir():
        found += sorted(p for p in SHARED.iterdir() if ".pcap" in p.name)
    if OWN.is_dir():
        own = sorted(
            p for p in OWN.iterdir() if ".pcap" in p.name and p.stat().st_size <= OWN_MAX_BYTES
        )
        found += own[:OWN_MAX_FILES]
    return [p.resolve() for p in found]


@pytest.fixture(scope="module")
def good_captures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    paths = _good_captures()
    if len(paths) < MIN_CAPTURES:
        pytest.skip(
            f"need at least {MIN_CAPTURES} captures from ../shared/captures or captures/, "
            f"found {len(paths)}"
        )
    # Spark lists files as URIs: a name that needs escaping must still match its rows.
    spaced = tmp_path_factory.mktemp("named") / "copy of a capture.pcap"
    shutil.copyfile(min(paths, key=lambda p: p.stat().st_size), spaced)
    return [*paths, spaced.resolve()]


@pytest.fixture(scope="module")
def broken_captures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("broken")
    noise = folder / "broken-random.pcap"
    noise.write_bytes(random.Random(7).randbytes(4000))
    empty = folder / "broken-empty.pcapng"
    empty.write_bytes(b"")
    return [noise.resolve(), empty.resolve()]


# --------------------------------------------------------------------------- normalising


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def _norm(name: str, value: Any) -> Any:
    """A value as plain Python: None, int, float, str, tuple; times as epoch µs."""
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(str(v) for v in value)
    if _is_missing(value):
        return None
    kind = KINDS.get(name)
    if kind == "timestamp" or isinstance(value, pd.Timestamp):
        return int(value) if isinstance(value, int) else pd.Timestamp(value).value // 1000
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    return value


def _pandas_rows(df: pd.DataFrame) -> list[Row]:
    return [{k: _norm(k, v) for k, v in rec.items()} for rec in df.to_dict(orient="records")]


def _spark_rows(df: Any) -> list[Row]:
    """Collect with times as epoch µs, so no Python time zone is involved."""
    from pyspark.sql import functions as F

    cols = [
        F.unix_micros(F.col(f.name)).alias(f.name)
        if f.dataType.typeName() == "timestamp"
        else F.col(f.name)
        for f in df.schema.fields
    ]
    return [{k: _norm(k, v) for k, v in r.asDict().items()} for r in df.select(*cols).collect()]


def _local(uri: str) -> str:
    return urlparse(uri).path if uri.startswith("file:") else uri


# --------------------------------------------------------------------------- oracle


@pytest.fixture(scope="module")
def expected(good_captures: list[Path]) -> list[Row]:
    """The offline pipeline's rows for every good capture, analysed one file at a time."""
    rows: list[Row] = []
    for path in good_captures:
        rows += _pandas_rows(dissector.analyze(str(path)))
    assert rows, "the captures hold no pairs at all"
    return rows


def _group(rows: Iterable[Row], key: Callable[[Row], tuple]) -> dict[tuple, list[Row]]:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return dict(groups)


def _inverted_cdf(values: list[float], p: float) -> float | None:
    """The smallest value with at least a share p of the values at or below it."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), p * 100, method="inverted_cdf"))


def _sum(values: Iterable[Any]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _answered(r: Row) -> bool:
    return r["status"] in ("ok", "error")


def _is_error(r: Row) -> bool:
    """The project's error rule (report, CLI summary): an error code, or undecodable."""
    return r["status"] in ("error", "malformed")


def _latency_oracle(rows: list[Row], key: Callable[[Row], tuple]) -> dict[tuple, tuple]:
    out = {}
    for k, members in _group(rows, key).items():
        lat = [r["latency_ms"] for r in members if r["latency_ms"] is not None]
        out[k] = (
            len(members),
            len(lat),
            _inverted_cdf(lat, 0.5),
            _inverted_cdf(lat, 0.9),
            _inverted_cdf(lat, 0.99),
            float(np.mean(lat)) if lat else None,
            max(lat) if lat else None,
        )
    return out


def _by_topic(rows: list[Row]) -> Iterator[Row]:
    for r in rows:
        for topic in dict.fromkeys(r["topics"] or ()):
            yield {**r, "topic": topic}


# --------------------------------------------------------------------------- no Spark


def _task_rows(uri: str, content: bytes | None, config: DecodeConfig) -> list[Row]:
    """What a task hands Spark for a one-file unit (rows through Spark)."""
    out = RowOutput(config.tables, config.spark_batch_rows)
    batches = list(decode_units([([uri], content)], config, out))
    assert all(b.schema.equals(out.schema) for b in batches)
    return pa.Table.from_batches(batches, schema=out.schema).to_pylist()


def _split(rows: list[Row]) -> tuple[list[Row], list[Row]]:
    """(pair rows as plain values without the decode-stage columns, trailer rows)."""
    trailers = [r for r in rows if r[TABLE_COLUMN] == "captures"]
    pairs = [
        {k: _norm(k, v) for k, v in r.items() if k not in (INFO_COLUMN, TABLE_COLUMN)}
        for r in rows
        if r[TABLE_COLUMN] == "pairs"
    ]
    return pairs, trailers


@pytest.mark.parametrize("route", ["local file", "bytes read by Spark"])
def test_task_decoder_rows_equal_offline_pipeline(good_captures: list[Path], route: str) -> None:
    """What a Spark task produces from a capture (the core streaming the local file, or
    the bytes Spark read) is analyze()'s rows."""
    path = max(good_captures, key=lambda p: len(dissector.analyze(str(p))))
    want = _pandas_rows(dissector.analyze(str(path)))
    uri, content = (
        (f"file:{path}", None) if route == "local file" else ("any://x", path.read_bytes())
    )
    config = DecodeConfig(batch_rows=3, spark_batch_rows=2)
    rows = _task_rows(uri, content, config)
    assert sum(1 for r in rows if r[TABLE_COLUMN] == "pairs") > 2, "batches should stream"
    pairs, trailer = _split(rows)
    assert len(trailer) == 1 and trailer[0]["capture"] == uri
    assert trailer[0][INFO_COLUMN]["pairs"] == len(want)
    assert trailer[0][INFO_COLUMN]["failed"] is False
    assert trailer[0][INFO_COLUMN]["size_bytes"] == path.stat().st_size
    assert {r["capture"] for r in pairs} == {uri}
    for r in want:
        r["capture"] = uri
    assert pairs == want


def test_task_writes_parquet_equal_to_analyze(good_captures: list[Path], tmp_path: Path) -> None:
    """Tasks that write the tables themselves: the pairs file is analyze -o's, the
    unanswered_requests file its unanswered rows, and Spark gets the trailer alone."""
    import pyarrow.parquet as pq

    from dissector.table.frame import pairs_arrow_schema

    path = max(good_captures, key=lambda p: len(dissector.analyze(str(p))))
    for table in ("pairs", "unanswered_requests"):
        (tmp_path / table).mkdir()
    config = DecodeConfig(output=str(tmp_path), token="tok", batch_rows=5)
    out = ParquetOutput(str(tmp_path), "tok", partition=3, attempt=0)
    batches = list(decode_units([([f"file:{path}"], None)], config, out))
    assert [b.schema for b in batches] == [captures_arrow_schema()] * len(batches)
    (trailer,) = pa.Table.from_batches(batches).to_pylist()
    assert trailer["capture"] == f"file:{path}" and not trailer["failed"]
    written = pq.read_table(tmp_path / "pairs" / "part-00003-tok.parquet")
    assert written.schema.equals(pairs_arrow_schema(), check_metadata=True)
    want = _pandas_rows(dissector.analyze(str(path)))
    for r in want:
        r["capture"] = f"file:{path}"
    assert _pandas_rows(written.to_pandas()) == want
    lost = pq.read_table(tmp_path / "unanswered_requests" / "part-00003-tok.parquet")
    assert _pandas_rows(lost.to_pandas()) == [r for r in want if r["status"] == "unanswered"]
    assert not list(tmp_path.rglob(".*.tmp"))


def test_task_writes_the_same_files_however_the_pairs_are_held(
    good_captures: list[Path], tmp_path: Path
) -> None:
    """The pairs a task holds before writing (``hold_rows``) change the row groups,
    not the rows: pairs, unanswered_requests and the summaries' partial tables are
    the same, and a failed capture's flag row comes after the pairs held before it."""
    import pyarrow.parquet as pq

    from dissector.spark.partials import SummaryPartials

    path = max(good_captures, key=lambda p: len(dissector.analyze(str(p))))
    units = [([f"file:{path}"], None), ([f"file:{tmp_path / 'gone.pcap'}"], None)]
    pairs = len(dissector.analyze(str(path)))
    written: dict[int, dict[str, pa.Table]] = {}
    for hold in (1, 7, pairs + 1):
        where = tmp_path / f"hold-{hold}"
        config = DecodeConfig(output=str(where), token="tok", batch_rows=5)
        out = ParquetOutput(str(where), "tok", 0, 0, SummaryPartials(WINDOW_US), hold_rows=hold)
        list(decode_units(units, config, out))
        files = sorted(where.rglob("*.parquet"))
        written[hold] = {str(f.relative_to(where)): pq.read_table(f) for f in files}
        groups = pq.ParquetFile(where / "pairs" / "part-00000-tok.parquet").metadata
        sizes = [groups.row_group(i).num_rows for i in range(groups.num_row_groups)]
        assert sum(sizes) == pairs + 1  # the flag row is a row group of its own
        assert sizes[-1] == 1 and all(n >= min(hold, pairs) for n in sizes[:-2])
    assert written[1].keys() == written[7].keys() == written[pairs + 1].keys()
    for name, table in written[1].items():
        for other in (written[7][name], written[pairs + 1][name]):
            if name.startswith("pairs/") or name.startswith("unanswered_requests/"):
                assert table.to_pylist() == other.to_pylist(), name
            else:  # one row per key; float sums in another order: to the last bits
                pd.testing.assert_frame_equal(
                    _sorted_frame(table), _sorted_frame(other), check_exact=False, rtol=1e-12
                )
    last = written[7]["pairs/part-00000-tok.parquet"].to_pylist()[-1]
    assert last["decode_error"].startswith(f"{CAPTURE_FAILED}: FileNotFoundError")


def _sorted_frame(table: pa.Table) -> pd.DataFrame:
    """A partial table as pandas, its rows in the order of their keys and values."""
    frame = table.to_pandas()
    return frame.sort_values(list(frame.columns), na_position="first").reset_index(drop=True)


def test_task_decoder_flags_a_broken_capture(broken_captures: list[Path]) -> None:
    for path in broken_captures:
        with pytest.raises(CaptureError):
            dissector.analyze(str(path))  # the offline pipeline refuses it too
        for uri, content in ((str(path), path.read_bytes()), (f"file:{path}", None)):
            pairs, trailers = _split(_task_rows(uri, content, DecodeConfig()))
            assert len(pairs) == len(trailers) == 1
            (flag,), (trailer,) = pairs, trailers
            assert flag["status"] == "malformed"
            why = "empty file" if path.stat().st_size == 0 else f"CaptureError: {path}"
            assert flag["decode_error"].startswith(f"{CAPTURE_FAILED}: {why}")
            info = trailer[INFO_COLUMN]
            assert info["failed"] is True and info["pairs"] == 0
            assert info["size_bytes"] == path.stat().st_size


def test_task_decoder_flags_a_missing_local_file(tmp_path: Path) -> None:
    gone = tmp_path / "gone.pcap"
    pairs, (trailer,) = _split(_task_rows(f"file:{gone}", None, DecodeConfig()))
    assert pairs[0]["decode_error"].startswith(f"{CAPTURE_FAILED}: FileNotFoundError")
    assert trailer[INFO_COLUMN]["failed"] is True


def test_task_decoder_keeps_rows_before_a_failure(
    good_captures: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decoder crash part-way: the rows before it stay, the capture is flagged."""
    import dissector.wire.core as decode_mod

    path = max(good_captures, key=lambda p: len(dissector.analyze(str(p))))
    whole = _pandas_rows(dissector.analyze(str(path)))
    real = decode_mod.iter_tables
    keep_rows = 3
    kept: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Iterator[Any]:
        # The core's batches vary in size from run to run (its reading runs ahead on
        # its own thread): the first rows, then the crash.
        for table in real(*args, **kwargs):
            kept.append(keep_rows)
            yield table.slice(0, keep_rows)
            raise RuntimeError("decoder bug")

    monkeypatch.setattr(decode_mod, "iter_tables", failing)
    rows = _task_rows("cap", path.read_bytes(), DecodeConfig(batch_rows=3))
    pairs, (trailer,) = _split(rows)
    keep = sum(kept)
    assert kept == [keep_rows]
    want = whole[:keep]
    assert [r["correlation_id"] for r in pairs[:keep]] == [r["correlation_id"] for r in want]
    assert len(pairs) == keep + 1
    assert pairs[keep]["decode_error"] == f"{CAPTURE_FAILED}: RuntimeError: decoder bug"
    assert trailer[INFO_COLUMN]["failed"] is True
    assert trailer[INFO_COLUMN]["pairs"] == keep


def test_local_paths_of_hadoop_uris() -> None:
    assert local_path("file:/data/a b.pcap") == "/data/a b.pcap"
    assert local_path("file:///data/a.pcap") == "/data/a.pcap"
    assert local_path("file://localhost/data/a.pcap") == "/data/a.pcap"
    assert local_path("file://otherhost/data/a.pcap") is None
    assert local_path("hdfs://nn:8020/data/a.pcap") is None


def test_plan_reads_local_files_in_tasks_and_refuses_what_spark_cannot_hold() -> None:
    from dissector.spark.read import Budget, CaptureFile, plan_units

    files = [
        CaptureFile("file:/a.pcap", 10),
        CaptureFile("file:/big.pcap", 5000),
        CaptureFile("hdfs://nn/b.pcap", 20),
        CaptureFile("hdfs://nn/huge.pcap", 3000),
    ]
    budget = Budget(1000, "spark.executor.memory (now 1g)")
    plan = plan_units(files, spark_budget=budget)
    # Local files are streamed by the core: no budget; largest first.
    assert [u[0].uri for u in plan.local_units] == ["file:/big.pcap", "file:/a.pcap"]
    assert [f.uri for f in plan.spark_reads] == ["hdfs://nn/b.pcap"]
    ((uri, size, why),) = plan.refused
    assert (uri, size) == ("hdfs://nn/huge.pcap", 3000)
    assert why == (
        "too large: 3000 bytes, over the 1000 bytes a task can hold; "
        "raise spark.executor.memory (now 1g)"
    )
    assert plan.files == 4 and plan.bytes == 5030
    capped = plan_units(files, spark_budget=budget, max_bytes=100, local_reads=False)
    assert [f.uri for f in capped.spark_reads] == ["file:/a.pcap", "hdfs://nn/b.pcap"]
    assert [r[0] for r in capped.refused] == ["file:/big.pcap", "hdfs://nn/huge.pcap"]


def test_failures_are_one_line_naming_the_setting() -> None:
    from dissector.spark.job import describe_failure

    class Py4JJavaError(Exception):
        pass

    class PythonException(Exception):
        pass

    oom = Py4JJavaError(
        "An error occurred while calling o98.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in "
        "stage 3.0 failed 1 times, most recent failure: Lost task 1.0 (TID 7) (127.0.0.1 "
        "executor driver): java.lang.OutOfMemoryError: Java heap space\n"
        "\tat java.base/java.util.Arrays.copyOf(Arrays.java:3537)\n"
    )
    assert describe_failure(oom, "local[2]") == (
        "Spark ran out of JVM memory (java.lang.OutOfMemoryError: Java heap space): "
        "raise spark.driver.memory"
    )
    assert describe_failure(oom, "yarn").endswith("raise spark.executor.memory")
    gone = ConnectionRefusedError("[Errno 111] Connection refused")
    assert describe_failure(gone, "local[2]") == (
        "Spark's JVM stopped during the job (out of memory?): raise spark.driver.memory"
    )
    task = PythonException(
        "\n  An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n  File ...\nOSError: [Errno 28] No space left\n"
    )
    assert describe_failure(task) == "a Spark task failed: OSError: [Errno 28] No space left"
    java = Py4JJavaError(
        "An error occurred while calling o12.toArrow.\n: java.lang.IllegalArgumentException: "
        "requirement failed: Number of partitions (0) must be positive.\n\tat scala..."
    )
    assert describe_failure(java) == (
        "the Spark job failed: java.lang.IllegalArgumentException: requirement failed: "
        "Number of partitions (0) must be positive."
    )
    assert all("\n" not in describe_failure(e) for e in (oom, gone, task, java))


def test_session_conf_keeps_local_runs_on_loopback() -> None:
    from dissector.spark.job import session_conf

    local = session_conf("local[2]", {"spark.sql.shuffle.partitions": "2"})
    assert local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.ui.enabled"] == "false"
    assert local["spark.sql.shuffle.partitions"] == "2"  # the caller's setting wins
    assert local["spark.sql.session.timeZone"] == "UTC"
    cluster = session_conf("yarn")
    assert "spark.driver.bindAddress" not in cluster and "spark.ui.enabled" not in cluster
    assert cluster["spark.sql.session.timeZone"] == "UTC"


def test_local_jvm_compiles_with_c1_alone(spark: Any) -> None:
    """The tests' local session, built as the command builds it: its JVM runs with C1
    alone (docs/spark.md, "Local runs"), read back from the running JVM itself."""
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert "-XX:TieredStopAtLevel=1" in list(runtime.getInputArguments())


def test_users_java_options_replace_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    from dissector.spark.job import LOCAL_JAVA_OPTIONS, _driver_java_options

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    key = "spark.driver.extraJavaOptions"
    local: dict[str, str] = {}
    with _driver_java_options(local, "local[2]", quiet=True):
        options = local[key].split()
        assert options[: len(LOCAL_JAVA_OPTIONS)] == list(LOCAL_JAVA_OPTIONS)
        assert options[-1].startswith("-Dlog4j2.configurationFile=file:")
    cluster: dict[str, str] = {}
    with _driver_java_options(cluster, "spark://host:7077", quiet=False):
        assert key not in cluster  # executors elsewhere keep their JIT; nothing to say
    mine = {key: "-Xss4m"}
    with _driver_java_options(mine, "local[2]", quiet=True):
        assert mine[key] == "-Xss4m"


def test_workers_run_the_drivers_python_in_local_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dissector.spark.job import worker_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert worker_python("local[2]", {}) == sys.executable
    assert worker_python("spark://h:7077", {}) is None  # the cluster's own default
    given = {"spark.pyspark.python": "/opt/env/bin/python"}
    assert worker_python("spark://h:7077", given) == "/opt/env/bin/python"
    assert worker_python("local[2]", given) == "/opt/env/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3.12")
    assert worker_python("local[2]", given) is None  # the user's environment wins
    monkeypatch.delenv("PYSPARK_PYTHON")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4242")
    assert worker_python("local[2]", {}) is None  # spark-submit has set it up


def test_worker_import_hint_names_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    from dissector.spark.job import worker_import_hint

    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")
    trace = (
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        "  File \"worker.py\", line 9\nModuleNotFoundError: No module named 'dissector'\n"
    )
    hint = worker_import_hint(RuntimeError(trace))
    assert hint is not None and "\n" not in hint
    assert "(/usr/bin/python3) cannot import 'dissector'" in hint
    assert "spark.pyspark.python" in hint
    assert worker_import_hint(RuntimeError("Java heap space")) is None


def test_path_string_matches_hadoop_path_spelling() -> None:
    from dissector.spark.read import path_string

    assert path_string("file:///data/a%20b.pcap") == "file:/data/a b.pcap"
    assert path_string("hdfs://nn:8020/c/x.pcap") == "hdfs://nn:8020/c/x.pcap"
    assert path_string("s3a://bucket/k%3D1/x.pcap") == "s3a://bucket/k=1/x.pcap"


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def all_paths(good_captures: list[Path], broken_captures: list[Path]) -> list[str]:
    return [str(p) for p in [*good_captures, *broken_captures]]


@pytest.fixture(scope="module")
def fleet(spark: Any, all_paths: list[str]) -> Iterator[Any]:
    from dissector.spark import load

    loaded = load(spark, all_paths)
    yield loaded
    loaded.unpersist()


@pytest.fixture(scope="module")
def spark_pairs(fleet: Any) -> list[Row]:
    rows = _spark_rows(fleet.pairs)
    for r in rows:
        r["capture"] = _local(r["capture"])
    return rows


@pytest.fixture(scope="module")
def summaries(fleet: Any) -> dict[str, Any]:
    from dissector.spark.aggregate import summaries as build

    return build(fleet.pairs)


@pytest.mark.spark
def test_schema_is_the_contract(fleet: Any) -> None:
    from pyspark.sql import types as T

    spark_kind = {
        "str": T.StringType(),
        "int": T.LongType(),
        "float": T.DoubleType(),
        "timestamp": T.TimestampType(),
        "str_list": T.ArrayType(T.StringType()),
    }
    schema = fleet.pairs.schema
    assert tuple(schema.fieldNames()) == COLUMN_NAMES
    for col in COLUMNS:
        assert schema[col.name].dataType == spark_kind[col.kind], col.name


@pytest.mark.spark
def test_one_task_per_capture(spark: Any, fleet: Any, all_paths: list[str]) -> None:
    from pyspark.sql import functions as F

    assert fleet.cached is not None
    tasks = (
        fleet.cached.select("capture", F.spark_partition_id().alias("task")).distinct().collect()
    )
    by_capture = _group((r.asDict() for r in tasks), lambda r: (_local(r["capture"]),))
    assert set(by_capture) == {(p,) for p in all_paths}
    assert all(len(v) == 1 for v in by_capture.values()), "a capture was split over tasks"
    assert len({r["task"] for r in tasks}) == len(all_paths), "captures shared a task"


@pytest.mark.spark
def test_a_task_given_one_core_runs_the_core_on_its_own_thread(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark gives each task one core (``spark.task.cpus``, 1 by default): the core
    runs on the task's thread; a task given more reads a step ahead on a second one."""
    import pyspark

    from dissector.spark.tasks import DecodeConfig, task_config

    def ahead(_: object) -> bool:
        return task_config(DecodeConfig()).core_ahead

    assert spark.sparkContext.parallelize([0, 1], 2).map(ahead).collect() == [False, False]

    class TwoCores:
        def cpus(self) -> int:
            return 2

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: TwoCores()))
    assert task_config(DecodeConfig()).core_ahead


@pytest.mark.spark
def test_files_spark_reads_give_the_same_rows(
    spark: Any, spark_pairs: list[Row], good_captures: list[Path]
) -> None:
    """The route for paths only the JVM can open (binaryFile bytes), taken on local
    files: the same rows as the core reading the files itself."""
    from dissector.spark import load

    chosen = good_captures[:3]
    fleet = load(spark, [str(p) for p in chosen], local_reads=False)
    try:
        assert len(fleet.plan.spark_reads) == len(chosen) and not fleet.plan.local_units
        got = _spark_rows(fleet.pairs)
    finally:
        fleet.unpersist()
    for r in got:
        r["capture"] = _local(r["capture"])
    names = {str(p) for p in chosen}
    want = [r for r in spark_pairs if r["capture"] in names]
    assert want and sorted(got, key=_row_key) == sorted(want, key=_row_key)


@pytest.mark.spark
def test_pairs_equal_pandas(
    spark_pairs: list[Row], expected: list[Row], broken_captures: list[Path]
) -> None:
    broken = {str(p) for p in broken_captures}
    good = [r for r in spark_pairs if r["capture"] not in broken]
    assert len(good) == len(expected)
    key = _row_key
    assert sorted(good, key=key) == sorted(expected, key=key)


@pytest.mark.spark
def test_long_poll_and_queueing_columns_reach_spark(spark_pairs: list[Row]) -> None:
    """The core's per-connection columns arrive under the contract's names, filled: the
    bundled capture has pipelined requests and every fetch_wait class."""
    mixed = [r for r in spark_pairs if r["capture"].endswith("kafka-4-mixed.pcapng")]
    assert mixed
    assert {r["fetch_wait"] for r in mixed} >= {"empty_poll", "data", "early"}
    assert max(r["inflight"] for r in mixed if r["inflight"] is not None) > 0
    assert any((r["queue_ms"] or 0) > 0 for r in mixed)
    answered = [r for r in mixed if r["latency_ms"] is not None and r["fetch_wait"] is None]
    assert all(r["service_ms"] == r["latency_ms"] for r in answered)


def _row_key(r: Row) -> tuple:
    return tuple(repr(r[name]) for name in COLUMN_NAMES)


@pytest.mark.spark
def test_rows_per_capture_and_status(spark_pairs: list[Row], expected: list[Row]) -> None:
    def counts(rows: Iterable[Row]) -> dict[tuple, int]:
        return {k: len(v) for k, v in _group(rows, lambda r: (r["capture"], r["status"])).items()}

    flagged = [r for r in spark_pairs if (r["decode_error"] or "").startswith(CAPTURE_FAILED)]
    got = counts(r for r in spark_pairs if r not in flagged)
    assert got == counts(expected)
    assert len(got) > MIN_CAPTURES


@pytest.mark.spark
def test_broken_captures_are_flagged_and_counted(
    fleet: Any, spark_pairs: list[Row], broken_captures: list[Path], good_captures: list[Path]
) -> None:
    from dissector.spark.job import collect_report

    broken = {str(p) for p in broken_captures}
    flagged = [r for r in spark_pairs if r["capture"] in broken]
    assert sorted(r["capture"] for r in flagged) == sorted(broken)
    for r in flagged:
        assert r["status"] == "malformed"
        empty = os.path.getsize(r["capture"]) == 0
        why = "empty file" if empty else "CaptureError"
        assert r["decode_error"].startswith(f"{CAPTURE_FAILED}: {why}"), r
    caps = {_local(r["capture"]): r for r in _spark_rows(fleet.captures)}
    assert set(caps) == broken | {str(p) for p in good_captures}
    assert {c for c, r in caps.items() if r["failed"]} == broken
    report = collect_report(fleet)
    assert report.failed == len(broken)
    assert report.captures == len(broken) + len(good_captures)
    assert sorted(_local(c) for c, _ in report.failures) == sorted(broken)


def _spark_table(df: Any, keys: tuple[str, ...], values: tuple[str, ...]) -> dict[tuple, tuple]:
    return {tuple(r[k] for k in keys): tuple(r[v] for v in values) for r in _spark_rows(df)}


def _assert_tables_equal(got: dict[tuple, tuple], want: dict[tuple, tuple]) -> None:
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        assert len(g) == len(w)
        for gv, wv in zip(g, w, strict=True):
            if isinstance(wv, float) and gv is not None:
                assert gv == pytest.approx(wv, rel=1e-9), k
            else:
                assert gv == wv, k


LAT_VALUES = ("requests", "answered", "p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms")
PERCENTILE_AT = (2, 3, 4)  # where the percentiles sit in LAT_VALUES
PERCENTILE_REL = 0.005
"""The percentiles' documented bound (``spark.partials``): within 0.5% of the exact
inverted-CDF value (latency buckets a factor 1.01 wide, the middle of a bucket's
extremes answered when the rank falls inside it)."""


def _assert_latency_tables(got: dict[tuple, tuple], want: dict[tuple, tuple]) -> None:
    """``_assert_tables_equal`` with the percentiles within ``PERCENTILE_REL`` of the
    oracle's exact values; at least one percentile of the tables is exact (a bucket's
    smallest or largest value, or a bucket of one distinct value)."""
    exact = 0
    for k, w in want.items():
        g = got.get(k)
        assert g is not None, k
        for i in PERCENTILE_AT:
            if w[i] is None:
                assert g[i] is None, k
                continue
            assert abs(g[i] - w[i]) <= PERCENTILE_REL * w[i], (k, LAT_VALUES[i], g[i], w[i])
            exact += g[i] == w[i]
    assert exact > 0
    keep = [i for i in range(len(LAT_VALUES)) if i not in PERCENTILE_AT]
    _assert_tables_equal(
        {k: tuple(v[i] for i in keep) for k, v in got.items()},
        {k: tuple(v[i] for i in keep) for k, v in want.items()},
    )


@pytest.mark.spark
@pytest.mark.parametrize(
    ("table", "keys"),
    [
        ("latency_by_api", ("api_key", "api_name", "api_version")),
        ("latency_by_broker", ("broker_ip", "broker_port")),
        ("latency_by_client", ("client_id",)),
    ],
)
def test_latency_percentiles(
    summaries: dict[str, Any], expected: list[Row], table: str, keys: tuple[str, ...]
) -> None:
    want = _latency_oracle(expected, lambda r: tuple(r[k] for k in keys))
    assert sum(v[1] for v in want.values()) > 0, "no answered pairs to check"
    _assert_latency_tables(_spark_table(summaries[table], keys, LAT_VALUES), want)


@pytest.mark.spark
def test_latency_per_topic(summaries: dict[str, Any], expected: list[Row]) -> None:
    want = _latency_oracle(list(_by_topic(expected)), lambda r: (r["topic"],))
    assert want, "no topics in the captures"
    _assert_latency_tables(
        _spark_table(summaries["latency_by_topic"], ("topic",), LAT_VALUES), want
    )


@pytest.mark.spark
def test_error_rates(summaries: dict[str, Any], expected: list[Row]) -> None:
    keys = ("api_key", "api_name", "api_version")
    want = {}
    for k, members in _group(expected, lambda r: tuple(r[n] for n in keys)).items():
        errors = sum(1 for r in members if _is_error(r))
        want[k] = (
            len(members),
            sum(1 for r in members if _answered(r)),
            errors,
            sum(1 for r in members if r["status"] == "unanswered"),
            _sum(r["error_count"] for r in members),
            errors / len(members),
        )
    assert sum(v[2] for v in want.values()) > 0, "no errors in the captures to check"
    values = ("requests", "answered", "errors", "unanswered", "error_codes", "error_rate")
    _assert_tables_equal(_spark_table(summaries["errors_by_api"], keys, values), want)


@pytest.mark.spark
def test_top_errors(summaries: dict[str, Any], expected: list[Row]) -> None:
    keys = ("api_name", "error_code", "error_name")
    failing = [r for r in expected if _answered(r) and r["error_code"] not in (None, 0)]
    want = {}
    for k, members in _group(failing, lambda r: tuple(r[n] for n in keys)).items():
        brokers = {
            (r["broker_ip"], r["broker_port"])
            for r in members
            if r["broker_ip"] is not None and r["broker_port"] is not None
        }
        want[k] = (len(members), len(brokers), len({r["capture"] for r in members}))
    assert want and len(want) <= 20, "the oracle expects all error groups to fit the top 20"
    got = _spark_table(summaries["top_errors"], keys, ("pairs", "brokers", "captures"))
    _assert_tables_equal(got, want)
    order = [r["pairs"] for r in _spark_rows(summaries["top_errors"])]
    assert order == sorted(order, reverse=True)


@pytest.mark.spark
def test_unanswered(summaries: dict[str, Any], expected: list[Row]) -> None:
    keys = ("broker_ip", "broker_port", "api_name", "api_version")
    lost = [r for r in expected if r["status"] == "unanswered"]
    assert lost, "no unanswered requests in the captures to check"
    want = {}
    for k, members in _group(lost, lambda r: tuple(r[n] for n in keys)).items():
        times = [r["request_time"] for r in members if r["request_time"] is not None]
        want[k] = (
            len(members),
            len({r["capture"] for r in members}),
            min(times) if times else None,
            max(times) if times else None,
        )
    values = ("unanswered", "captures", "first_request", "last_request")
    _assert_tables_equal(_spark_table(summaries["unanswered_summary"], keys, values), want)
    assert len(_spark_rows(summaries["unanswered_requests"])) == len(lost)


@pytest.mark.spark
def test_throughput_windows(summaries: dict[str, Any], expected: list[Row]) -> None:
    def start(r: Row) -> tuple:
        t = r["request_time"] if r["request_time"] is not None else r["response_time"]
        return (t - t % WINDOW_US,)

    timed = [r for r in expected if r["request_time"] is not None or r["response_time"]]
    want = {}
    for k, m in _group(timed, start).items():
        want[k] = (
            k[0] + WINDOW_US,
            len(m),
            sum(1 for r in m if _answered(r)),
            sum(1 for r in m if _is_error(r)),
            _sum(r["request_size"] for r in m),
            _sum(r["response_size"] for r in m),
            _sum(r["records"] for r in m),
            _sum(r["record_bytes"] for r in m),
        )
    assert len(want) > 1, "the captures should span several windows"
    values = (
        "window_end",
        "pairs",
        "answered",
        "errors",
        "request_bytes",
        "response_bytes",
        "records",
        "record_bytes",
    )
    got = _spark_table(summaries["throughput"], ("window_start",), values)
    _assert_tables_equal(got, want)


@pytest.mark.spark
def test_summary_tables_in_fewer_jobs_are_the_summaries(
    fleet: Any, summaries: dict[str, Any]
) -> None:
    """The job's four Spark jobs (every grouping's latency and errors in one
    aggregation, throughput rolled up over brokers on the driver) give each summary
    table as its own lazy DataFrame does (checked against the oracles above): same
    schema, same rows in the same order, null keys and the rows of failed captures
    included in the input."""
    from dissector.spark.aggregate import pair_partials, summary_tables, window_micros

    window_us = window_micros(fleet.pairs.sparkSession, "1 minute")
    assert window_us == WINDOW_US
    got = summary_tables(pair_partials(fleet.pairs, window_us), window_us=window_us)
    assert list(got) == [n for n in summaries if n != "unanswered_requests"]
    for name, table in got.items():
        want = summaries[name].toArrow()
        assert table.schema == want.schema, name
        _assert_rows_close(table.to_pylist(), want.to_pylist(), name)
    assert any(None in r.values() for r in got["latency_by_client"].to_pylist())
    assert got["throughput"].num_rows < got["throughput_by_broker"].num_rows  # sums made


@pytest.mark.spark
def test_cli_writes_parquet_tables(
    spark: Any,
    tmp_path: Path,
    good_captures: list[Path],
    broken_captures: list[Path],
) -> None:
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    chosen = [*good_captures[:3], broken_captures[0]]
    want_pairs = sum(len(dissector.analyze(str(p))) for p in good_captures[:3])
    out = tmp_path / "out"
    args = [*map(str, chosen), "--master", "local[2]", "-o", str(out), "--window", "10 seconds"]
    result = CliRunner().invoke(spark_command, [*args, "--progress-every", "0.1"])
    # the failure rule (issue #22): the broken capture is named, the rest written, exit 1
    assert result.exit_code == 1, result.output
    assert f"{len(chosen)} captures (1 failed to decode), {want_pairs} pairs" in result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: 1 of {len(chosen)} captures failed to decode (flagged in pairs and captures)"
    )
    # A long run shows progress; it ends with every file and byte counted.
    size = sum(p.stat().st_size for p in chosen) / 1e6
    assert f"decoding: {len(chosen)} of {len(chosen)} files, {size:.1f} of {size:.1f} MB" in (
        result.output
    )
    pairs = pd.read_parquet(out / "pairs")
    assert list(pairs.columns) == list(COLUMN_NAMES)
    assert len(pairs) == want_pairs + 1  # plus the row flagging the broken capture
    captures = pd.read_parquet(out / "captures")
    assert len(captures) == len(chosen) and int(captures["failed"].sum()) == 1
    for name in ("latency_by_api", "latency_by_topic", "top_errors", "throughput"):
        assert (out / name).is_dir(), name
    assert spark.sparkContext._jsc is not None, "the CLI stopped the caller's session"


@pytest.mark.spark
def test_cli_missing_path_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    missing = tmp_path / "no-such-capture.pcap"
    result = CliRunner().invoke(spark_command, [str(missing), "-o", str(tmp_path / "out")])
    assert result.exit_code == 1
    # the only path matches nothing: nothing to read, so no job and no output
    assert f"Error: no such file or directory: {missing}" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_pairs_writer_resolves_relative_paths_on_the_driver_and_writes_empty_tables(
    fleet: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from dissector.spark.write import write_pairs
    from dissector.table.frame import pairs_arrow_schema

    monkeypatch.chdir(tmp_path)  # the Python workers keep the directory they started in
    good = fleet.pairs.where("decode_error is null or decode_error not like 'capture_failed%'")
    rows = write_pairs(good, "rel/pairs")
    assert rows == good.count() > 0
    files = sorted((tmp_path / "rel" / "pairs").glob("part-*.parquet"))
    assert files and sum(pq.read_metadata(f).num_rows for f in files) == rows
    assert write_pairs(good.limit(0), "rel/empty") == 0
    (empty,) = (tmp_path / "rel" / "empty").glob("part-*.parquet")
    assert pq.read_schema(empty).equals(pairs_arrow_schema(), check_metadata=True)
    assert write_pairs(good.limit(0), "rel/pairs", mode="append") == 0
    assert len(list((tmp_path / "rel" / "pairs").glob("part-*.parquet"))) == len(files) + 1
    assert not list((tmp_path / "rel").rglob(".*.tmp"))


@pytest.mark.spark
def test_paths_are_sorted_into_files_directories_and_missing(
    spark: Any, tmp_path: Path, good_captures: list[Path]
) -> None:
    from dissector.spark.read import MissingPathError, resolve_paths

    folder = tmp_path / "dir"
    (folder / "sub").mkdir(parents=True)
    named = tmp_path / "a.pcap"
    named.write_bytes(b"x")
    (tmp_path / "b.pcap").write_bytes(b"x")
    gone = str(tmp_path / "gone.pcap")
    with pytest.raises(MissingPathError, match=r"gone\.pcap"):
        resolve_paths(spark, [str(named), gone])
    targets = resolve_paths(
        spark, [str(folder), str(tmp_path / "*.pcap"), gone, str(tmp_path / "z*")],
        skip_missing=True,
    )  # fmt: skip
    assert [_local(f) for f in targets.files] == [str(named), str(tmp_path / "b.pcap")]
    assert [_local(d) for d in targets.directories] == [str(folder)]
    assert targets.missing == (gone, str(tmp_path / "z*"))


@pytest.mark.spark
def test_directories_read_only_captures_by_default(
    spark: Any, tmp_path: Path, good_captures: list[Path]
) -> None:
    from dissector.spark import load

    source = min(good_captures, key=lambda p: p.stat().st_size)
    folder = tmp_path / "mixed"
    folder.mkdir()
    names = ["one.pcapng", "two.pcap", "three.pcap.gz"]
    for name in names:
        shutil.copyfile(source, folder / name)
    (folder / "README.md").write_text("# notes\n")
    (folder / "run.json").write_text("{}")
    explicit = tmp_path / "named.txt"
    shutil.copyfile(source, explicit)
    fleet = load(spark, [str(folder), str(explicit)])
    try:
        read = sorted(Path(_local(r["capture"])).name for r in fleet.captures.collect())
    finally:
        fleet.unpersist()
    assert read == sorted([*names, "named.txt"])
    everything = load(spark, [str(folder)], glob=None)
    try:
        assert everything.captures.count() == len(names) + 2
    finally:
        everything.unpersist()


@pytest.mark.spark
def test_cli_fails_when_every_capture_fails(spark: Any, broken_captures: list[Path]) -> None:
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    result = CliRunner().invoke(spark_command, [str(broken_captures[0])])
    assert result.exit_code == 1
    assert "every capture (1) failed to decode" in result.output
    assert "CaptureError" in result.output


@pytest.mark.spark
def test_captures_over_the_size_limit_are_flagged_not_read(
    spark: Any, good_captures: list[Path]
) -> None:
    from dissector.spark import load

    by_size = sorted(good_captures, key=lambda p: p.stat().st_size)
    small = by_size[:2]
    limit = small[-1].stat().st_size
    big = next(p for p in by_size if p.stat().st_size > limit)  # the next larger one
    chosen = [*small, big]
    fleet = load(spark, [str(p) for p in chosen], max_bytes=limit)
    try:
        caps = {_local(r["capture"]): r for r in _spark_rows(fleet.captures)}
        assert set(caps) == {str(p) for p in chosen}
        assert caps[str(big)]["failed"] is True
        assert caps[str(big)]["size_bytes"] == big.stat().st_size
        assert caps[str(big)]["error"].startswith(f"too large: {big.stat().st_size} bytes")
        assert [p for p, r in caps.items() if r["failed"]] == [str(big)]
        pairs = _spark_rows(fleet.pairs)
        want = sum(len(dissector.analyze(str(p))) for p in small)
        assert len([r for r in pairs if _local(r["capture"]) != str(big)]) == want
    finally:
        fleet.unpersist()


@pytest.mark.spark
def test_cli_without_output_dir_prints_the_summary(spark: Any, good_captures: list[Path]) -> None:
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    chosen = good_captures[:3]
    frames = [dissector.analyze(str(p)) for p in chosen]
    want_pairs = sum(len(df) for df in frames)
    result = CliRunner().invoke(spark_command, [str(p) for p in chosen])
    assert result.exit_code == 0, result.output
    assert f"{len(chosen)} captures (0 failed to decode), {want_pairs} pairs" in result.output
    for title in ("latency_by_api", "latency_by_broker", "top_errors", "unanswered_summary"):
        assert f"\n{title}\n" in result.output
    lost = pd.concat(frames).query("status == 'unanswered'")
    for t in lost["request_time"].dropna():
        # Printed in UTC whatever the local time zone, microseconds like Spark keeps them.
        assert t.tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S.%f") in result.output


@pytest.mark.spark
def test_counts_agree_with_the_offline_report(
    summaries: dict[str, Any], good_captures: list[Path]
) -> None:
    """Spark's per-broker counts are the pandas report's (dissector.analytics.stats.per_broker)."""
    from dissector.analytics import stats

    df = pd.concat([dissector.analyze(str(p)) for p in good_captures], ignore_index=True)
    report = stats.per_broker(df)
    want = {
        (str(r["broker_ip"]), int(r["broker_port"])): (
            int(r["count"]),
            int(r["errors"]),
            int(r["unanswered"]),
            float(r["error_rate"]),
        )
        for _, r in report.iterrows()
    }
    keys = ("broker_ip", "broker_port")
    got = _spark_table(
        summaries["errors_by_broker"], keys, ("requests", "errors", "unanswered", "error_rate")
    )
    assert sum(v[1] for v in want.values()) > 0
    _assert_tables_equal(got, want)


@pytest.mark.spark
def test_job_tables_are_the_fleets(
    spark: Any,
    fleet: Any,
    summaries: dict[str, Any],
    spark_pairs: list[Row],
    all_paths: list[str],
    tmp_path: Path,
) -> None:
    """The job's tasks write the pairs, Spark summarises the Parquet they wrote: every
    table equals the one computed from the rows held by Spark (checked against the
    oracle above), and the progress counts every file and byte."""
    from datetime import datetime

    import pyarrow.parquet as pq

    from dissector.spark.job import ProgressState, run_job

    seen: list[ProgressState] = []
    out = tmp_path / "out"
    report = run_job(
        spark, all_paths, str(out), analytics=(), on_progress=seen.append, progress_every=0.05
    )
    assert seen and seen[-1].files_done == seen[-1].files == len(all_paths)
    assert seen[-1].bytes_done == seen[-1].bytes == sum(os.path.getsize(p) for p in all_paths)
    pairs = _pandas_rows(pd.read_parquet(out / "pairs"))
    for r in pairs:
        r["capture"] = _local(r["capture"])
    assert sorted(pairs, key=_row_key) == sorted(spark_pairs, key=_row_key)
    assert report.tables["pairs"] == len(pairs)

    def capture_row(r: Row) -> Row:
        plain = {k: _norm(k, v) for k, v in r.items() if k not in ("counters", "decode_seconds")}
        return {**plain, "counters": {k: int(v) for k, v in dict(r["counters"]).items()}}

    want_caps = {_local(r["capture"]): capture_row(r.asDict()) for r in fleet.captures.collect()}
    got_frame = pd.read_parquet(out / "captures")
    got_caps = {_local(r["capture"]): capture_row(r) for r in got_frame.to_dict(orient="records")}
    assert got_caps == want_caps
    assert report.failed == len([r for r in got_caps.values() if r["failed"]]) > 0
    for name, df in summaries.items():
        want_rows = _spark_rows(df)
        got_rows = [
            {k: _norm(k, pd.Timestamp(v) if isinstance(v, datetime) else v) for k, v in r.items()}
            for r in pq.read_table(out / name).to_pylist()
        ]
        assert report.tables[name] == len(got_rows) == len(want_rows), name
        order = lambda r: repr(_rounded(r, 6))  # noqa: E731
        _assert_rows_close(sorted(got_rows, key=order), sorted(want_rows, key=order), name)


def _rounded(row: Row, digits: int = 10) -> Row:
    """Floats to ``digits`` significant digits."""
    return {k: float(f"{v:.{digits}g}") if isinstance(v, float) else v for k, v in row.items()}


def _assert_rows_close(got: list[Row], want: list[Row], name: str) -> None:
    """Equal rows, in order; floats to a relative 1e-9: sums over rows taken in another
    order differ in the last digits."""
    assert len(got) == len(want), name
    for mine, theirs in zip(got, want, strict=True):
        assert mine.keys() == theirs.keys(), name
        for key, value in mine.items():
            if isinstance(value, float) and isinstance(theirs[key], float):
                assert math.isclose(value, theirs[key], rel_tol=1e-9), (name, key, mine, theirs)
            else:
                assert value == theirs[key], (name, key, mine, theirs)
