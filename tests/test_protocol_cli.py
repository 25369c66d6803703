"""``kafka-dissector decode`` and ``apis`` against the shared captures' independent counts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from dissector.cli.decode import apis_command, decode_command

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
TANSU = CAPTURES / "local-tansu-confluent-kafka.pcapng"
NDPI = CAPTURES / "ndpi-kafka.pcapng"


def _run(*args: str) -> list[dict]:
    result = CliRunner().invoke(decode_command, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


@pytest.mark.skipif(not TANSU.exists(), reason="../shared/captures is absent")
def test_decode_tansu_produce_counts_match_the_producer_log() -> None:
    rows = _run(str(TANSU), "--api", "Produce")
    # README: Produce v10 x16, 4 batches per codec, 250 records per codec, 1000 in all.
    assert len(rows) == 16
    assert {r["api_version"] for r in rows} == {10}
    per_codec = Counter[str]()
    for r in rows:
        assert r["response"] is not None and "error" not in r["request"]
        summary = r["summary"]
        assert summary["decode_error"] is None
        per_codec[summary["compression"]] += summary["records"]
    assert per_codec == {"gzip": 250, "lz4": 250, "zstd": 250, "snappy": 250}
    assert all(r["request"]["body"]["topic_data"] for r in rows)


@pytest.mark.skipif(not TANSU.exists(), reason="../shared/captures is absent")
def test_decode_tansu_all_pairs_and_api_filter_by_key() -> None:
    rows = _run(str(TANSU))
    assert len(rows) == 84
    by_api = Counter((r["api_name"], r["api_version"]) for r in rows)
    assert by_api[("Metadata", 12)] == 11
    assert by_api[("GetTelemetrySubscriptions", 0)] == 9
    assert by_api[("ConsumerGroupDescribe", 0)] == 1
    trailing = [r for r in rows if r["request"] and r["request"].get("trailing_bytes")]
    assert [(r["api_name"], r["request"]["trailing_bytes"]) for r in trailing] == [("Metadata", 3)]
    assert len(_run(str(TANSU), "--api", "1")) == 7


@pytest.mark.skipif(not NDPI.exists(), reason="../shared/captures is absent")
def test_decode_ndpi_trailing_bytes_of_old_librdkafka() -> None:
    rows = _run(str(NDPI), "--api", "ApiVersions")
    v0 = [r for r in rows if r["api_version"] == 0 and r["request"] is not None]
    assert len(v0) == 4
    assert all(r["request"]["trailing_bytes"] == 4 for r in v0)
    assert all(r["request"].get("error") is None for r in v0)


def test_apis_lists_every_key() -> None:
    result = CliRunner().invoke(apis_command, ["--json"], catch_exceptions=False)
    assert result.exit_code == 0
    apis = [json.loads(line) for line in result.output.splitlines()]
    keys = [a["api_key"] for a in apis]
    assert keys == list(range(0, 95))  # Kafka 4.4's keys, 4-7 from the 3.9 layer
    fetch = apis[1]
    assert fetch["name"] == "Fetch"
    assert fetch["request_versions"] == list(range(0, 19))


def test_unknown_api_name_is_a_usage_error() -> None:
    result = CliRunner().invoke(decode_command, [__file__, "--api", "NoSuchApi"])
    assert result.exit_code == 2
    assert "unknown API" in result.output


def test_a_file_that_is_not_a_capture_is_a_clean_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("not a capture\n")
    result = CliRunner().invoke(decode_command, [str(bogus)])
    assert result.exit_code == 1
    assert "not a pcap or pcapng capture" in result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(not NDPI.exists(), reason="../shared/captures is absent")
def test_a_specs_file_that_is_not_specs_is_a_clean_error(tmp_path: Path) -> None:
    bogus = tmp_path / "specs.txt"
    bogus.write_text("{}")
    result = CliRunner().invoke(decode_command, [str(NDPI), "--specs", str(bogus)])
    assert result.exit_code == 1
    assert "neither a directory of JSON specs nor a jar" in result.output


BUNDLED = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"


def test_api_filter_keeps_the_topic_names_of_the_whole_capture() -> None:
    # Topic ids are learnt from Metadata responses: a filter on Fetch must not hide them.
    import dissector

    everything = [r for r in _run(str(BUNDLED)) if r["api_name"] == "Fetch"]
    fetches = _run(str(BUNDLED), "--api", "Fetch")
    assert fetches == everything
    # The native core's pairs table resolves ids with its own table: the names agree.
    df = dissector.analyze(BUNDLED)
    fetch_rows = df[df["api_name"] == "Fetch"]
    native = {
        (s, c): set(t)
        for s, c, t in zip(
            fetch_rows["stream"], fetch_rows["correlation_id"], fetch_rows["topics"], strict=True
        )
    }
    named = 0
    for r in fetches:
        topics = r["request"]["body"]["topics"]
        if not topics or "topic_id" not in topics[0]:
            continue
        names = {t.get("topic_name") for t in topics}
        assert None not in names, "a topic id left without its name"
        assert names <= native[(r["stream"], r["correlation_id"])]
        named += 1
    assert named > 0
