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
import io
import json
import math
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
from dissector.table.frame import export
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
                lambda v: "" if v is None or v is pd.NA else ";".join(csv_safe(t) for t in v)
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


# Values the capture does not hold: every string hazard (CSV delimiter, quote, line ends,
# formula starts, control characters, non-ASCII, surrogate pairs), floats whose notation
# differs between Arrow and repr (whole numbers, the 1e-4 and 1e16 edges, extremes, NaN
# and the infinities), times of every precision, before 1970 and missing, list cells.
STRINGS = ["", "a,b", 'say "hi"', "line\nbreak", "cr\rx", "=1+2", "-x", "@sum", "\ttab",
           "caf\u00e9", "\u2028sep", "esc\x1b[31m", "nul\x00", "back\\slash",
           "emoji \U0001f600", None]  # fmt: skip
FLOATS = [0.0, -0.0, 1.0, 0.1, 1e-4, 9.999e-5, 1e16, 9999999999999998.0, 1e22, 5e-324,
          1.7976931348623157e308, 123456.789, math.nan, math.inf, -math.inf, None]  # fmt: skip
TIMES = [0, 1, 1000, 10**9, 1_700_000_000_123_456_789, -1, -1_000_000_001, None,
         1_700_000_000_000_001_000, 2**62, -(2**62), 5, 6, 7, 8, None]  # fmt: skip
LISTS = [[], None, ["a"], ["x,y", 'q"'], ["=cmd"], ["\n"], ["caf\u00e9", ""], ["a", "b", "c"]]


def _crafted() -> pd.DataFrame:
    import pyarrow as pa

    df = dissector.analyze(REPO / "captures" / "kafka-4-mixed.pcapng").head(len(STRINGS))
    df = df.reset_index(drop=True)
    df["client_id"] = pd.Categorical(STRINGS)
    df["latency_ms"] = pd.array(FLOATS, dtype="double[pyarrow]")
    df["request_time"] = pd.to_datetime(pd.array(TIMES, dtype="Int64"), unit="ns", utc=True)
    lists = pa.array(LISTS * 2, pa.list_(pa.string()))
    df["topics"] = pd.arrays.ArrowExtensionArray(lists)
    return df


@pytest.mark.parametrize("ext", [".jsonl", ".csv"])
def test_crafted_values_equal_the_per_row_writers(ext: str, tmp_path: Path) -> None:
    df = _crafted()
    old = tmp_path / f"old{ext}"
    (_old_jsonl if ext == ".jsonl" else _old_csv)(df, old)
    export(df, tmp_path / f"new{ext}")
    assert (tmp_path / f"new{ext}").read_bytes() == old.read_bytes()


def test_floats_are_written_as_repr(tmp_path: Path) -> None:
    # Arrow and Python agree on the digits, not the notation: random bit patterns (every
    # exponent) and latency-like values, three batches' worth
    import numpy as np

    rng = np.random.default_rng(21)
    bits = rng.integers(0, 2**63, 30_000, dtype=np.int64).view(np.float64)
    latencies = rng.integers(0, 10**10, 20_000) / 1e6
    values = np.concatenate([bits, -bits[:5000], latencies])
    df = pd.concat([_crafted()] * (len(values) // len(STRINGS) + 1), ignore_index=True)
    df = df.head(len(values)).copy()
    df["latency_ms"] = pd.array(values, dtype="double[pyarrow]")
    _old_jsonl(df, tmp_path / "old.jsonl")
    export(df, tmp_path / "new.jsonl")
    assert (tmp_path / "new.jsonl").read_bytes() == (tmp_path / "old.jsonl").read_bytes()
    got = [line.split('"latency_ms": ')[1].split(",")[0] for line in _lines(tmp_path / "new.jsonl")]
    finite = [v for v in values.tolist() if math.isfinite(v)]
    assert [g for g in got if g not in ("null", "Infinity", "-Infinity")] == list(map(repr, finite))


def _lines(path: Path) -> list[str]:
    # not splitlines: JSON in UTF-8 keeps U+2028 as it is, inside a string
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_csv_quoting_is_the_csv_modules() -> None:
    # every character of the basic plane inside a field: quoted exactly when csv quotes it
    from dissector.table.text_rows import csv_field

    for code in range(0x10000):
        if 0xD800 <= code < 0xE000:
            continue
        field = f"a{chr(code)}b"
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow([field, "z"])
        assert csv_field(field) + ",z\n" == out.getvalue(), hex(code)


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


# --- the analytics tables (--partitions, --groups) ------------------------------------


def _old_export_table(df: pd.DataFrame, path: Path) -> None:
    """``analytics.partitions.export_table``'s text formats before the batch writers."""
    if path.suffix == ".csv":
        flat = df.copy()
        for name in flat.columns:
            if flat[name].dtype == object:
                flat[name] = flat[name].map(
                    lambda v: ";".join(map(str, v)) if isinstance(v, list | tuple) else v
                )
        flat.to_csv(path, index=False)
        return
    with open(path, "w", encoding="utf-8") as fh:
        for row in df.to_dict(orient="records"):
            fh.write(json.dumps({k: _old_json_value(v) for k, v in row.items()}) + "\n")


def _old_json_value(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_old_json_value(v) for v in value]
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return None
    if value is pd.NaT:
        return None
    return value.item() if hasattr(value, "item") else value


def _table_csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:  # the instant, whatever digits a chunk's times were written with
        for name in ("request_time", "response_time"):
            if row[name]:
                row[name] = str(pd.Timestamp(row[name]).value)
    return rows


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    """A Parquet file's rows as JSON values: an independent reading of the same table."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    for row in rows:
        for name, value in row.items():
            if isinstance(value, float) and value != value:
                row[name] = None
            elif hasattr(value, "isoformat"):
                row[name] = pd.Timestamp(value).isoformat()
    return rows


TABLE_CAPTURES = [REPO / "captures" / n for n in ("kafka-4-mixed.pcapng", "kafka-4-lag.pcapng")]


@pytest.mark.parametrize("capture", TABLE_CAPTURES, ids=lambda p: p.name)
def test_table_outputs_are_the_old_text(capture: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    frames = {"partitions": dissector.partitions(capture), "groups": dissector.groups(capture)}
    for ext in (".jsonl", ".csv", ".parquet"):
        args = ["analyze", str(capture), "--quiet"]
        for name in frames:
            args += [f"--{name}", str(tmp_path / f"{name}{ext}")]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    for name, frame in frames.items():
        assert len(frame) > 0, name
        _old_export_table(frame, tmp_path / f"old-{name}.jsonl")
        _old_export_table(frame, tmp_path / f"old-{name}.csv")
        new_json = tmp_path / f"{name}.jsonl"
        assert new_json.read_bytes() == (tmp_path / f"old-{name}.jsonl").read_bytes(), name
        assert _table_csv_rows(tmp_path / f"{name}.csv") == _table_csv_rows(
            tmp_path / f"old-{name}.csv"
        ), name
        assert _json_rows(new_json) == _parquet_rows(tmp_path / f"{name}.parquet"), name


def test_no_rows_leave_the_csv_column_line(tmp_path: Path) -> None:
    # a capture without Kafka: every CSV still names its columns, JSON lines are empty
    from dissector.tables_schema import GROUP_COLUMNS, PARTITION_COLUMNS, names

    capture = REPO / "captures" / "tls-on-kafka-port.pcapng"
    outs = {n: tmp_path / f"{n}.csv" for n in ("pairs", "partitions", "groups")}
    args = ["analyze", str(capture), "--quiet", "-o", str(outs["pairs"])]
    args += ["--partitions", str(outs["partitions"]), "--groups", str(tmp_path / "groups.jsonl")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert outs["pairs"].read_text() == ",".join(c.name for c in COLUMNS) + "\n"
    assert outs["partitions"].read_text() == ",".join(names(PARTITION_COLUMNS)) + "\n"
    assert (tmp_path / "groups.jsonl").read_bytes() == b""
    export(dissector.analyze(capture), tmp_path / "export.csv")
    assert (tmp_path / "export.csv").read_text() == outs["pairs"].read_text()
    result = CliRunner().invoke(
        main, ["analyze", str(capture), "--quiet", "--groups", str(outs["groups"])]
    )
    assert result.exit_code == 0, result.output
    assert outs["groups"].read_text() == ",".join(names(GROUP_COLUMNS)) + "\n"
