"""Capture sets: a real capture cut into rotated files (editcap -c, -i, -r: Wireshark's
own tool is the independent cutter) and read back as one capture must give exactly the
rows of the whole file, pair by pair; files that only look alike stay apart.

The oracle is the whole original capture analysed on its own. Two real captures:
``kafka-4-mixed`` (every kind of client) and ``kafka-4-longpoll-rotation`` (57
connections of a long-poll workload, so that many pairs cross each boundary; see
captures/README.md).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import dissector
from dissector.cli import main
from dissector.options import CaptureBytes, CaptureSet, ChainRule
from dissector.wire.sets import (
    FileFacts,
    Interface,
    capture_sets,
    file_facts,
    group_sets,
    natural_key,
)

REPO = Path(__file__).resolve().parent.parent
MIXED = REPO / "captures" / "kafka-4-mixed.pcapng"
LONGPOLL = REPO / "captures" / "kafka-4-longpoll-rotation.pcapng"
EDITCAP = shutil.which("editcap")
CAPINFOS = shutil.which("capinfos")

needs_editcap = pytest.mark.skipif(
    EDITCAP is None, reason="editcap (Wireshark) is not installed: scripts/run-tests installs it"
)

# Counters that depend on how the bytes are laid out in files, not on the traffic.
FILE_LAYOUT_COUNTERS = {"bytes_read", "chained_files"}


def _editcap(args: list[str], src: Path, out: Path) -> list[str]:
    assert EDITCAP is not None
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([EDITCAP, *args, str(src), str(out)], check=True, capture_output=True)
    stem = out.name.split(".")[0]
    return sorted(str(p) for p in out.parent.glob(f"{stem}*"))


@pytest.fixture(scope="module")
def whole() -> dict[Path, pd.DataFrame]:
    return {cap: dissector.analyze(str(cap)) for cap in (MIXED, LONGPOLL)}


# (capture, editcap arguments): by packet count and by time, each at least 10 files.
CUTS = [
    (MIXED, ["-c", "180"]),
    (MIXED, ["-i", "4"]),
    (LONGPOLL, ["-c", "600"]),
    (LONGPOLL, ["-i", "1"]),
]


@pytest.fixture(scope="module", params=CUTS, ids=lambda c: f"{c[0].stem}{''.join(c[1])}")
def parts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if EDITCAP is None:
        pytest.skip("editcap (Wireshark) is not installed: scripts/run-tests installs it")
    capture, args = request.param
    out = tmp_path_factory.mktemp("parts") / f"part{capture.suffix}"
    files = _editcap(args, capture, out)
    assert len(files) >= 10, files
    return capture, files


def assert_same_rows(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Every row and column but ``capture`` (the file name) equal, in order."""
    assert got["status"].value_counts().to_dict() == want["status"].value_counts().to_dict()
    pd.testing.assert_frame_equal(
        got.drop(columns=["capture"]).reset_index(drop=True),
        want.drop(columns=["capture"]).reset_index(drop=True),
        check_categorical=False,
    )


def _traffic_counters(df: pd.DataFrame) -> dict[str, int]:
    counters = df.attrs["counters"]
    return {k: v for k, v in counters.items() if k not in FILE_LAYOUT_COUNTERS}


@needs_editcap
def test_parts_read_as_one_capture_give_the_whole_files_rows(parts, whole) -> None:
    capture, files = parts
    want = whole[capture]
    got = dissector.analyze(files)
    assert_same_rows(got, want)
    assert _traffic_counters(got) == _traffic_counters(want)
    assert got.attrs["counters"]["chained_files"] == len(files) - 1
    assert got.attrs["capture_sets"] == [{"capture": files[0], "files": files}]
    assert set(got["capture"].astype(str)) == {files[0]}


@needs_editcap
def test_the_cut_breaks_pairs_when_files_are_read_apart(parts, whole) -> None:
    """The proof that the boundaries matter: read apart, pairs crossing a boundary
    become unanswered + orphan rows (the long-poll capture: many per boundary)."""
    capture, files = parts
    apart = dissector.analyze(files, chain="none")
    statuses = apart["status"].value_counts()
    broken = int(statuses.get("unanswered", 0) + statuses.get("orphan_response", 0))
    whole_unanswered = int((whole[capture]["status"] == "unanswered").sum())
    boundaries = len(files) - 1
    # The mixed capture's drivers run one after another: few pairs are in flight at a
    # cut. The long-poll one has a Fetch in flight on each consumer connection.
    assert broken - whole_unanswered >= (5 * boundaries if capture == LONGPOLL else 1)
    assert "chained_files" not in apart.attrs["counters"]
    assert len(apart.attrs["capture_sets"]) == len(files)


@needs_editcap
def test_cli_analyze_and_report_read_the_parts_as_one_capture(parts, whole, tmp_path) -> None:
    capture, files = parts
    runner = CliRunner()
    whole_out, parts_out = tmp_path / "whole.parquet", tmp_path / "parts.parquet"
    whole_parts, parts_parts = tmp_path / "whole-parts.parquet", tmp_path / "parts-parts.parquet"
    for src, out, parts_table in (
        ([str(capture)], whole_out, whole_parts),
        (files, parts_out, parts_parts),
    ):
        result = runner.invoke(
            main, ["analyze", *src, "-o", str(out), "--partitions", str(parts_table)]
        )
        assert result.exit_code == 0, result.output
    assert f"{len(files)} files read as one capture" in result.output
    assert_same_rows(pd.read_parquet(parts_out), pd.read_parquet(whole_out))
    # The partitions table comes from its own pass over the exchanges: chained too.
    got_parts, want_parts = pd.read_parquet(parts_parts), pd.read_parquet(whole_parts)
    assert len(want_parts) > 0
    pd.testing.assert_frame_equal(
        got_parts.drop(columns=["capture"]), want_parts.drop(columns=["capture"])
    )


@needs_editcap
def test_report_reads_the_parts_as_one_capture(parts, tmp_path) -> None:
    from dissector.analytics.report import analyze as report_analyze

    capture, files = parts
    want = report_analyze([str(capture)])
    got = report_analyze(files)
    assert_same_rows(got, want)
    for name in ("partitions", "versions"):
        a = getattr(got.attrs["tables"], name).drop(columns=["capture"])
        b = getattr(want.attrs["tables"], name).drop(columns=["capture"])
        pd.testing.assert_frame_equal(a, b)
    assert got.attrs["client_software"] == want.attrs["client_software"]
    out = tmp_path / "parts.html"
    result = CliRunner().invoke(main, ["report", *files, "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert f"{len(files)} files read as one capture" in html
    ok = int((want["status"] == "ok").sum())
    assert re.search(rf"ok {ok:,}\b", html), "the report's status counts are the whole file's"


@needs_editcap
def test_decode_reads_the_parts_as_one_capture(tmp_path) -> None:
    files = _editcap(["-c", "180"], MIXED, tmp_path / "cut" / "d.pcapng")
    runner = CliRunner()
    lines = []
    for src in ([str(MIXED)], files):
        result = runner.invoke(main, ["decode", *src])
        assert result.exit_code == 0, result.output
        decoded = [json.loads(line) for line in result.stdout.splitlines()]
        for d in decoded:
            d.pop("capture")
        lines.append(decoded)
    assert len(lines[0]) == len(lines[1]) > 400
    assert lines[0] == lines[1]


@needs_editcap
def test_a_frame_cut_by_the_file_boundary_is_read_whole(tmp_path, whole) -> None:
    """editcap -r cuts between two TCP segments of one Kafka frame."""
    split = next(
        (f.first_frame, f.last_frame)
        for _, ex in dissector.iter_exchanges(str(LONGPOLL))
        for f in (ex.request, ex.response)
        if f is not None and f.last_frame > f.first_frame + 1
    )
    cut = split[0]  # the frame's first segment ends the first file
    a, b = tmp_path / "cut_1.pcapng", tmp_path / "cut_2.pcapng"
    assert EDITCAP is not None
    subprocess.run([EDITCAP, "-r", str(LONGPOLL), str(a), f"1-{cut}"], check=True)
    subprocess.run([EDITCAP, "-r", str(LONGPOLL), str(b), f"{cut + 1}-1000000"], check=True)
    assert_same_rows(dissector.analyze([str(a), str(b)]), whole[LONGPOLL])
    apart = dissector.analyze([str(a), str(b)], chain="none")
    statuses = apart["status"].value_counts().to_dict()
    assert statuses != whole[LONGPOLL]["status"].value_counts().to_dict()


@needs_editcap
def test_a_set_held_in_memory_is_handed_to_the_core_file_by_file(parts, whole) -> None:
    """A lazy sequence of in-memory files (what a distributed task can hand over): the
    core asks for each file when the one before has ended, in order, once."""
    capture, files = parts
    asked: list[int] = []

    class Lazy(Sequence[CaptureBytes]):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
            if not 0 <= i < len(files):
                raise IndexError(i)
            asked.append(i)
            return CaptureBytes(f"mem:{i}", Path(files[i]).read_bytes())

    got = dissector.analyze([CaptureSet(Lazy())])
    assert_same_rows(got, whole[capture])
    assert asked[: len(files)] == list(range(len(files)))  # the run: each file once, in order
    assert set(got["capture"].astype(str)) == {"mem:0"}


# ---------------------------------------------------------------- hosts apart


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[str]]:
    """Two recordings of one name pattern that overlap in time: host A is the mixed
    capture cut in two, host B the same traffic recorded 5 s later (editcap -t 5)."""
    if EDITCAP is None:
        pytest.skip("editcap (Wireshark) is not installed: scripts/run-tests installs it")
    d = tmp_path_factory.mktemp("hosts")
    shifted = d / "shifted.pcapng"
    subprocess.run([EDITCAP, "-t", "5", str(MIXED), str(shifted)], check=True)
    names = []
    for src, numbers in ((MIXED, (1, 2)), (shifted, (3, 4))):
        for n, frames in zip(numbers, ("1-907", "908-1814"), strict=True):
            out = d / f"cap_{n}.pcapng"
            subprocess.run([EDITCAP, "-r", str(src), str(out), frames], check=True)
            names.append(str(out))
    return names[:2], names[2:]


@needs_editcap
def test_captures_of_two_hosts_overlapping_in_time_stay_apart(two_hosts, whole) -> None:
    host_a, host_b = two_hosts
    files = sorted(host_a + host_b)
    sets = capture_sets(files)
    assert [s.files for s in sets] == [tuple(host_a), tuple(host_b)]
    got = dissector.analyze(files)
    want = whole[MIXED]
    a = got[got["capture"].astype(str) == host_a[0]]
    b = got[got["capture"].astype(str) == host_b[0]]
    assert_same_rows(a, want)
    shift = pd.Timedelta(seconds=5)
    b_times = b[["request_time", "response_time"]].reset_index(drop=True)
    assert (b_times - shift).equals(want[["request_time", "response_time"]].reset_index(drop=True))
    assert b["status"].value_counts().to_dict() == want["status"].value_counts().to_dict()


@needs_editcap
def test_the_rule_is_overridable(two_hosts) -> None:
    host_a, host_b = two_hosts
    files = host_a + host_b
    everything = dissector.analyze(files, chain="all")
    assert everything.attrs["counters"]["chained_files"] == 3
    assert [s["files"] for s in everything.attrs["capture_sets"]] == [
        [host_a[0], host_b[0], host_a[1], host_b[1]]  # time order
    ]
    apart = dissector.analyze(files, chain=ChainRule(mode="none"))
    assert len(apart.attrs["capture_sets"]) == 4
    # A set given by hand is read as given, whatever the rule says.
    by_hand = dissector.analyze([CaptureSet(tuple(host_a)), host_b[0], host_b[1]])
    assert [s["files"] for s in by_hand.attrs["capture_sets"]] == [host_a, host_b]
    # The CLI: --no-chain and --chain none read every file alone.
    runner = CliRunner()
    for flags in (["--no-chain"], ["--chain", "none"]):
        result = runner.invoke(main, ["analyze", *files, *flags])
        assert result.exit_code == 0, result.output
        assert "read as one capture" not in result.output
        assert "chained_files" not in result.output
    result = runner.invoke(main, ["analyze", *files, "--chain", "all"])
    assert "4 files read as one capture" in result.output
    result = runner.invoke(main, ["analyze", *files, "--no-chain", "--chain", "all"])
    assert result.exit_code == 2


# ---------------------------------------------------------------- facts and the rule


@pytest.mark.skipif(CAPINFOS is None, reason="capinfos (Wireshark) is not installed")
@pytest.mark.parametrize("capture", [MIXED, LONGPOLL], ids=lambda p: p.stem)
def test_file_facts_agree_with_capinfos(capture: Path) -> None:
    assert CAPINFOS is not None
    out = subprocess.run(
        [CAPINFOS, "-T", "-r", "-S", "-E", "-c", "-a", "-e", str(capture)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    _, encapsulation, packets, first, last = out.split("\t")
    facts = file_facts(str(capture))
    assert facts.records == int(packets)
    assert facts.first_ns == _ns(first) and facts.min_ns == _ns(first)
    assert facts.last_ns == _ns(last) and facts.max_ns == _ns(last)
    assert facts.link_types == (1,) and encapsulation == "ether"
    assert facts.interfaces[0].name == "lo" and not facts.damaged


def _ns(text: str) -> int:
    seconds, _, fraction = text.strip().partition(".")
    return int(seconds) * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def _facts(name: str, start_s: float, end_s: float, **kw: object) -> FileFacts:
    fields: dict[str, object] = {
        "source": name,
        "format": "pcapng",
        "link_types": (1,),
        "interfaces": (Interface(1, 262144, "eth0"),),
        "records": 10,
        "first_ns": int(start_s * 1e9),
        "last_ns": int(end_s * 1e9),
        "min_ns": int(start_s * 1e9),
        "max_ns": int(end_s * 1e9),
        "damaged": False,
    }
    fields.update(kw)
    return FileFacts(**fields)  # type: ignore[arg-type]


def _names(sets: list[CaptureSet]) -> list[list[str]]:
    return [list(s.file_names) for s in sets]


def test_rule_chains_rotated_files_in_time_order() -> None:
    # tcpdump -C names: cap.pcap, cap.pcap1, ... cap.pcap10 (given in shell order).
    files = [_facts("cap.pcap", 0, 10)] + [
        _facts(f"cap.pcap{i}", 10 * i, 10 * i + 9.5) for i in (1, 10, 2, 3, 4, 5, 6, 7, 8, 9)
    ]
    assert _names(group_sets(files)) == [["cap.pcap"] + [f"cap.pcap{i}" for i in range(1, 11)]]


def test_rule_keeps_apart_what_differs() -> None:
    base = _facts("a_1.pcap", 0, 10)
    assert len(group_sets([base, _facts("b_2.pcap", 11, 20)])) == 2  # name pattern
    assert len(group_sets([base, _facts("a_2.pcap", 11, 20, link_types=(113,))])) == 2
    other_if = (Interface(1, 262144, "eth1"),)
    assert len(group_sets([base, _facts("a_2.pcap", 11, 20, interfaces=other_if)])) == 2
    assert len(group_sets([base, _facts("a_2.pcap", 5, 20)])) == 2  # overlap
    assert len(group_sets([base, _facts("a_2.pcap", 3611, 3620)])) == 2  # gap > 1 h
    assert len(group_sets([base, _facts("a_2.pcap", 11, 20, min_ns=None, max_ns=None)])) == 2
    # jitter: the next file's first packets up to 1 s before the previous one's last
    assert len(group_sets([base, _facts("a_2.pcap", 9.5, 20)])) == 1
    assert len(group_sets([base, _facts("a_2.pcap", 3000, 3020)], ChainRule(max_gap_s=60))) == 2
    assert len(group_sets([base, _facts("b.pcap", 100, 200)], ChainRule(mode="all"))) == 1


def test_rule_prefers_the_file_numbered_before() -> None:
    # Two recordings of one pattern take turns; a file can follow either: the one
    # numbered just before wins over the one that ended later.
    files = [
        _facts("r_1.pcap", 0, 10),
        _facts("r_3.pcap", 1, 11),  # the other recording, overlapping r_1
        _facts("r_2.pcap", 12, 20),
        _facts("r_4.pcap", 21, 30),
    ]
    assert _names(group_sets(files)) == [["r_1.pcap", "r_2.pcap"], ["r_3.pcap", "r_4.pcap"]]


def test_natural_name_order() -> None:
    names = ["cap.pcap10", "cap.pcap2", "cap.pcap1", "cap.pcap"]  # tcpdump -C
    assert sorted(names, key=natural_key) == ["cap.pcap", "cap.pcap1", "cap.pcap2", "cap.pcap10"]
    names = ["p_00010_2025.pcapng", "p_00009_2025.pcapng"]  # dumpcap -b, editcap -c
    assert sorted(names, key=natural_key) == names[::-1]
