"""``analyze --max-frame N`` applies N in every table the pass builds: the pairs (-o),
the partitions (--partitions) and the groups (--groups) tables; ``report --max-frame N``
and ``report.analyze(paths, Options(max_frame=N))`` in the pass the report reads.

Oracle: tshark's Kafka dissector lists the frames (tcp.stream, correlation id, side)
whose length field exceeds N in the committed capture; with --max-frame N no table may
hold that side of those exchanges (its size or time is unknown, or the row is absent),
while without the limit every table holds some (so the limit is what removed them), and
every table keeps rows of the smaller frames.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from dissector.options import DEFAULT_BROKER_PORTS

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"
# Below the largest JoinGroup/SyncGroup frames of the capture (325-385 bytes), above
# most other group calls, so every table both loses and keeps rows.
LIMIT = 300

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def _tshark_over(limit: int) -> dict[str, set[tuple[int, int]]]:
    """(tcp.stream, correlation id) of every Kafka frame whose length is above ``limit``,
    by side (a response comes from a broker port)."""
    out = subprocess.run(
        [
            "tshark", "-n", "-r", str(CAPTURE), "-Y", f"kafka.len > {limit}",
            "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,",
            "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "kafka.correlation_id",
        ],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    found: dict[str, set[tuple[int, int]]] = {"request": set(), "response": set()}
    for line in out.splitlines():
        stream, port, ids = line.split("\t")
        side = "response" if int(port) in DEFAULT_BROKER_PORTS else "request"
        for cid in filter(None, ids.split(",")):
            found[side].add((int(stream), int(cid)))
    return found


def _analyze(tmp: Path, *extra: str) -> dict[str, pd.DataFrame]:
    tmp.mkdir()
    outs = {"pairs": tmp / "pairs.csv", "partitions": tmp / "p.csv", "groups": tmp / "g.csv"}
    subprocess.run(
        [
            sys.executable, "-m", "dissector.cli", "analyze", str(CAPTURE), "--quiet",
            "-o", str(outs["pairs"]), "--partitions", str(outs["partitions"]),
            "--groups", str(outs["groups"]), *extra,
        ],
        check=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    return {name: pd.read_csv(path) for name, path in outs.items()}


def _keys(df: pd.DataFrame, column: str) -> set[tuple[int, int]]:
    """(stream, correlation id) of the rows where ``column`` is known."""
    known = df.dropna(subset=["stream", "correlation_id", column])
    return {(int(s), int(c)) for s, c in zip(known["stream"], known["correlation_id"], strict=True)}


# The column each table fills only when it read that side of the exchange.
SIDE_COLUMNS = {
    "pairs": {"request": "request_size", "response": "response_size"},
    "partitions": {"request": "request_time", "response": "response_time"},
    "groups": {"request": "request_time", "response": "response_time"},
}


def test_max_frame_reaches_every_table(tmp_path: Path) -> None:
    over = _tshark_over(LIMIT)
    assert over["request"] and over["response"], "the capture has frames over the limit"
    full = _analyze(tmp_path / "full")
    cut = _analyze(tmp_path / "cut", "--max-frame", str(LIMIT))
    for name, sides in SIDE_COLUMNS.items():
        read_full = {side: _keys(full[name], column) for side, column in sides.items()}
        read_cut = {side: _keys(cut[name], column) for side, column in sides.items()}
        # without the limit the big responses are read into every table
        assert read_full["response"] & over["response"], name
        for side in sides:
            # with it, no table holds a side whose frame is over the limit
            assert not (read_cut[side] & over[side]), f"{name}: --max-frame not applied ({side})"
            assert read_cut[side], f"{name}: frames under the limit keep their rows"
    assert read_full["request"] & over["request"]  # groups: a big JoinGroup request
    # the pairs table's sizes count the 4-byte size prefix
    sizes = cut["pairs"][["request_size", "response_size"]].stack().dropna()
    assert len(sizes) and (sizes <= LIMIT + 4).all()


def test_options_reach_the_table_functions() -> None:
    # The Python API's table functions take Options whole, ports= laid over them.
    import dissector
    from dissector.options import Options

    over = _tshark_over(LIMIT)
    options = Options(max_frame=LIMIT)
    for name in ("partitions", "groups"):
        df = getattr(dissector, name)(CAPTURE, options=options, ports=DEFAULT_BROKER_PORTS)
        for side, column in SIDE_COLUMNS[name].items():
            assert not (_keys(df, column) & over[side]), (name, side)
            assert _keys(df, column), (name, side)


def test_options_reach_the_report_pass() -> None:
    # report.analyze takes Options whole: its one pass builds the pairs and the
    # partitions and groups tables the report reads, each with the limit applied.
    from dissector.analytics import report
    from dissector.options import Options

    over = _tshark_over(LIMIT)
    df = report.analyze([CAPTURE], Options(max_frame=LIMIT), ports=DEFAULT_BROKER_PORTS)
    tables = df.attrs[report.TABLES_ATTR]
    frames = {"pairs": df, "partitions": tables.partitions, "groups": tables.groups}
    for name, frame in frames.items():
        for side, column in SIDE_COLUMNS[name].items():
            assert not (_keys(frame, column) & over[side]), (name, side)
            assert _keys(frame, column), (name, side)


def _report_html(tmp: Path, *extra: str) -> str:
    out = tmp / "r.html"
    subprocess.run(
        [sys.executable, "-m", "dissector.cli", "report", str(CAPTURE), "-o", str(out), *extra],
        check=True, timeout=300, capture_output=True,
    )  # fmt: skip
    return out.read_text(encoding="utf-8")


def test_report_command_takes_max_frame(tmp_path: Path) -> None:
    # The frames over the limit are refused (bad_frame_size in the report's stage
    # counters), and the page's regenerate command says the limit.
    (tmp_path / "full").mkdir()
    full = _report_html(tmp_path / "full")
    (tmp_path / "cut").mkdir()
    cut = _report_html(tmp_path / "cut", "--max-frame", str(LIMIT))
    assert "bad_frame_size" not in full
    assert "bad_frame_size" in cut
    assert f"--max-frame {LIMIT}" in cut and "--max-frame" not in full
