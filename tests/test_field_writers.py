"""``analyze -o x.jsonl / .json / .csv``: batch by batch, the same text as before (issue #21).

Oracle for the content: the per-row writers this replaces, kept here as they were
(``json.dumps(jsonable(row))`` of each row of ``dissector.analyze``'s frame; pandas'
``to_csv`` of it, strings made spreadsheet-safe); the files are parsed and compared
(JSON objects; CSV cells), on every bundled capture, through the command with and
without the summary table (which builds the whole frame first).
Memory: a 150,000-pair capture (``benchmarks/writers.py`` makes it) written by a fresh
process: its own peak (``VmHWM``) stays within a bound of the Parquet writer's peak
(the per-row JSON writer took 220 MiB more than Parquet at 100,000 pairs, this one 66).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import dissector
from dissector.cli.app import main
from dissector.json_values import jsonable
from dissector.schema import COLUMNS
from dissector.table.text_rows import csv_safe

REPO = Path(__file__).resolve().parents[1]
CAPTURES = sorted((REPO / "captures").glob("*.pcapng"))


def _old_jsonl(df: pd.DataFrame, path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in df.to_dict(orient="records"):
            fh.write(json.dumps(jsonable(row), ensure_ascii=False) + "\n")


def _old_csv(df: pd.DataFrame, path: Path) -> None:
    flat = df.copy()
    for col in COLUMNS:
        if col.kind == "str_list":
            flat[col.name] = flat[col.name].map(
                lambda v: ";".join(csv_safe(t) for t in v) if v is not None else ""
            )
        elif col.kind == "str":
            flat[col.name] = flat[col.name].map(csv_safe, na_action="ignore")
    with open(path, "w", encoding="utf-8", newline="") as fh:
        flat.to_csv(fh, index=False, header=True)


def _json_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # times: pandas writes a column's times with the digits its most precise one needs
    # in each chunk it writes; the instant is what must agree
    for row in rows:
        for name in ("request_time", "response_time"):
            if row[name]:
                row[name] = str(pd.Timestamp(row[name]).value)
    return rows


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "summary"])
def test_text_outputs_equal_the_per_row_writers(capture: Path, quiet: bool, tmp_path: Path) -> None:
    df = dissector.analyze(capture)
    _old_jsonl(df, tmp_path / "old.jsonl")
    _old_csv(df, tmp_path / "old.csv")
    runner = CliRunner()
    for ext in (".jsonl", ".json", ".csv"):
        out = tmp_path / f"new{ext}"
        args = ["analyze", str(capture), "-o", str(out)] + (["--quiet"] if quiet else [])
        result = runner.invoke(main, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        if ext == ".csv":
            assert _csv_rows(out) == _csv_rows(tmp_path / "old.csv")
        else:
            got = _json_rows(out)
            assert len(got) == len(df) > 0 or "tls" in capture.name
            assert got == _json_rows(tmp_path / "old.jsonl")
            # one batch a column: the text itself is the per-row writer's
            assert out.read_bytes() == (tmp_path / "old.jsonl").read_bytes()


PAIRS = 150_000

_PROBE = """
import sys
from dissector.cli.app import main
main(["analyze", sys.argv[1], "-o", sys.argv[2], "--quiet"], standalone_mode=False)
with open("/proc/self/status") as status:
    kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(kib * 1024)
"""


def _peak(capture: Path, out: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(capture), str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM needs Linux /proc")
def test_text_writers_memory_stays_near_parquets(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("writers", REPO / "benchmarks" / "writers.py")
    assert spec is not None and spec.loader is not None
    writers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writers)
    capture = tmp_path / "pairs.pcap"
    writers.make_capture(capture, PAIRS)
    parquet = _peak(capture, tmp_path / "x.parquet")
    out = tmp_path / "x.jsonl"  # CSV is written by the same batches
    peak = _peak(capture, out)
    # pandas' import (Parquet is written from Arrow without it) and one batch of rows
    assert peak < parquet + 128 * 2**20, (peak >> 20, parquet >> 20)
    assert out.read_text(encoding="utf-8").count("\n") == PAIRS
