"""What the report's speed work must not change (issue #19).

``stats.memoized`` computes the columns every statistic derives from the report's frame
once, as many as its byte budget holds: the page with it, whole or held to part of its
columns, must be the page without it (the oracle: the same statistics computed afresh
for every caller), and a caller changing what it got must not change what the next one
gets. ``report.run._Imports`` imports pandas and numpy while the
core reads the capture: that only helps if importing the report package (what the CLI
does before the pass) does not import them already.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dissector.analytics import report, stats

REPO = Path(__file__).resolve().parent.parent
CAPTURES = [
    REPO / "captures" / "kafka-4-mixed.pcapng",
    # long polls (fetch_wait, service latency) and many time buckets
    REPO / "captures" / "kafka-4-longpoll-rotation.pcapng",
]


@pytest.mark.parametrize("budget", ["default", "part"])
@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_memoized_page_equals_the_page_computed_afresh(
    capture: Path, budget: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not capture.is_file():
        pytest.skip(f"bundled capture missing: {capture}")
    df = report.analyze([capture], partition_columns=report.report_partition_columns())
    if budget == "part":
        # room for some of the columns, not all: the others are computed per caller
        monkeypatch.setattr(stats, "MEMO_MAX_BYTES", _kept_bytes(df) // 3)
    memoized = report.render(df, command="x")
    monkeypatch.setattr(stats, "memoized", lambda frame: contextlib.nullcontext())
    afresh = report.render(df, command="x")
    assert len(df) > 100
    assert memoized == afresh


def _kept_bytes(df: pd.DataFrame) -> int:
    from dissector.analytics.report import sections

    with stats.memoized(df):
        sections.sections(df, "x")
        memo = stats._memo
        assert memo is not None and memo.kept_bytes > 0
        return memo.kept_bytes


def test_the_memo_keeps_columns_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    capture = CAPTURES[0]
    if not capture.is_file():
        pytest.skip(f"bundled capture missing: {capture}")
    df = report.analyze([capture])
    event_bytes = int(stats.event_time(df).memory_usage(index=False))
    labels = stats.api_labels(df)
    labels_bytes = int(labels.memory_usage(index=False))
    monkeypatch.setattr(stats, "MEMO_MAX_BYTES", event_bytes + labels_bytes - 1)
    with stats.memoized(df):
        stats.event_time(df)  # within the budget: kept
        stats.api_labels(df)  # past the budget: computed, not kept
        stats.span_seconds(df)  # a summary: kept whatever the budget
        memo = stats._memo
        assert memo is not None
        assert sorted(memo.values) == ["event_time", "span_seconds"]
        assert memo.kept_bytes == event_bytes
        pd.testing.assert_series_equal(stats.api_labels(df), labels)


@pytest.mark.parametrize(
    "captures",
    [[CAPTURES[0]], [CAPTURES[1]], CAPTURES],
    ids=["mixed", "longpoll", "both"],
)
def test_the_digested_pass_gives_the_page_of_the_whole_table(captures: list[Path]) -> None:
    """``report.analyze(digest=True)`` (the report command's pass) keeps only the
    partitions rows read after the pass and adds the throughput up as it goes: the page
    is the page made from the whole table, with fewer rows kept."""
    if not all(c.is_file() for c in captures):
        pytest.skip("bundled capture missing")
    columns = report.report_partition_columns()
    whole = report.analyze(captures, partition_columns=columns)
    digested = report.analyze(captures, partition_columns=columns, digest=True)
    kept = digested.attrs[report.TABLES_ATTR].arrow.partitions.num_rows
    assert kept < whole.attrs[report.TABLES_ATTR].arrow.partitions.num_rows
    assert report.render(digested, command="x") == report.render(whole, command="x")


def test_a_caller_changing_a_memoized_value_changes_nobody_elses() -> None:
    capture = CAPTURES[0]
    if not capture.is_file():
        pytest.skip(f"bundled capture missing: {capture}")
    df = report.analyze([capture])
    expected_prepared = stats._prepared(df)
    expected_labels = stats.api_labels(df)
    with stats.memoized(df):
        first = stats._prepared(df)
        first["latency"] = -1.0  # what a caller may do with its copy
        first.loc[first.index[0], "records"] = -5.0
        labels = stats.api_labels(df)
        labels.iloc[0] = "changed"
        pd.testing.assert_frame_equal(stats._prepared(df), expected_prepared)
        pd.testing.assert_series_equal(stats.api_labels(df), expected_labels)
        # another frame (a subset) is not answered from the report frame's memo
        subset = df[df["api_name"].astype("object").eq("Fetch").fillna(False).astype(bool)]
        assert 0 < len(subset) < len(df)
        pd.testing.assert_series_equal(stats.event_time(subset), stats.event_time(df)[subset.index])


def test_importing_the_report_package_leaves_pandas_and_numpy_for_the_pass() -> None:
    probe = (
        "import sys\n"
        "from dissector.analytics import report\n"
        "report.report_file, report.analyze, report.report_partition_columns()\n"
        "print(sorted(m for m in ('pandas', 'numpy', 'dissector.analytics.charts')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "[]"


def test_the_packages_imported_during_the_pass_are_joined_and_their_failure_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``report.analyze`` imports the report's packages on a thread while the core reads
    the capture: the thread has ended when it returns, and an import that failed there
    (a broken install) is raised to the caller, as if imported on its own thread; an
    absent jinja2 fails before the pass."""
    import threading

    from dissector.analytics.report import run

    capture = CAPTURES[0]
    if not capture.is_file():
        pytest.skip(f"bundled capture missing: {capture}")
    df = report.analyze([capture])
    assert len(df) > 100
    assert not [t for t in threading.enumerate() if t.name == "report-imports"]

    def broken() -> None:
        raise ModuleNotFoundError("No module named 'jinja2'", name="jinja2")

    monkeypatch.setattr(run, "_import_packages", broken)
    with pytest.raises(ModuleNotFoundError, match="jinja2"):
        report.analyze([capture])
    assert not [t for t in threading.enumerate() if t.name == "report-imports"]

    real_find_spec = run.importlib.util.find_spec
    monkeypatch.setattr(
        run.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "jinja2" else real_find_spec(name, *a),
    )
    imports = run._Imports()
    with pytest.raises(ModuleNotFoundError, match="jinja2"):
        imports.start()  # what the pass calls once the core's worker has started
    assert imports.thread is None
