"""``kafka-dissector spark`` as a user runs it: a subprocess, a virtualenv not activated.

One run of the command (``local[2]``) serves the module: its PATH does not contain the
virtualenv, so a Python worker started as ``python3`` from the PATH would lack pyarrow
and the package; the command must start workers with its own interpreter. The folder
it reads holds captures plus a README.md and a .json (not captures: the default glob
leaves them out), a capture with an odd extension named explicitly (read: named files
are always read) and a glob that matches nothing (skipped with ``--skip-missing``).

Oracles: ``dissector.analyze`` on the same captures (rows, values) and the Parquet file
of ``analyze -o`` (schema with its metadata, and pandas dtypes).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.schema import COLUMN_NAMES
from dissector.table.frame import write_pairs_parquet

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"
CLI_TIMEOUT_S = 900  # a JVM and a Spark job on a loaded 2-core machine


def spark_env() -> dict[str, str]:
    """The environment of a shell where the virtualenv is not activated."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark)")
    java = shutil.which("java")
    if java is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+")
    venv_bin = str(Path(sys.executable).parent)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != venv_bin]
    path = [d for d in ("/usr/bin", "/bin", *path) if not d.startswith(venv_bin)]
    if java is not None:
        path.insert(0, str(Path(java).parent))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PATH")
    }
    env["PATH"] = os.pathsep.join(dict.fromkeys(path))
    env["PYTHONPATH"] = str(REPO)  # this checkout's package, also for the workers
    return env


def command() -> list[str]:
    """The console script of this interpreter's environment, as a user would type it."""
    script = Path(sys.executable).parent / "kafka-dissector"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "dissector.cli"]


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str
    out: Path
    captures: list[Path]  # the files that should have been read


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    env = spark_env()
    root = tmp_path_factory.mktemp("spark-cli")
    folder = root / "captures"
    folder.mkdir()
    read = []
    for name in ("kafka-4-mixed.pcapng", "tls-on-kafka-port.pcapng"):
        shutil.copyfile(CAPTURES / name, folder / name)
        read.append(folder / name)
    (folder / "README.md").write_text("# not a capture\n")
    (folder / "notes.json").write_text("{}\n")
    named = root / "named-capture.bin"
    shutil.copyfile(CAPTURES / "kafka-4-mixed.pcapng", named)
    read.append(named)
    missing = str(root / "nothing-here-*.pcap")
    out = root / "out"
    args = [str(folder), str(named), missing, "--skip-missing", "--master", "local[2]"]
    done = subprocess.run(
        [*command(), "spark", *args, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        cwd=root,
        env=env,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr, out, read)


@pytest.mark.spark
@pytest.mark.slow
def test_runs_from_a_virtualenv_that_is_not_activated(run: Run) -> None:
    assert run.code == 0, run.stderr[-4000:]
    want = sum(len(dissector.analyze(str(p))) for p in run.captures)
    assert f"{len(run.captures)} captures (0 failed to decode), {want} pairs" in run.stdout


@pytest.mark.spark
@pytest.mark.slow
def test_directory_reads_captures_named_files_always(run: Run) -> None:
    captures = pd.read_parquet(run.out / "captures")
    read = sorted(Path(c.removeprefix("file:")).name for c in captures["capture"])
    assert read == sorted(p.name for p in run.captures)  # no README.md, no notes.json
    assert not captures["failed"].any()


@pytest.mark.spark
@pytest.mark.slow
def test_skip_missing_names_the_skipped_glob(run: Run) -> None:
    assert run.code == 0
    assert "skipped (no such file or directory): " in run.stderr
    assert "nothing-here-*.pcap" in run.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_quiet_by_default(run: Run) -> None:
    assert run.code == 0
    noises = ("Exception", "Traceback", "FutureWarning", "[Stage", " WARN ", "log4j", "log level")
    for noise in noises:
        assert noise not in run.stderr, (noise, run.stderr[-3000:])
    for noise in ("[Stage", "WARN"):
        assert noise not in run.stdout, noise
    # Left: the JVM's own start-up line(s) and our skipped path; nothing per task.
    assert len(run.stderr.splitlines()) <= 4, run.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_pairs_parquet_is_analyzes_schema_and_rows(run: Run, tmp_path: Path) -> None:
    assert run.code == 0
    want = pd.concat([dissector.analyze(str(p)) for p in run.captures], ignore_index=True)
    reference = tmp_path / "analyze.parquet"
    write_pairs_parquet(want, reference)  # what analyze -o writes (frame.export)
    parts = sorted((run.out / "pairs").glob("*.parquet"))
    assert parts, "no pairs files"
    for part in parts:
        assert pq.read_schema(part).equals(pq.read_schema(reference), check_metadata=True)
    for name in ("pairs", "unanswered_requests"):
        table = pq.read_schema(next((run.out / name).glob("*.parquet")))
        assert table.equals(pq.read_schema(reference), check_metadata=True), name

    got = pd.read_parquet(run.out / "pairs")
    ref = pd.read_parquet(reference)
    assert got.dtypes.to_dict() == ref.dtypes.to_dict()
    # Same rows: captures named by their URI in Spark, by their path in analyze.
    got["capture"] = got["capture"].str.removeprefix("file:")
    key = ["capture", "stream", "correlation_id", "request_time", "response_time"]
    got = got.sort_values(key, ignore_index=True, na_position="first")
    ref = ref.sort_values(key, ignore_index=True, na_position="first")
    assert list(got.columns) == list(COLUMN_NAMES)
    for frame in (got, ref):
        frame["topics"] = frame["topics"].map(lambda t: None if t is None else list(t))
    pd.testing.assert_frame_equal(got, ref)


@pytest.mark.spark
@pytest.mark.slow
def test_summary_tables_have_utc_microsecond_times(run: Run) -> None:
    assert run.code == 0
    schema = pq.read_schema(next((run.out / "throughput").glob("*.parquet")))
    assert str(schema.field("window_start").type) == "timestamp[us, tz=UTC]"
    schema = pq.read_schema(next((run.out / "unanswered_summary").glob("*.parquet")))
    assert str(schema.field("first_request").type) == "timestamp[us, tz=UTC]"


def test_without_pyspark_one_line_names_the_extra(tmp_path: Path) -> None:
    """No JVM needed: a ``pyspark`` that cannot be imported stands for a missing install."""
    blocker = tmp_path / "block" / "pyspark"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('pyspark is not installed')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker.parent), str(REPO)]))
    done = subprocess.run(
        [*command(), "spark", str(CAPTURES)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: the spark command needs pyspark: pip install 'kafka-dissector[spark]' "
        "(and Java 17+)"
    ]


@pytest.mark.spark
@pytest.mark.slow
def test_a_failed_job_is_one_line_without_a_java_trace(tmp_path: Path) -> None:
    """A setting the JVM rejects while the job runs: one line on stderr (besides the
    JVM's own start-up line), no Java or Python trace."""
    done = subprocess.run(
        [
            *command(),
            "spark",
            str(CAPTURES / "kafka-4-mixed.pcapng"),
            "--master",
            "local[2]",
            "-o",
            str(tmp_path / "out"),
            "--conf",
            "spark.sql.shuffle.partitions=0",
        ],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        cwd=tmp_path,
        env=spark_env(),
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [
        line
        for line in done.stderr.splitlines()
        if not line.startswith("WARNING: Using incubator modules")
    ]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("Error: the Spark job failed: "), lines
    assert "spark.sql.shuffle.partitions" in lines[0]
    assert lines[0].endswith("(--verbose shows Spark's log)")
