"""The DataFrame contract, its exports and the `analyze` command, on the bundled capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import dissector
from dissector.schema import COLUMN_NAMES
from dissector.table.frame import export

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return dissector.analyze(BUNDLED)


def test_columns_and_types_follow_the_contract(df: pd.DataFrame) -> None:
    assert list(df.columns) == list(COLUMN_NAMES)
    assert str(df["request_time"].dtype) == "datetime64[ns, UTC]"
    assert str(df["response_time"].dtype) == "datetime64[ns, UTC]"
    answered = df.dropna(subset=["request_time", "response_time"])
    spans = (answered["response_time"] - answered["request_time"]).dt.total_seconds() * 1000
    assert (spans - answered["latency_ms"].astype(float)).abs().max() < 1e-6
    assert (answered["first_byte_ms"] <= answered["latency_ms"]).all()
    assert all(isinstance(t, list) for t in df["topics"])
    assert set(df["status"]) <= {
        "ok",
        "error",
        "no_response",
        "unanswered",
        "orphan_response",
        "malformed",
    }


def test_parquet_round_trip_keeps_values_and_types(df: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "pairs.parquet"
    export(df, out)
    table = pq.read_table(out)
    assert table.column_names == list(COLUMN_NAMES)
    # Microseconds: the finest unit Spark reads (frame.PARQUET_TIME_UNIT).
    assert str(table.schema.field("request_time").type) == "timestamp[us, tz=UTC]"
    back = pd.read_parquet(out)
    assert len(back) == len(df)
    assert back["correlation_id"].tolist() == df["correlation_id"].tolist()
    assert [list(t) for t in back["topics"]] == df["topics"].tolist()
    floored = df["request_time"].dt.floor("us")
    assert (back["request_time"] == floored).fillna(True).all()
    assert back["request_time"].notna().sum() == floored.notna().sum()


def test_csv_and_jsonl_exports(df: pd.DataFrame, tmp_path: Path) -> None:
    csv, jsonl = tmp_path / "pairs.csv", tmp_path / "pairs.jsonl"
    export(df, csv)
    export(df, jsonl)
    back = pd.read_csv(csv)
    assert list(back.columns) == list(COLUMN_NAMES) and len(back) == len(df)
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(lines) == len(df)
    first = lines[0]
    assert set(first) == set(COLUMN_NAMES)
    assert pd.Timestamp(first["request_time"]) == df["request_time"].iloc[0]
    with pytest.raises(ValueError, match="unknown output format"):
        export(df, tmp_path / "pairs.xlsx")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )


def test_cli_analyze_prints_summary_and_writes_output(df: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "pairs.parquet"
    done = _cli("analyze", str(BUNDLED), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "Produce" in done.stdout and "p99 ms" in done.stdout
    assert f"wrote {len(df)} rows" in done.stdout
    assert len(pd.read_parquet(out)) == len(df)


def test_parquet_time_columns_are_plain_and_the_rest_dictionary(
    df: pd.DataFrame, tmp_path: Path
) -> None:
    # Times are nearly all distinct: a dictionary page would only add bytes and CPU.
    out = tmp_path / "pairs.parquet"
    export(df, out)
    group = pq.ParquetFile(out).metadata.row_group(0)
    encodings = {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(group.num_columns)
    }
    for name in ("request_time", "response_time"):
        assert "RLE_DICTIONARY" not in encodings[name] and "PLAIN" in encodings[name]
        assert group.column(COLUMN_NAMES.index(name)).statistics.has_min_max
    assert "RLE_DICTIONARY" in encodings["api_name"] and "RLE_DICTIONARY" in encodings["api_key"]


def test_cli_rejects_a_file_that_is_not_a_capture(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.pcap"
    bogus.write_text("not a capture at all\n")
    done = _cli("analyze", str(bogus))
    assert done.returncode == 1
    assert "Error:" in done.stderr and "Traceback" not in done.stderr


def test_cli_rejects_bad_ports() -> None:
    done = _cli("analyze", str(BUNDLED), "--ports", "9092,notaport")
    assert done.returncode == 2 and "ports" in done.stderr


def test_ports_option_restricts_to_those_brokers(df: pd.DataFrame) -> None:
    sasl_only = dissector.analyze(BUNDLED, ports=[9094])
    assert set(sasl_only["broker_port"]) == {9094}
    assert len(sasl_only) == int((df["broker_port"] == 9094).sum())


TLS = REPO / "captures" / "tls-on-kafka-port.pcapng"


def test_tls_on_a_kafka_port_is_reported_not_misparsed(tshark: str) -> None:
    df = dissector.analyze(TLS)
    assert len(df) == 0
    assert df.attrs["tls_streams"] == [0]
    lengths = subprocess.run(
        [tshark, "-r", str(TLS), "-T", "fields", "-e", "tcp.len"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert df.attrs["counters"]["tls_bytes"] == sum(int(n) for n in lengths)
    done = _cli("analyze", str(TLS))
    assert done.returncode == 0 and "TLS detected" in done.stdout


def test_cli_table_names_rows_without_an_api(shared_captures: Path) -> None:
    """Orphan responses have no api_name (a categorical column in the frame): the CLI
    table lists them under '(unknown)' instead of failing."""
    capture = shared_captures / "ndpi-kafka.pcapng"
    orphans = dissector.analyze(capture)
    assert orphans["api_name"].isna().sum() == (orphans["status"] == "orphan_response").sum() > 0
    done = _cli("analyze", str(capture))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "(unknown)" in done.stdout
    assert "orphan_response=3" in done.stdout
