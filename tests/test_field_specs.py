"""``--specs`` input treated as hostile: bounded depth, bounded inflation, one clear line.

A directory holding a JSON file nested 200,000 deep (json.loads recursed until a
RecursionError traceback), and a 1 MB jar whose spec entry inflates to 1 GiB (2.6 GB
and a MemoryError before): each is refused with one line naming the file, in a child
process whose peak memory and time are measured.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from dissector.protocol.sources import MAX_JSON_DEPTH, json_depth

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"


def _analyze_with(specs: Path) -> tuple[subprocess.CompletedProcess[str], float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "analyze", str(MIXED), "--specs", str(specs)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest child so far: only a rise is this child's
    return proc, time.perf_counter() - t0, max(peak, before) * 1024


def _one_clear_line(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("Error: cannot load specs: ")
    for word in words:
        assert word in lines[0]


def test_deeply_nested_json_is_refused(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "Deep.json").write_text("[" * 200_000 + "]" * 200_000)
    proc, seconds, _ = _analyze_with(specs)
    _one_clear_line(proc, "Deep.json", "nested deeper than")
    assert seconds < 30


def test_a_jar_entry_that_inflates_without_bound_is_refused(tmp_path: Path) -> None:
    jar = tmp_path / "kafka-clients-bomb.jar"
    name = "common/message/BombRequest.json"
    with (
        zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z,
        z.open(name, "w", force_zip64=True) as entry,
    ):
        chunk = b" " * (1 << 20)
        for _ in range(1024):  # 1 GiB of blanks, about 1 MB compressed
            entry.write(chunk)
    assert jar.stat().st_size < 2 << 20
    proc, seconds, peak = _analyze_with(jar)
    _one_clear_line(proc, "BombRequest.json", "too large for a message spec")
    assert seconds < 30
    assert peak < 1 << 30


def test_json_depth_counts_nesting_outside_strings() -> None:
    assert json_depth('{"a": [1, {"b": "[[[[{{"}], "c": "\\\\\\"["}') == 3
    assert json_depth("[]") == 1
    apache = {"fields": [{"fields": [{"fields": []}]}]}
    assert json_depth(json.dumps(apache)) == 6 < MAX_JSON_DEPTH


@pytest.mark.parametrize("text", ["[1, 2]", '"a string"', "3"])
def test_json_that_is_not_an_object_is_not_a_spec(tmp_path: Path, text: str) -> None:
    from dissector.protocol.sources import parse_json_spec

    assert parse_json_spec(text, "x.json") is None
