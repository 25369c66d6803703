"""Runs over several captures put together (``table.analysis``): the frames of captures
read one at a time, combined, equal one run over them all (one core reading the files
apart, ``--no-chain``), rows and ``attrs`` alike; an unreadable capture costs only
itself."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dissector.options import CaptureSet, ChainRule, Options
from dissector.table.analysis import (
    CAPTURE_SETS_ATTR,
    COUNTERS_ATTR,
    TLS_ATTR,
    TLS_STREAMS_ATTR,
    combined_frame,
    each_capture,
    merged_run,
    run_analysis,
    run_attrs,
)

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
# Kafka in the clear, and Kafka over TLS without keys (tls_streams and the tls table).
PATHS = [str(CAPTURES / "kafka-4-mixed.pcapng"), str(CAPTURES / "tls-on-kafka-port.pcapng")]
APART = Options(chain=ChainRule(mode="none"))


def test_combined_frames_equal_one_run_over_the_captures() -> None:
    whole = run_analysis(list(PATHS), APART)
    parts = [run_analysis([p], APART) for p in PATHS]
    combined = combined_frame(parts)
    assert len(parts[0]) > 100 and whole.attrs[TLS_STREAMS_ATTR]  # both kinds present
    # the same values; pandas' concat widens categories that differ to strings
    pd.testing.assert_frame_equal(combined, whole, check_dtype=False, check_categorical=False)
    assert combined.attrs == whole.attrs
    counts = [p.attrs[COUNTERS_ATTR] for p in parts]
    assert combined.attrs[COUNTERS_ATTR]["bytes_read"] == sum(c["bytes_read"] for c in counts)


def test_merged_runs_equal_one_run_over_the_captures(tmp_path: Path) -> None:
    missing = str(tmp_path / "gone.pcapng")
    sets = [CaptureSet((p,)) for p in (PATHS[0], missing, PATHS[1])]
    failures: list[tuple[str, str]] = []
    runs = list(each_capture(sets, APART, failures=failures))
    assert [r.source.name for r in runs] == PATHS
    assert [name for name, _ in failures] == [missing]
    attrs = run_attrs(merged_run([r.run for r in runs]))
    whole = run_analysis(list(PATHS), APART).attrs
    assert attrs == whole
    assert set(attrs) == {COUNTERS_ATTR, TLS_STREAMS_ATTR, TLS_ATTR, CAPTURE_SETS_ATTR}


def test_no_frame_is_the_empty_contract_frame() -> None:
    empty = combined_frame([])
    assert len(empty) == 0 and list(empty.columns) == list(run_analysis([PATHS[1]], APART).columns)
