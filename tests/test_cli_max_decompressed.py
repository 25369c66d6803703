"""``--max-decompressed N`` applies N in every pass of every command that reads
captures: analyze's pairs and partitions tables, decode's lines, report, a Spark task,
live (issue #21: the decompression cap was fixed at 256 MiB a frame).

Oracle for which pairs carry compressed record batches: tshark's Kafka dissector
(``kafka.batch_codec``/``kafka.message_codec`` above 0) on the committed capture, for
the frames it dissects (it knows fewer versions than we do); our own run without a cap
names the rest (its ``compression`` column). With N = 100 bytes every compressed batch
decompresses past N: each such pair, and no other, carries ``decompression_limit``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import dissector
from dissector.cli.app import main
from dissector.options import MAX_DECOMPRESSED_LIMIT, Options

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"
CAP = 100
LIMIT = "decompression_limit"

Key = tuple[int, int]  # (tcp stream, correlation id)


def _flagged(df: pd.DataFrame) -> set[Key]:
    rows = df[df["decode_error"].astype(str).str.contains(LIMIT, regex=False)]
    return {(int(s), int(c)) for s, c in zip(rows["stream"], rows["correlation_id"], strict=True)}


@pytest.fixture(scope="module")
def compressed() -> set[Key]:
    """Pairs with a compressed record batch, by our run without a cap."""
    df = dissector.analyze(CAPTURE)
    codecs = [set(str(c).split(",")) if isinstance(c, str) else set() for c in df["compression"]]
    rows = df[[bool(c - {"none"}) for c in codecs]]
    found = {(int(s), int(c)) for s, c in zip(rows["stream"], rows["correlation_id"], strict=True)}
    assert len(found) >= 20
    assert not _flagged(df)  # without a cap nothing is cut
    return found


@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_tshark_sees_the_same_compressed_frames(compressed: set[Key]) -> None:
    out = subprocess.run(
        [
            "tshark", "-n", "-r", str(CAPTURE),
            "-Y", "kafka.batch_codec > 0 || kafka.message_codec > 0",
            "-T", "fields", "-e", "tcp.stream", "-e", "kafka.correlation_id",
        ],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    theirs = {(int(s), int(c)) for s, c in (line.split("\t") for line in out.splitlines())}
    assert theirs and theirs <= compressed


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result


def test_analyze_tables_and_decode_take_the_cap(compressed: set[Key], tmp_path: Path) -> None:
    pairs, parts = tmp_path / "pairs.csv", tmp_path / "parts.csv"
    cap = ["--max-decompressed", str(CAP)]
    _cli("analyze", str(CAPTURE), "--quiet", "-o", str(pairs), "--partitions", str(parts), *cap)
    assert _flagged(pd.read_csv(pairs)) == compressed
    # the partitions table reads last offsets out of decompressed message sets
    _cli("analyze", str(CAPTURE), "--quiet", "--partitions", str(tmp_path / "full.csv"))
    full, cut = pd.read_csv(tmp_path / "full.csv"), pd.read_csv(parts)
    assert len(full) == len(cut)
    known_full, known_cut = full["last_offset"].notna(), cut["last_offset"].notna()
    assert (known_cut <= known_full).all() and known_cut.sum() < known_full.sum()
    lines = [json.loads(line) for line in _cli("decode", str(CAPTURE), *cap).output.splitlines()]
    decoded = {
        (line["stream"], line["correlation_id"])
        for line in lines
        if LIMIT in str((line.get("summary") or {}).get("decode_error"))
    }
    assert decoded == compressed


def test_report_takes_the_cap(tmp_path: Path) -> None:
    for args, expected in (([], False), (["--max-decompressed", str(CAP)], True)):
        out = tmp_path / "report.html"
        _cli("report", str(CAPTURE), "-o", str(out), *args)
        assert (f"records_{LIMIT}" in out.read_text(encoding="utf-8")) is expected


def test_a_spark_task_takes_the_cap(compressed: set[Key]) -> None:
    # the task body Spark runs, with the options as Spark ships them (pickled)
    from dissector.accounting import Counters
    from dissector.spark.tasks import PAIRS_TABLE, CaptureResult, DecodeConfig, _decoded
    from dissector.wire.core import table_to_frame

    config = pickle.loads(pickle.dumps(DecodeConfig(options=Options(max_decompressed=CAP))))
    result = CaptureResult(files=[str(CAPTURE)], size_bytes=CAPTURE.stat().st_size)
    tables = [
        t
        for name, t in _decoded(str(CAPTURE), {}, config, Counters(), result)
        if name == PAIRS_TABLE
    ]
    assert _flagged(pd.concat([table_to_frame(t) for t in tables])) == compressed


def test_live_takes_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the live command hands the core; no interface is opened
    import dissector.live.loop as loop

    seen: list[Options] = []

    class Source:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def close(self) -> None:
            pass

    def session(options: Options, *args: Any) -> None:
        seen.append(options)
        raise loop.LiveError("stopped by the test")

    monkeypatch.setattr(loop, "PcapSource", Source)
    monkeypatch.setattr(loop, "LiveSession", session)
    result = CliRunner().invoke(main, ["live", "-i", "lo", "--max-decompressed", str(CAP)])
    assert "stopped by the test" in result.output
    assert [o.max_decompressed for o in seen] == [CAP]


@pytest.mark.parametrize("command", ["analyze", "decode", "report", "spark", "live"])
@pytest.mark.parametrize("value", ["0", "-5", "lots", str(MAX_DECOMPRESSED_LIMIT + 1)])
def test_bad_values_are_one_clear_error(command: str, value: str) -> None:
    args = [command, "-i", "lo"] if command == "live" else [command, str(CAPTURE)]
    done = subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args, "--max-decompressed", value],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Invalid value for '--max-decompressed'" in done.stderr
    assert "Traceback" not in done.stderr
