"""Wire strings in exports: spreadsheet formulas and control characters neutralised in
CSV, the real value kept in Parquet (issue #11)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.hostile.build import Conversation, api_versions, write_pcap

EVIL = '=HYPERLINK("http://x")'
ESC = "a\x1b[31mred\x00"


def _capture(tmp_path: Path) -> Path:
    conv = Conversation().handshake()
    conv.pair(*api_versions(1, client_id=EVIL))
    conv.pair(*api_versions(2, client_id=ESC))
    conv.pair(*api_versions(3, client_id="-2+3"))
    return write_pcap(tmp_path / "evil.pcap", conv.close().frames)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args], capture_output=True, text=True, check=False
    )


def test_csv_neutralises_formulas_and_control_characters(tmp_path: Path) -> None:
    cap = _capture(tmp_path)
    out = tmp_path / "pairs.csv"
    done = _cli("analyze", str(cap), "-o", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    with open(out, newline="", encoding="utf-8") as fh:
        ids = [row["client_id"] for row in csv.DictReader(fh)]
    assert ids == ["'" + EVIL, "a\\x1b[31mred\\x00", "'-2+3"]
    assert all(ch >= " " for value in ids for ch in value)


def test_parquet_keeps_the_real_values(tmp_path: Path) -> None:
    cap = _capture(tmp_path)
    out = tmp_path / "pairs.parquet"
    done = _cli("analyze", str(cap), "-o", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert pq.read_table(out).column("client_id").to_pylist() == [EVIL, ESC, "-2+3"]


def test_html_report_shows_control_characters_escaped(tmp_path: Path) -> None:
    cap = _capture(tmp_path)
    out = tmp_path / "report.html"
    done = _cli("report", str(cap), "-o", str(out))
    assert done.returncode == 0, done.stderr
    html = out.read_text(encoding="utf-8")
    assert "\x1b" not in html and "\x00" not in html
    assert "a\\x1b[31mred\\x00" in html  # the client id is still there, visibly
