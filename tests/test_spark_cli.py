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
    captures: list[Path]  # the files that should have been read and decoded
    broken: Path  # a file named on the command line that is not a capture


JVM_NOTE = "WARNING: Using incubator modules"  # the JVM's own start-up line


def spark_cli(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """``kafka-dissector spark ARGS`` as a user runs it (``command``, ``spark_env``)."""
    return subprocess.run(
        [*command(), "spark", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=spark_env() if env is None else env,
        check=False,
    )


def error_lines(stderr: str) -> list[str]:
    """The command's own stderr lines: the JVM's start-up note left out."""
    return [line for line in stderr.splitlines() if not line.startswith(JVM_NOTE)]


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
    broken = root / "broken.pcap"
    broken.write_bytes(b"this is not a capture file\n" * 4)
    missing = str(root / "nothing-here-*.pcap")
    out = root / "out"
    args = [str(folder), str(named), str(broken), missing, "--skip-missing", "--master", "local[2]"]
    done = spark_cli([*args, "-o", str(out)], root, env)
    return Run(done.returncode, done.stdout, done.stderr, out, read, broken)


@pytest.mark.spark
@pytest.mark.slow
def test_runs_from_a_virtualenv_that_is_not_activated(run: Run) -> None:
    assert run.code == 1, run.stderr[-4000:]  # the broken file (below)
    want = sum(len(dissector.analyze(str(p))) for p in run.captures)
    total = len(run.captures) + 1
    assert f"{total} captures (1 failed to decode), {want} pairs" in run.stdout
    assert f"pairs: {want + 1} rows" in run.stdout  # and the broken file's flagged row


@pytest.mark.spark
@pytest.mark.slow
def test_a_failed_capture_is_named_the_rest_written_and_the_exit_is_1(run: Run) -> None:
    """The failure rule of analyze, decode and report (issue #22): a file that is not a
    capture is named on stderr, the others are decoded and written, the exit status is 1."""
    assert run.code == 1
    assert f"failed: file:{run.broken}" in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        f"Error: 1 of {len(run.captures) + 1} captures failed to decode "
        "(flagged in pairs and captures)"
    )
    pairs = pd.read_parquet(run.out / "pairs")
    flagged = pairs[pairs["decode_error"].fillna("").str.startswith("capture_failed:")]
    assert list(flagged["capture"]) == [f"file:{run.broken}"]


@pytest.mark.spark
@pytest.mark.slow
def test_directory_reads_captures_named_files_always(run: Run) -> None:
    captures = pd.read_parquet(run.out / "captures")
    read = sorted(Path(c.removeprefix("file:")).name for c in captures["capture"])
    named = [*run.captures, run.broken]
    assert read == sorted(p.name for p in named)  # no README.md, no notes.json
    failed = captures[captures["failed"]]["capture"]
    assert list(failed) == [f"file:{run.broken}"]


@pytest.mark.spark
@pytest.mark.slow
def test_skip_missing_names_the_skipped_glob(run: Run) -> None:
    assert run.code == 1  # the broken file; the skipped glob alone leaves 0
    assert "skipped (no such file or directory): " in run.stderr
    assert "nothing-here-*.pcap" in run.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_quiet_by_default(run: Run) -> None:
    assert run.code == 1  # the broken file
    noises = ("Exception", "Traceback", "FutureWarning", "[Stage", " WARN ", "log4j", "log level")
    for noise in noises:
        assert noise not in run.stderr, (noise, run.stderr[-3000:])
    for noise in ("[Stage", "WARN"):
        assert noise not in run.stdout, noise
    # Left: the JVM's own start-up line(s), our skipped path, the failed file and the
    # closing error; nothing per task.
    assert len(run.stderr.splitlines()) <= 6, run.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_pairs_parquet_is_analyzes_schema_and_rows(run: Run, tmp_path: Path) -> None:
    assert run.code == 1  # the broken file, whose flagged row is left out below
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
    got = got[got["capture"] != f"file:{run.broken}"]
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
    assert run.code == 1  # the broken file; the tables are written all the same
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
    done = spark_cli([str(CAPTURES)], tmp_path, env, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: the spark command needs pyspark: pip install 'kafka-dissector[spark]' "
        "(and Java 17+)"
    ]


def test_an_output_folder_that_cannot_be_written_fails_before_spark_starts(
    tmp_path: Path,
) -> None:
    """The folder's parent is a file: one line naming the folder, exit 1, and no JVM
    (``JAVA_HOME`` points nowhere: starting Spark would fail with another error)."""
    spark_env()  # skips without pyspark
    plain = tmp_path / "a-file"
    plain.write_text("not a folder\n")
    env = dict(spark_env(), JAVA_HOME=str(tmp_path / "no-java"))
    capture = str(CAPTURES / "kafka-4-mixed.pcapng")
    done = spark_cli([capture, "-o", "a-file/out"], tmp_path, env, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == ["Error: cannot write a-file/out: Not a directory"]
    assert plain.read_text() == "not a folder\n"


@pytest.mark.spark
@pytest.mark.slow
def test_a_failed_job_is_one_line_without_a_java_trace(tmp_path: Path) -> None:
    """A setting the JVM rejects while the job runs: one line on stderr (besides the
    JVM's own start-up line), no Java or Python trace."""
    capture = str(CAPTURES / "kafka-4-mixed.pcapng")
    conf = ["--conf", "spark.sql.shuffle.partitions=0"]
    done = spark_cli(
        [capture, "--master", "local[2]", "-o", str(tmp_path / "out"), *conf], tmp_path
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("Error: the Spark job failed: "), lines
    assert "spark.sql.shuffle.partitions" in lines[0]
    assert lines[0].endswith("(--verbose shows Spark's log)")


@pytest.mark.spark
@pytest.mark.slow
def test_a_path_matching_nothing_is_named_skipped_and_fails_the_run(tmp_path: Path) -> None:
    """The failure rule of analyze, decode and report: a path that matches nothing is
    named, the captures that exist are decoded and written, the exit status is 1."""
    capture = CAPTURES / "kafka-4-mixed.pcapng"
    missing = str(tmp_path / "2026-11-2*-hour-*.pcap")
    out = tmp_path / "out"
    done = spark_cli([str(capture), missing, "--master", "local[2]", "-o", str(out)], tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"skipped (no such file or directory): {missing}" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: 1 path matched nothing (--skip-missing: no failure for those)"
    )
    assert len(pd.read_parquet(out / "pairs")) == len(dissector.analyze(str(capture)))
    assert "Traceback" not in done.stderr and "Exception" not in done.stderr
