"""The command line as a user meets it: run as a process, mistakes end in one line.

Every case checks the exit code, the message on stderr and that no Python
traceback leaks out. Captures are small and built by the test (scapy), except
where the width of a real multi-API table matters.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_cli_counters import API_VERSIONS_V0, Conversation, kafka_request, kafka_response
from test_cli_counters import write_capture as _write_capture

from dissector.cli.common import parse_ports

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"


def run_cli(
    *args: str, cwd: Path, shim: Path | None = None, check_clean: bool = True
) -> subprocess.CompletedProcess[str]:
    """``python -m dissector.cli ARGS`` with this checkout's package first on the path."""
    env = dict(os.environ)
    paths = [str(shim)] if shim is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(REPO)])
    env.pop("COLUMNS", None)  # the width test needs rich's own choice
    proc = subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check_clean:
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one "Error: ..." line Click prints for a user error."""
    lines = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """One ApiVersions v0 pair on port 9092."""
    return _write_capture(tmp_path / "good.pcap", [Conversation(40000, 9092, [API_VERSIONS_V0])])


# -- outputs ---------------------------------------------------------------------


def test_analyze_creates_missing_directories_and_writes_json_lines(
    tmp_path: Path, good: Path
) -> None:
    out = tmp_path / "new" / "dir" / "pairs.json"
    proc = run_cli("analyze", str(good), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["api_name"], r["status"]) for r in rows] == [("ApiVersions", "ok")]
    assert f"wrote 1 rows to {out}" in proc.stdout


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_analyze_unwritable_output_prints_the_table_then_one_error(tmp_path: Path) -> None:
    proc = run_cli("analyze", str(BUNDLED), "-o", "/proc/x.parquet", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Kafka pairs: 427 rows" in proc.stdout  # the analysis is not lost
    assert error_line(proc).startswith("Error: cannot write /proc/x.parquet")


def test_output_under_a_file_is_refused_cleanly(tmp_path: Path, good: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    proc = run_cli("analyze", str(good), "-o", str(blocker / "x.csv"), cwd=tmp_path)
    assert proc.returncode == 1
    assert error_line(proc).startswith(f"Error: cannot write {blocker / 'x.csv'}")


@pytest.mark.parametrize(
    ("command", "name", "expected"),
    [("analyze", "x.pdf", ".parquet, .csv, .jsonl, .json"), ("report", "x.pdf", ".html, .htm")],
)
def test_output_extension_must_match_the_format(
    tmp_path: Path, good: Path, command: str, name: str, expected: str
) -> None:
    proc = run_cli(command, str(good), "-o", str(tmp_path / name), cwd=tmp_path)
    assert proc.returncode == 2
    assert expected in error_line(proc)
    assert not (tmp_path / name).exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_report_to_unwritable_path_is_one_line(tmp_path: Path, good: Path) -> None:
    proc = run_cli("report", str(good), "-o", "/proc/r.html", cwd=tmp_path)
    assert proc.returncode == 1
    assert error_line(proc).startswith("Error: cannot write /proc/r.html: ")


# -- several captures, some bad ----------------------------------------------------


def test_bad_captures_are_named_and_the_good_ones_written(tmp_path: Path, good: Path) -> None:
    not_capture = tmp_path / "notes.txt"
    not_capture.write_text("hello\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    missing = tmp_path / "missing.pcap"
    out = tmp_path / "pairs.parquet"
    args = [str(good), str(missing), str(not_capture), str(folder)]
    proc = run_cli("analyze", *args, "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 1
    assert error_line(proc) == "Error: 3 of 4 captures failed"
    for bad in (missing, not_capture, folder):
        assert f"error: {bad}: " in proc.stderr
    assert "not a pcap or pcapng capture" in proc.stderr
    df = pd.read_parquet(out)
    assert df["capture"].tolist() == [str(good)] and df["status"].tolist() == ["ok"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_capture_is_named(tmp_path: Path, good: Path) -> None:
    locked = tmp_path / "locked.pcap"
    locked.write_bytes(good.read_bytes())
    locked.chmod(0)
    proc = run_cli("analyze", str(locked), str(good), cwd=tmp_path)
    assert proc.returncode == 1
    assert f"error: {locked}: cannot open: Permission denied" in proc.stderr
    assert "Kafka pairs: 1 rows" in proc.stdout


def test_decode_skips_a_bad_capture_and_fails_at_the_end(tmp_path: Path, good: Path) -> None:
    proc = run_cli("decode", str(tmp_path / "missing.pcap"), str(good), cwd=tmp_path)
    assert proc.returncode == 1
    assert error_line(proc) == "Error: 1 of 2 captures failed"
    (line,) = proc.stdout.splitlines()
    assert json.loads(line)["api_name"] == "ApiVersions"


@pytest.mark.parametrize("quiet", [False, True])
def test_truncated_capture_warns_but_succeeds(tmp_path: Path, good: Path, quiet: bool) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(good.read_bytes()[:-10])
    proc = run_cli("analyze", str(cut), *(["--quiet"] if quiet else []), cwd=tmp_path)
    assert proc.returncode == 0
    assert f"warning: {cut}: the file is truncated" in proc.stderr


def test_gzipped_capture_reads_like_the_plain_one(tmp_path: Path, good: Path) -> None:
    gz = tmp_path / "good.pcap.gz"
    gz.write_bytes(gzip.compress(good.read_bytes()))
    proc = run_cli("analyze", str(gz), "-o", str(tmp_path / "p.csv"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(tmp_path / "p.csv")["api_name"].tolist() == ["ApiVersions"]


# -- options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--ports", ""], "--ports"),
        (["--ports", "http"], "--ports"),
        (["--ports", "9099-9092"], "--ports"),
        (["--max-frame", "0"], "--max-frame"),
        (["--max-frame", "-5"], "--max-frame"),
    ],
)
def test_bad_analyze_options_are_rejected(
    tmp_path: Path, good: Path, args: list[str], expected: str
) -> None:
    proc = run_cli("analyze", str(good), *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert expected in error_line(proc)


def test_unknown_api_is_rejected(tmp_path: Path, good: Path) -> None:
    proc = run_cli("decode", str(good), "--api", "999", cwd=tmp_path)
    assert proc.returncode == 2
    assert "unknown API '999'" in error_line(proc)


def test_port_range_selects_the_broker(tmp_path: Path) -> None:
    cap = _write_capture(tmp_path / "p.pcap", [Conversation(40000, 7001, [API_VERSIONS_V0])])
    inside = run_cli("decode", str(cap), "--ports", "9092,7000-7002", cwd=tmp_path)
    outside = run_cli("decode", str(cap), "--ports", "7002-7010", cwd=tmp_path)
    assert inside.returncode == outside.returncode == 0
    assert [json.loads(x)["broker"] for x in inside.stdout.splitlines()] == ["10.1.0.2:7001"]
    assert outside.stdout == ""


def test_parse_ports_lists_and_ranges() -> None:
    assert parse_ports(None) is None
    assert parse_ports("9092") == {9092}
    assert parse_ports("9092-9094") == {9092, 9093, 9094}
    assert parse_ports(" 9092, 9094-9096 ") == {9092, 9094, 9095, 9096}
    assert parse_ports("1-65535") == frozenset(range(1, 65536))


@pytest.mark.parametrize(
    "bad",
    ["", " , ", "0", "65536", "9092-", "-9092", "a-b", "9093-9092", "9092,,9093", "9092,", ",9092"],
)
def test_parse_ports_rejects(bad: str) -> None:
    import click

    with pytest.raises(click.BadParameter):
        parse_ports(bad)


def test_apis_with_a_bad_specs_source(tmp_path: Path) -> None:
    missing = run_cli("apis", "--specs", "NOT_A_SPEC", cwd=tmp_path)
    assert missing.returncode == 2 and "NOT_A_SPEC" in error_line(missing)
    not_spec = tmp_path / "README.md"
    not_spec.write_text("# not specs\n")
    proc = run_cli("apis", "--specs", str(not_spec), cwd=tmp_path)
    assert proc.returncode == 1
    assert error_line(proc).startswith("Error: cannot load specs: ")


# -- missing extras ----------------------------------------------------------------


def _shim(tmp_path: Path, module: str) -> Path:
    """A directory that, first on PYTHONPATH, makes ``import MODULE`` fail as if absent."""
    shim = tmp_path / "shim"
    pkg = shim / module
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    return shim


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [("spark", "pyspark", "spark"), ("report", "jinja2", "report")],
)
def test_missing_extra_names_the_extra(
    tmp_path: Path, good: Path, command: str, module: str, extra: str
) -> None:
    proc = run_cli(command, str(good), cwd=tmp_path, shim=_shim(tmp_path, module))
    assert proc.returncode == 1
    line = error_line(proc)
    assert module in line and f"pip install 'kafka-dissector[{extra}]'" in line
    if extra == "spark":
        assert "Java" in line


# -- what the summary shows ----------------------------------------------------------


def test_piped_summary_is_not_cut_to_80_columns(tmp_path: Path) -> None:
    proc = run_cli("analyze", str(BUNDLED), cwd=tmp_path)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) > 80
    assert "…" not in proc.stdout
    counters = next(line for line in lines if line.startswith("counters: "))
    assert counters.endswith("tcp_streams=100, unsupported_version_requests=1")


def test_rows_of_newer_versions_are_flagged_in_the_table(tmp_path: Path) -> None:
    newer = (kafka_request(3, 200, 7, b"\x00" * 8), kafka_response(7, b"\x00" * 8))
    cap = _write_capture(tmp_path / "n.pcap", [Conversation(40000, 9092, [newer, API_VERSIONS_V0])])
    proc = run_cli("analyze", str(cap), cwd=tmp_path)
    assert proc.returncode == 0
    assert "status: ok=2" in proc.stdout
    assert "unsupported: 1 row with an API version newer than the installed specs" in proc.stdout
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if "unsupported" in line and "┃" in line)
    cells = [c.strip() for c in header.strip("┃").split("┃")]
    metadata = next(line for line in lines if "Metadata" in line)
    values = [c.strip() for c in metadata.strip("│").split("│")]
    assert dict(zip(cells, values, strict=True))["unsupported"] == "1"


def test_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "dissector.cli", "decode", str(BUNDLED)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"{")
    proc.stdout.close()  # like `| head -1`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) != 0
    assert "Traceback" not in stderr and "Broken pipe" not in stderr, stderr


def test_live_output_rule_runs_before_any_capture(tmp_path: Path) -> None:
    # Refused up front: no interface is opened, so no privileges are needed.
    for option, name in (("-o", "pairs.pdf"), ("--write-pcap", "raw.txt")):
        proc = run_cli("live", "-i", "lo", option, str(tmp_path / name), cwd=tmp_path)
        assert proc.returncode == 2
        assert f"'{tmp_path / name}' must end in" in error_line(proc)


def test_every_extra_named_by_errors_exists_in_pyproject() -> None:
    import tomllib

    from dissector.cli import common as cli

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(cli._EXTRAS.values()) <= set(extras)
    for module, extra in cli._EXTRAS.items():
        # the extra installs the distribution that provides the module
        dist = {"pyspark": "pyspark", "py4j": "pyspark", "pcapy": "pcapy-ng"}.get(module, module)
        assert any(req.startswith(dist) for req in extras[extra]), (module, extra)


def test_report_of_several_captures_skips_the_bad_one(tmp_path: Path) -> None:
    """The good capture's report is written; the bad one is named; exit 1."""
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"not a capture at all")
    out = tmp_path / "r.html"
    good = Path(__file__).resolve().parents[1] / "captures" / "kafka-4-mixed.pcapng"
    done = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "report", str(good), str(bad), "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert f"error: {bad}: not a pcap or pcapng capture" in done.stderr
    assert "1 of 2 captures failed" in done.stderr
    assert out.stat().st_size > 10_000 and "kafka-4-mixed" in out.read_text(encoding="utf-8")
