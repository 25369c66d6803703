"""``--max-frame N`` applies N in every pass of every command that reads captures:
``analyze``'s pairs (-o), partitions (--partitions) and groups (--groups) tables;
``report --max-frame N`` and ``report.analyze(paths, Options(max_frame=N))`` in the pass
the report reads; ``decode``'s lines; a Spark task (``spark --max-frame N`` hands its
Options whole to the job); ``live`` (the CLI hands its Options whole to the capture, and
a capture replayed onto ``lo`` is read with the limit).

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

from dissector.options import DEFAULT_BROKER_PORTS, Options

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


def _decode_keys(*extra: str) -> dict[str, set[tuple[int, int]]]:
    """(stream, correlation id) of the decode lines holding each side."""
    import json

    out = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "decode", str(CAPTURE), *extra],
        check=True, timeout=300, capture_output=True, text=True,
    ).stdout  # fmt: skip
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines, "decode wrote no line"
    return {
        side: {
            (int(d["stream"]), int(d["correlation_id"]))
            for d in lines
            if d[side] is not None and d["correlation_id"] is not None
        }
        for side in ("request", "response")
    }


def test_decode_command_takes_max_frame() -> None:
    over = _tshark_over(LIMIT)
    full = _decode_keys()
    cut = _decode_keys("--max-frame", str(LIMIT))
    assert full["response"] & over["response"] and full["request"] & over["request"]
    for side in ("request", "response"):
        assert not (cut[side] & over[side]), f"decode: --max-frame not applied ({side})"
        assert cut[side], "frames under the limit keep their lines"


def test_a_spark_task_takes_max_frame() -> None:
    # the task body Spark runs, with the options as Spark ships them (pickled)
    import pickle

    from dissector.accounting import Counters
    from dissector.spark.tasks import PAIRS_TABLE, CaptureResult, DecodeConfig, _decoded
    from dissector.wire.core import table_to_frame

    over = _tshark_over(LIMIT)
    config = pickle.loads(pickle.dumps(DecodeConfig(options=Options(max_frame=LIMIT))))
    result = CaptureResult(files=[str(CAPTURE)], size_bytes=CAPTURE.stat().st_size)
    counters = Counters()
    tables = [
        t for name, t in _decoded(str(CAPTURE), {}, config, counters, result) if name == PAIRS_TABLE
    ]
    df = pd.concat([table_to_frame(t) for t in tables])
    for side, column in SIDE_COLUMNS["pairs"].items():
        assert not (_keys(df, column) & over[side]), side
        assert _keys(df, column), side
    assert counters["bad_frame_size"] > 0


# What every command is given below, and the Options it must hand its pass whole.
GIVEN = ["--ports", "9092,9094", "--max-frame", str(LIMIT), "--max-decompressed", "1000"]
EXPECTED = Options(ports=frozenset({9092, 9094}), max_frame=LIMIT, max_decompressed=1000)


def test_spark_command_hands_its_options_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the spark command hands the job (then each task, see above); no Spark starts
    pytest.importorskip("pyspark")
    import click
    from click.testing import CliRunner

    import dissector.cli.spark as spark_cli
    from dissector.cli.app import main

    seen: list[Options] = []

    def job(options: Options, *args: object) -> None:
        seen.append(options)
        raise click.ClickException("stopped by the test")

    monkeypatch.setattr(spark_cli, "_Job", job)
    result = CliRunner().invoke(main, ["spark", str(CAPTURE), *GIVEN])
    assert "stopped by the test" in result.output
    assert seen == [EXPECTED]


def test_live_command_hands_its_options_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the live command hands the core; no interface is opened
    import dataclasses

    from click.testing import CliRunner

    import dissector.live.loop as loop
    from dissector.cli.app import main

    seen: list[Options] = []

    class Source:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def close(self) -> None:
            pass

    def session(options: Options, *args: object) -> None:
        seen.append(options)
        raise loop.LiveError("stopped by the test")

    monkeypatch.setattr(loop, "PcapSource", Source)
    monkeypatch.setattr(loop, "LiveSession", session)
    monkeypatch.delenv("SSLKEYLOGFILE", raising=False)
    result = CliRunner().invoke(main, ["live", "-i", "lo", *GIVEN])
    assert "stopped by the test" in result.output
    assert seen == [dataclasses.replace(EXPECTED, idle_timeout_s=loop.LIVE_IDLE_TIMEOUT_S)]


def test_live_capture_takes_max_frame(tmp_path: Path) -> None:
    """The capture replayed onto ``lo`` (tcpreplay, ports moved off the test bed's) and
    read live with the limit: the rows of ``analyze`` of the replayed file with the
    limit, none holding a side tshark finds over it."""
    from tests.live_replay import NEEDS, TIMEOUT_S, Capture, frame_rows, port_moved, replay, rows

    for mark in NEEDS:
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    import dissector
    from dissector.live import LiveCapture, LiveOptions

    moved = {9092: 39398, 9094: 39399}
    path = port_moved(CAPTURE, tmp_path / "moved.pcap", moved)
    options = Options(ports=frozenset(moved.values()), max_frame=LIMIT)
    expected = frame_rows(dissector.analyze(path, options=options))
    over = _tshark_over(LIMIT)
    cap = LiveCapture(LiveOptions("lo", analysis=options, duration=TIMEOUT_S))
    collecting = Capture(cap)
    replay(path)
    got = rows(collecting.finish())
    assert cap.final_stats.dropped == 0
    assert got == expected
    df = pd.DataFrame(got)
    for side, column in SIDE_COLUMNS["pairs"].items():
        assert not (_keys(df, column) & over[side]), f"live: --max-frame not applied ({side})"
        assert _keys(df, column), side
    assert cap.counters["bad_frame_size"] > 0
