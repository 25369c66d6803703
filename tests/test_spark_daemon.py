"""The Python workers' daemon (``dissector.spark.daemon``): workers import PySpark from
its installed directory, not from the zip the JVM puts first on their path."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dissector.spark.daemon import ALLOCATOR_DEFAULTS, allocator_settings, pruned_path

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed")

SPARK_HOME = Path(pyspark.__file__).parent
# What the JVM puts before the worker's own path (PythonUtils.sparkPythonPath).
ARCHIVES = sorted(str(p) for p in (SPARK_HOME / "python" / "lib").glob("*.zip"))
CORE_JAR = sorted(str(p) for p in (SPARK_HOME / "jars").glob("spark-core_*.jar"))


def _installed_path() -> list[str]:
    """This interpreter's path with the archives the JVM adds in front, as a worker's."""
    assert ARCHIVES and CORE_JAR, f"no pyspark.zip or spark-core jar under {SPARK_HOME}"
    return [*ARCHIVES, *CORE_JAR, *sys.path]


def test_archives_of_an_installed_pyspark_are_dropped() -> None:
    kept = pruned_path(_installed_path())
    assert kept == sys.path


def test_an_archive_with_a_module_found_nowhere_else_is_kept(tmp_path: Path) -> None:
    extra = tmp_path / "extra.zip"
    with zipfile.ZipFile(extra, "w") as archive:
        archive.writestr("only_in_this_zip/__init__.py", "")
    path = [str(extra), *_installed_path()]
    assert pruned_path(path) == [str(extra), *sys.path]


def test_an_archive_of_another_version_is_kept(tmp_path: Path) -> None:
    other = tmp_path / "pyspark-other.zip"
    with zipfile.ZipFile(ARCHIVES[-1]) as real, zipfile.ZipFile(other, "w") as archive:
        for name in real.namelist():
            if name.startswith("pyspark/") and name.count("/") == 1 and "version" not in name:
                archive.writestr(name, real.read(name))
        archive.writestr("pyspark/version.py", '__version__: str = "0.0.1"\n')
    kept = pruned_path([str(other), *sys.path])
    assert kept[0] == str(other)


def test_a_damaged_or_missing_archive_is_left_alone(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(b"PK\x03\x04 not really a zip")
    missing = str(tmp_path / "missing.zip")
    assert pruned_path([str(damaged), missing, *sys.path]) == [str(damaged), missing, *sys.path]


def test_spark_workers_import_pyspark_from_its_directory(spark: Any) -> None:
    """The job's workers, forked by the daemon the job names: PySpark's worker module is
    the installed file, and none of the JVM's archives is on their path."""

    def worker_facts(batches: Any) -> Any:  # defined here: pickled by value
        import pyarrow as pa
        import pyspark.worker

        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {
                    "worker": [pyspark.worker.__file__] * batch.num_rows,
                    "path": [list(sys.path)] * batch.num_rows,
                }
            )

    rows = spark.range(0, 2, 1, 2).mapInArrow(worker_facts, "worker string, path array<string>")
    for row in rows.collect():
        assert Path(row["worker"]).parent == SPARK_HOME, row["worker"]
        assert not set(ARCHIVES + CORE_JAR) & set(row["path"])


def test_spark_workers_keep_freed_pages_for_their_next_task(spark: Any) -> None:
    """The workers start with the allocator defaults in their environment, read by the
    native core's and pyarrow's mimalloc as they load."""

    def worker_env(batches: Any) -> Any:  # defined here: pickled by value
        import os

        import pyarrow as pa

        for batch in batches:
            values = [os.environ.get(n) for n in sorted(ALLOCATOR_DEFAULTS)]
            yield pa.RecordBatch.from_pydict({"env": [values] * batch.num_rows})

    rows = spark.range(0, 2, 1, 2).mapInArrow(worker_env, "env array<string>").collect()
    want = [ALLOCATOR_DEFAULTS[n] for n in sorted(ALLOCATOR_DEFAULTS)]
    assert [row["env"] for row in rows] == [want, want]


def test_an_allocator_setting_of_the_users_wins() -> None:
    # mimalloc's purge delay, as docs/spark.md (Memory) gives it
    assert allocator_settings({}) == {"MIMALLOC_PURGE_DELAY": "1000"}
    assert allocator_settings({"MIMALLOC_PURGE_DELAY": "0", "PATH": "/bin"}) == {}
