"""The analyze table in a real terminal (util-linux ``script`` gives the command a pty of
80, 100 and 200 columns) against the same table piped, which is never cut.

In a terminal every line fits its width, no column is squeezed to nothing, numbers are
whole and equal to the piped table's, and what was abbreviated or left out is said.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# The short headers a narrow terminal gets, as the README documents them.
SHORT = {
    "v": "ver",
    "n": "count",
    "err": "errors",
    "unans": "unanswered",
    "unsup": "unsupported",
    "asm": "assumed",
    "polls": "long polls",
}
NUMBER = re.compile(r"-?\d+(\.\d+)?")


def _command() -> list[str]:
    return [sys.executable, "-m", "dissector.cli", "analyze", str(CAPTURE)]


def _in_terminal(columns: int, term: str) -> str:
    if shutil.which("script") is None:
        pytest.skip("util-linux script is not installed (apt-get install bsdutils)")
    inner = f"stty cols {columns} rows 80; {shlex.join(_command())} 2>/dev/null"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run(
        ["script", "-qfec", inner, "/dev/null"],
        env={**env, "TERM": term},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    return ANSI.sub("", proc.stdout.replace("\r\n", "\n").replace("\r", ""))


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("┃"))
    headers = [c.strip() for c in header.strip("┃").split("┃")]
    rows = [
        [c.strip() for c in line.strip("│").split("│")] for line in lines if line.startswith("│")
    ]
    return headers, rows


@pytest.fixture(scope="module")
def piped() -> tuple[list[str], list[list[str]]]:
    proc = subprocess.run(
        _command(), capture_output=True, text=True, timeout=300, cwd=ROOT, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return _table(proc.stdout)


# TERM=dumb (an editor's shell, some CI runners): rich alone would assume 80 cells.
@pytest.mark.parametrize(
    ("columns", "term"), [(80, "xterm"), (100, "xterm"), (200, "xterm"), (200, "dumb")]
)
def test_table_fits_the_terminal_and_keeps_numbers_whole(
    columns: int, term: str, piped: tuple[list[str], list[list[str]]]
) -> None:
    text = _in_terminal(columns, term)
    for line in text.splitlines():
        assert len(line) <= columns, line
    headers, rows = _table(text)
    full_headers, full_rows = piped
    assert all(headers), headers  # no column without a header
    names = [SHORT.get(h, h) for h in headers]
    assert {"API", "ver", "count", "p99 ms"} <= set(names)
    assert len(rows) == len(full_rows) > 20
    for row, full in zip(rows, full_rows, strict=True):
        expected = dict(zip(full_headers, full, strict=True))
        for name, cell in zip(names, row, strict=True):
            if name == "API":
                assert cell == expected[name] or (
                    cell.endswith("…") and expected[name].startswith(cell[:-1])
                ), (cell, expected[name])
            else:
                assert cell == expected[name], (name, cell, expected[name])
                assert cell == "" or NUMBER.fullmatch(cell), cell
    abbreviated = [h for h in headers if h in SHORT and SHORT[h] != h]
    left_out = set(full_headers) - set(names)
    if abbreviated:
        legend = "; ".join(f"{h}: {SHORT[h]}" for h in abbreviated)
        assert legend.replace(" ", "") in text.replace("\n", "").replace(" ", "")
    if left_out:
        assert "left out for the terminal's width" in text
        note = " ".join(text.split("left out for the terminal's width")[1].split())
        for name in left_out:
            assert name in note
            column = [full[full_headers.index(name)] for full in full_rows]
            # a column of zeros says so: it left for the width but hid nothing
            assert (f"{name} (all 0)" in note) == all(cell == "0" for cell in column), name
    if columns == 200:  # wide enough: the piped table as it is
        assert headers == full_headers and rows == full_rows
    if columns == 80:
        assert any("…" in r[0] for r in rows)  # long API names cut, not the numbers


@pytest.mark.parametrize("width", [30, 50, 60])
def test_very_narrow_terminals_keep_the_core_columns_whole(width: int) -> None:
    """Narrower than the fitting can reach: API, version, count and p99 stay, numbers whole
    (the table is then wider than the terminal rather than cut), no column empty."""
    import dissector
    from dissector.analytics.summary_table import fit_columns, summary_columns

    columns = summary_columns(dissector.analyze(str(CAPTURE)))
    fitted = fit_columns(columns, width)
    names = [c.name for c in fitted.columns]
    assert names[:3] == ["API", "ver", "count"] and names[-1] == "p99 ms"
    for col in fitted.columns:
        shown = col.width if col.width is not None else col.natural
        assert shown >= 1 and col.header
        if col.name != "API":
            assert col.width is None  # numbers keep their natural width
    assert set(fitted.left_out) == {c.name for c in columns} - set(names)
