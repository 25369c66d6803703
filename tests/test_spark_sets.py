"""Capture sets on Spark: a real capture cut into rotated files (``editcap -c`` by packet
count and ``editcap -i`` by time, Wireshark's own cutter) and read by the ``spark`` job as
one capture gives exactly the whole file's rows, pair by pair, and its partitions rows; a
capture of another recording beside them stays apart.

The oracle is the whole original capture analysed offline (``dissector.analyze``). The
capture is ``kafka-4-longpoll-rotation`` (57 connections of a long-poll workload: many
pairs cross each boundary; captures/README.md).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.options import ChainRule, Options
from tests.test_spark import _local, _pandas_rows, _row_key, _spark_rows
from tests.test_spark_analytics import _canonical, _pandas

REPO = Path(__file__).resolve().parent.parent
LONGPOLL = REPO / "captures" / "kafka-4-longpoll-rotation.pcapng"
OTHER = REPO / "captures" / "kafka-4-mixed.pcapng"
EDITCAP = shutil.which("editcap")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if EDITCAP is None:
        pytest.skip("editcap (Wireshark) is not installed: scripts/run-tests installs it")
    where = tmp_path_factory.mktemp("ring")
    subprocess.run(
        [EDITCAP, "-c", "600", str(LONGPOLL), str(where / "ring.pcapng")],
        check=True,
        capture_output=True,
    )
    assert len(list(where.glob("ring*"))) >= 10
    shutil.copyfile(OTHER, where / "other-host.pcapng")
    return where


def _parts(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("ring*"))


def _without_capture(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({**r, "capture": None} for r in rows), key=_row_key)


def _partitions_without_capture(df: pd.DataFrame) -> list[tuple[Any, ...]]:
    return _canonical(df.assign(capture=None))


def _whole_partitions() -> list[tuple[Any, ...]]:
    """``dissector.partitions`` of the whole original capture, in Spark's units."""
    want = _pandas("partitions", LONGPOLL, "whole")
    assert len(want) > 1000, "the long-poll capture should have many partitions rows"
    return _partitions_without_capture(want)


@pytest.mark.spark
def test_rotated_files_are_one_capture_on_spark(spark: Any, folder: Path, tmp_path: Path) -> None:
    from dissector.spark.job import run_job

    parts = _parts(folder)
    out = tmp_path / "out"
    report = run_job(spark, [str(folder)], str(out), analytics=("partitions",))
    assert report.sets == [tuple(f"file:{p}" for p in parts)]
    got = _pandas_rows(pd.read_parquet(out / "pairs"))
    ring = [r for r in got if r["capture"] == f"file:{parts[0]}"]
    other = [r for r in got if r["capture"] == f"file:{folder / 'other-host.pcapng'}"]
    assert len(ring) + len(other) == len(got)
    assert _without_capture(ring) == _without_capture(
        _pandas_rows(dissector.analyze(str(LONGPOLL)))
    )
    assert _without_capture(other) == _without_capture(_pandas_rows(dissector.analyze(str(OTHER))))
    parts_rows = pd.read_parquet(out / "partitions")
    ring_parts = parts_rows[parts_rows["capture"] == f"file:{parts[0]}"]
    assert _partitions_without_capture(ring_parts) == _whole_partitions()
    captures = {r["capture"]: r for r in pq.read_table(out / "captures").to_pylist()}
    assert set(captures) == {f"file:{parts[0]}", f"file:{folder / 'other-host.pcapng'}"}
    assert captures[f"file:{parts[0]}"]["files"] == [f"file:{p}" for p in parts]
    assert captures[f"file:{parts[0]}"]["size_bytes"] == sum(Path(p).stat().st_size for p in parts)
    assert dict(captures[f"file:{parts[0]}"]["counters"])["chained_files"] == len(parts) - 1
    assert report.captures == 2 and report.failed == 0


@pytest.mark.spark
def test_without_chaining_the_boundaries_break_pairs(spark: Any, folder: Path) -> None:
    """Rows held by Spark, every file a capture of its own: the offline pipeline's rows
    for the files read apart, with pairs broken at the boundaries (the proof that the
    test above stitched something)."""
    from dissector.spark import load

    parts = _parts(folder)
    fleet = load(spark, parts, options=Options(chain=ChainRule(mode="none")))
    try:
        assert fleet.plan.sets == ()
        got = _spark_rows(fleet.pairs)
    finally:
        fleet.unpersist()
    for r in got:
        r["capture"] = _local(r["capture"])
    want = _pandas_rows(dissector.analyze(parts, chain="none"))
    assert sorted(got, key=_row_key) == sorted(want, key=_row_key)
    broken = sum(r["status"] in ("unanswered", "orphan_response") for r in got)
    whole = dissector.analyze(str(LONGPOLL))
    assert broken > int((whole["status"] == "unanswered").sum()) + len(parts)


def test_facts_rows_group_as_the_offline_rule(folder: Path) -> None:
    """The facts stage's rows (as a cluster's tasks make them) rebuild the facts the
    offline rule groups: the same capture sets as ``capture_sets`` on the paths."""
    import pyarrow as pa

    from dissector.spark.tasks import FACTS_SCHEMA, facts_from_rows, facts_partition
    from dissector.wire.sets import capture_sets, group_sets

    paths = [*_parts(folder), str(folder / "other-host.pcapng"), str(folder / "missing.pcap")]
    batch = pa.RecordBatch.from_pylist([{"uri": f"file:{p}"} for p in paths])
    (rows,) = list(facts_partition([batch]))
    assert rows.schema.equals(FACTS_SCHEMA)
    facts, unread = facts_from_rows(rows.to_pylist())
    assert unread == [f"file:{folder / 'missing.pcap'}"]
    got = [[str(f).removeprefix("file:") for f in s.files] for s in group_sets(facts)]
    want = [list(s.files) for s in capture_sets(paths[:-1])]
    assert sorted(got) == sorted(want) and len(want) == 2


@pytest.mark.spark
def test_facts_read_by_spark_tasks_are_the_drivers(spark: Any, folder: Path) -> None:
    """The facts stage a cluster runs (Spark tasks where the files are, over a frame the
    JVM makes of the driver's file names), here on the local session: every file's
    facts as the driver's own walk (local mode's road) reads them, the file it cannot
    read among the unread."""
    from dissector.spark.read import facts_on_executors
    from dissector.spark.tasks import facts_from_rows, facts_row

    paths = [*_parts(folder), str(folder / "other-host.pcapng"), str(folder / "missing.pcap")]
    uris = [f"file:{p}" for p in paths]
    got_facts, got_unread = facts_from_rows(facts_on_executors(spark, uris, 3))
    want_facts, want_unread = facts_from_rows(facts_row(uri) for uri in uris)
    assert sorted(got_facts, key=str) == sorted(want_facts, key=str)
    assert len(got_facts) == len(uris) - 1
    assert got_unread == want_unread == [uris[-1]]


@pytest.mark.spark
def test_spark_dir_of_files_cut_by_time_gives_the_whole_files_rows(
    spark: Any, tmp_path: Path
) -> None:
    """``kafka-dissector spark DIR`` on the capture cut every second (``editcap -i 1``):
    one capture set, every pair and every status count of the whole file, and its
    partitions rows."""
    from click.testing import CliRunner

    from dissector.cli.spark import spark_command

    if EDITCAP is None:
        pytest.skip("editcap (Wireshark) is not installed: scripts/run-tests installs it")
    ring = tmp_path / "ring"
    ring.mkdir()
    subprocess.run(
        [EDITCAP, "-i", "1", str(LONGPOLL), str(ring / "cut.pcapng")],
        check=True,
        capture_output=True,
    )
    parts = sorted(ring.iterdir())
    assert len(parts) >= 10
    out = tmp_path / "out"
    args = [str(ring), "--master", "local[2]", "-o", str(out), "--analytics", "partitions"]
    result = CliRunner().invoke(spark_command, args)
    assert result.exit_code == 0, result.output
    got = _pandas_rows(pd.read_parquet(out / "pairs"))
    whole = dissector.analyze(str(LONGPOLL))
    assert {r["capture"] for r in got} == {f"file:{parts[0]}"}
    assert _without_capture(got) == _without_capture(_pandas_rows(whole))
    statuses = pd.read_parquet(out / "pairs")["status"].value_counts().to_dict()
    assert statuses == whole["status"].value_counts().to_dict()
    assert _partitions_without_capture(pd.read_parquet(out / "partitions")) == _whole_partitions()
    (set_row,) = pq.read_table(out / "captures").to_pylist()
    assert set_row["files"] == [f"file:{p}" for p in parts]
