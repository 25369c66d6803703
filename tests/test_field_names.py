"""File names as the OS gives them: bytes that are not UTF-8.

A capture whose name is not UTF-8 (Latin-1 from an old host, a cut multi-byte name)
is read like any other; its rows name it with those bytes written ``\\xNN`` (valid
text for Parquet, CSV and JSON, and one-to-one); output files may have such names
too; and a run with good files beside it keeps them. Oracle: the same capture under a
plain name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import dissector
from dissector.options import text_path

REPO = Path(__file__).resolve().parents[1]
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"
OTHER = REPO / "captures" / "heuristic-port-19192.pcapng"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names are bytes")


@pytest.fixture
def latin1(tmp_path: Path) -> str:
    """The bundled capture under a Latin-1 name (``café.pcapng`` written as bytes)."""
    raw = os.fsencode(tmp_path) + b"/caf\xe9.pcapng"
    shutil.copy(MIXED, raw)
    return os.fsdecode(raw)


def test_the_api_reads_a_non_utf8_name_and_names_its_rows(latin1: str) -> None:
    want = dissector.analyze(MIXED)
    got = dissector.analyze([latin1, os.fsencode(OTHER)])
    mine = got[got["capture"] != str(OTHER)]
    assert set(mine["capture"]) == {
        latin1.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    }
    assert mine["capture"].iloc[0].endswith("/caf\\xe9.pcapng")
    pd.testing.assert_frame_equal(
        mine.drop(columns="capture").reset_index(drop=True),
        want.drop(columns="capture").reset_index(drop=True),
        check_categorical=False,
    )
    assert (got["capture"] == str(OTHER)).sum() > 0  # the good file of the same run


def test_text_path_is_one_to_one_on_what_the_os_gives() -> None:
    assert text_path("plain.pcap") == "plain.pcap"
    assert text_path("日本.pcap") == "日本.pcap"
    assert text_path(os.fsdecode(b"caf\xe9.pcap")) == "caf\\xe9.pcap"
    assert text_path(os.fsdecode(b"\xff\xfe")) != text_path(os.fsdecode(b"\xfe\xff"))


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_the_cli_reads_and_writes_such_names(latin1: str, tmp_path: Path, ext: str) -> None:
    out = os.fsencode(tmp_path) + b"/out\xff." + ext.encode()
    missing = os.fsencode(tmp_path) + b"/gone\xfe.pcap"
    inputs = [latin1, os.fsdecode(missing), str(OTHER)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dissector.cli",
            "analyze",
            *inputs,
            "-o",
            os.fsdecode(out),
            "--quiet",
        ],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 1, err  # the missing file, named on one line
    assert "Traceback" not in err
    assert "gone\\xfe.pcap" in err
    assert os.path.exists(out)
    with open(out, "rb") as fh:
        if ext == "parquet":
            names = set(pd.read_parquet(fh)["capture"])
        elif ext == "csv":
            names = set(pd.read_csv(fh)["capture"])
        else:
            names = {json.loads(line)["capture"] for line in fh}
    assert names == {text_path(latin1), str(OTHER)}


def test_decode_and_report_take_such_names(latin1: str, tmp_path: Path) -> None:
    decoded = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "decode", latin1, "--api", "ApiVersions"],
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert decoded.returncode == 0, decoded.stderr[-2000:]
    assert decoded.stdout.count(b"\n") > 10
    report = os.fsencode(tmp_path) + b"/r\xe9port.html"
    made = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "report", latin1, "-o", os.fsdecode(report)],
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert made.returncode == 0, made.stderr[-2000:]
    assert b"Traceback" not in made.stderr
    assert os.path.getsize(report) > 10_000
