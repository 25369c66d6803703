"""``--filter``: each expression selects exactly the rows a hand-written pandas
condition on the bundled capture selects; analyze, decode and report apply it alike;
decode lines carry the pair's times, latency and status equal to the pairs table's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

import dissector
from dissector.table.row_filter import FilterError, parse_filter

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "kafka-4-mixed.pcapng"


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return dissector.analyze(str(CAPTURE))


def _topics_any(df: pd.DataFrame, test: Callable[[str], bool]) -> pd.Series:
    return df["topics"].map(lambda ts: any(test(t) for t in ts)).astype(bool)


# expression -> the same selection written directly in pandas (the oracle)
CASES: dict[str, Callable[[pd.DataFrame], pd.Series]] = {
    "api == Fetch": lambda d: d["api_name"] == "Fetch",
    "api == fetch": lambda d: d["api_name"] == "Fetch",
    "api == 1": lambda d: d["api_key"] == 1,
    "api != ApiVersions": lambda d: d["api_name"].notna() & (d["api_name"] != "ApiVersions"),
    "api == Fetch and latency > 100": lambda d: (
        (d["api_name"] == "Fetch") & (d["latency_ms"] > 100)
    ),
    "error": lambda d: d["status"].isin(["error", "malformed"]),
    "not error": lambda d: ~d["status"].isin(["error", "malformed"]),
    "error == UNKNOWN_TOPIC_OR_PARTITION": lambda d: (
        d["error_name"] == "UNKNOWN_TOPIC_OR_PARTITION"
    ),
    "error == 3": lambda d: d["error_code"] == 3,
    "client contains cfk": lambda d: d["client_id"].astype("string").str.contains("cfk"),
    "client_id matches '^mix-.*-admin$'": lambda d: (
        d["client_id"].astype("string").str.contains(r"^mix-.*-admin$")
    ),
    "topic": lambda d: d["topics"].map(len) > 0,
    "topic contains mix": lambda d: _topics_any(d, lambda t: "mix" in t),
    "status in {unanswered orphan_response}": lambda d: d["status"].isin(
        ["unanswered", "orphan_response"]
    ),
    "stream == 3 || stream == 4": lambda d: d["stream"].isin([3, 4]),
    "(api == Produce or api == Fetch) && !(latency < 5)": lambda d: (
        # a missing latency is not < 5, so "not (latency < 5)" holds for it
        d["api_name"].isin(["Produce", "Fetch"]) & ~(d["latency_ms"] < 5).fillna(False).astype(bool)
    ),
    "version >= 13 and api == Metadata": lambda d: (
        (d["api_version"] >= 13) & (d["api_name"] == "Metadata")
    ),
    "throttle_ms > 0": lambda d: d["throttle_ms"] > 0,
    "service_ms < latency_ms": lambda d: pd.Series(False, index=d.index),  # a word, not a column
}


@pytest.mark.parametrize("expression", list(CASES))
def test_filter_selects_what_pandas_selects(df: pd.DataFrame, expression: str) -> None:
    ours = parse_filter(expression).mask(df)
    theirs = CASES[expression](df).fillna(False).astype(bool)
    assert ours.tolist() == theirs.tolist()
    if expression not in ("service_ms < latency_ms", "throttle_ms > 0"):
        assert 0 < int(ours.sum()) < len(df), "a case that selects all or nothing proves little"


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("", "empty filter"),
        ("api ==", "ends too soon"),
        ("nosuchfield == 1", "unknown field 'nosuchfield'"),
        ("(api == Fetch", "ends too soon"),
        ("api == Fetch )", "unexpected ')' at column 14"),
        ("latency > > 3", "expected a value at column 11"),
        ("client matches '('", "bad regular expression"),
        ("__import__('os').system('true')", "unknown field"),
        ("status in {}", "empty set"),
    ],
)
def test_bad_filters_say_what_and_where(expression: str, words: str) -> None:
    with pytest.raises(FilterError, match=None) as caught:
        parse_filter(expression)
    assert words in str(caught.value)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


EXPR = "api == Metadata or error"


def test_analyze_writes_only_the_matching_rows(df: pd.DataFrame, tmp_path: Path) -> None:
    out = tmp_path / "pairs.parquet"
    proc = _cli("analyze", str(CAPTURE), "--filter", EXPR, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    want = df[(df["api_name"] == "Metadata") | df["status"].isin(["error", "malformed"])]
    got = pd.read_parquet(out)
    assert sorted(zip(got["stream"], got["correlation_id"], strict=True)) == sorted(
        zip(want["stream"], want["correlation_id"], strict=True)
    )
    assert f"Kafka pairs: {len(want)} of {len(df)} rows matching {EXPR!r}" in proc.stdout


def test_a_bad_filter_is_a_usage_error(tmp_path: Path) -> None:
    for command in ("analyze", "decode", "report"):
        proc = _cli(command, str(CAPTURE), "--filter", "api ==", cwd=tmp_path)
        assert proc.returncode == 2 and "--filter" in proc.stderr, proc.stderr
        assert not list(tmp_path.iterdir())


def test_decode_lines_carry_times_latency_status_and_filter_alike(
    df: pd.DataFrame, tmp_path: Path
) -> None:
    proc = _cli("decode", str(CAPTURE), "--filter", EXPR, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    want = df[(df["api_name"] == "Metadata") | df["status"].isin(["error", "malformed"])]
    assert len(lines) == len(want)
    rows = {(r.stream, r.correlation_id, r.api_key): r for r in df.itertuples(index=False)}
    for line in lines:
        row = rows[(line["stream"], line["correlation_id"], line["api_key"])]
        assert line["status"] == row.status
        if pd.isna(row.latency_ms):  # unanswered: no response, no latency
            assert line["latency_ms"] is None and line["response_time"] is None
        else:
            assert line["latency_ms"] == pytest.approx(row.latency_ms, abs=1e-6)
            assert pd.Timestamp(line["response_time"]) == row.response_time
        assert pd.Timestamp(line["request_time"]) == row.request_time
        assert line["client_id"] == row.client_id
        assert line["flags"] == list(row.flags)


def test_decode_status_of_every_line_equals_the_pairs_table(df: pd.DataFrame) -> None:
    from dissector.wire.full_decode import iter_decoded

    lines = list(iter_decoded([str(CAPTURE)]))
    assert len(lines) == len(df)
    ours = sorted(
        (x["stream"], -1 if x["correlation_id"] is None else x["correlation_id"], x["status"])
        for x in lines
    )
    theirs = sorted(
        (int(s), -1 if pd.isna(c) else int(c), str(st))
        for s, c, st in zip(df["stream"], df["correlation_id"], df["status"], strict=True)
    )
    assert ours == theirs


def test_report_shows_the_filter_and_only_its_rows(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    out = tmp_path / "r.html"
    proc = _cli("report", str(CAPTURE), "--filter", "api == Fetch", "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(out.read_text().split())
    assert "api == Fetch (13 of 427 rows;" in text
    assert "--filter &#39;api == Fetch&#39;" in text or "--filter 'api == Fetch'" in text


def test_names_no_row_has_are_said_when_nothing_matches(df: pd.DataFrame) -> None:
    """A misspelt API or error name matches nothing, like a name that is real but absent
    from the capture; the empty result says which names no row has (caseless)."""
    wanted = parse_filter("api == Fecth or api == 3 or error == unknown_topic or api == fetch")
    assert wanted.names == (
        ("api_name", "Fecth"),
        ("error_name", "unknown_topic"),
        ("api_name", "fetch"),
    )
    assert wanted.absent(df) == ("no API named 'Fecth'", "no error named 'unknown_topic'")
    assert parse_filter("api != Fecth and error == 35").names == ()  # only == by name


def test_analyze_and_report_say_which_names_no_row_has(tmp_path: Path) -> None:
    typo = "api == Fecth"
    proc = _cli("analyze", str(CAPTURE), "--filter", typo, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (
        f"no row matches {typo!r} (427 rows before the filter: no API named 'Fecth' among them)"
        in " ".join(proc.stdout.split())
    )
    real = "api == Fetch and error == UNKNOWN_TOPIC_OR_PARTITION"  # both names exist
    proc = _cli("analyze", str(CAPTURE), "--filter", real, cwd=tmp_path)
    assert f"no row matches {real!r} (427 rows before the filter)" in proc.stdout
    pytest.importorskip("jinja2")
    out = tmp_path / "r.html"
    proc = _cli("report", str(CAPTURE), "--filter", typo, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(out.read_text().split())
    assert "matched none of the 427 rows (no API named &#39;Fecth&#39; among them)." in text


def test_decode_says_which_names_no_pair_has(tmp_path: Path) -> None:
    """decode streams its lines: an empty output after a filter says so on stderr, with
    the names no pair has, as analyze's table does."""
    typo = "api == Fecth"
    proc = _cli("decode", str(CAPTURE), "--filter", typo, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        f"no pair matches {typo!r} (427 pairs decoded: no API named 'Fecth' among them)"
    )
    real = "api == Fetch and error == UNKNOWN_TOPIC_OR_PARTITION"  # both names exist
    proc = _cli("decode", str(CAPTURE), "--filter", real, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (f"no pair matches {real!r} (427 pairs decoded)")
    proc = _cli("decode", str(CAPTURE), "--filter", "api == fetch", cwd=tmp_path)
    assert len(proc.stdout.splitlines()) == 13  # the report's count of Fetch rows
    assert "no pair matches" not in proc.stderr
