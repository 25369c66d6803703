"""``decode`` says what ``analyze`` says about every pair of a damaged capture.

Oracles: ``analyze``'s rows of the same file for each pair's status, flags, decode
error, latency and summary (the pairs table is what the issue and the README define;
``decode`` lines promise the same), and ``decode`` of the whole original capture for the
bodies of the pairs the damaged copy still holds whole. The copies are made the way the
field makes them, by Wireshark's ``editcap``: cut by a snap length (``-s N``), or with
packets removed (``editcap IN OUT N...``, after cutting the loopback capture's 64 KiB
segments to a 1,448-byte MSS as a network carries them). A TLS capture read with its
key log checks the ``tls`` flag.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from dissector.json_values import iso_ns
from tests import field_transforms as ft

REPO = Path(__file__).resolve().parents[1]
ORIGINAL = REPO / "captures" / "kafka-4-mixed.pcapng"
TLS = REPO / "captures" / "tls" / "tls13-confluent"
EDITCAP = shutil.which("editcap")

needs_editcap = pytest.mark.skipif(EDITCAP is None, reason="editcap (Wireshark) is not installed")


def _value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return None
    return v


def _time(v: Any) -> str | None:
    return None if _value(v) is None else iso_ns(int(pd.Timestamp(v).value))


def _row_key(r: dict[str, Any]) -> tuple[Any, ...]:
    cid = _value(r["correlation_id"])
    return (
        int(r["stream"]),
        None if cid is None else int(cid),
        _time(r["request_time"]),
        _time(r["response_time"]),
    )


def _line_key(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["stream"], d["correlation_id"], d["request_time"], d["response_time"])


def _facts_of_row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": r["status"],
        "flags": list(r["flags"]),
        "decode_error": _value(r["decode_error"]),
        "latency_ms": _value(r["latency_ms"]),
        "first_byte_ms": _value(r["first_byte_ms"]),
        "api_name": _value(r["api_name"]),
        "error_code": _value(r["error_code"]),
        "throttle_ms": _value(r["throttle_ms"]),
        "topics": list(r["topics"]),
    }


def _facts_of_line(d: dict[str, Any]) -> dict[str, Any]:
    s = d["summary"] or {}
    return {
        "status": d["status"],
        "flags": d["flags"],
        "decode_error": d["decode_error"],
        "latency_ms": d["latency_ms"],
        "first_byte_ms": d["first_byte_ms"],
        "api_name": d["api_name"],
        "error_code": s.get("error_code"),
        "throttle_ms": s.get("throttle_ms"),
        "topics": s.get("topics", []),
    }


def check_agreement(lines: list[dict[str, Any]], rows: pd.DataFrame) -> None:
    """Every decode line has the row of its pair, with the same facts, and no row is
    left over."""
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows.to_dict("records"):
        by_key.setdefault(_row_key(r), []).append(r)
    assert len(lines) == len(rows)
    for d in lines:
        matches = by_key.get(_line_key(d))
        assert matches, f"no row for the decode line {_line_key(d)}"
        want = _facts_of_row(matches.pop(0))
        assert _facts_of_line(d) == want, _line_key(d)


def _pair_id(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["client"], d["broker"], d["api_key"], d["correlation_id"])


@pytest.fixture(scope="module")
def original() -> dict[tuple[Any, ...], dict[str, Any]]:
    lines = list(dissector.decode(ORIGINAL))
    ids = [_pair_id(d) for d in lines]
    assert len(set(ids)) == len(ids)
    return dict(zip(ids, lines, strict=True))


def _own(value: Any) -> Any:
    """A decoded side without the topic names learnt from other pairs (a damaged copy
    may have lost the Metadata response that names a topic id)."""
    if isinstance(value, dict):
        return {k: _own(v) for k, v in value.items() if k != "topic_name"}
    if isinstance(value, list):
        return [_own(v) for v in value]
    return value


def check_bodies(
    lines: list[dict[str, Any]], original: dict[tuple[Any, ...], dict[str, Any]]
) -> int:
    """The sides a damaged copy holds whole decode as in the original; returns how many."""
    whole = 0
    for d in lines:
        want = original.get(_pair_id(d))
        for side in ("request", "response"):
            got = d[side]
            if got is None or "incomplete" in got:
                continue
            assert want is not None, _pair_id(d)
            assert _own(got) == _own(want[side]), (_pair_id(d), side)
            whole += 1
    return whole


def _flagged(lines: list[dict[str, Any]], flag: str) -> int:
    return sum(flag in d["flags"] for d in lines)


@needs_editcap
@pytest.mark.parametrize("snaplen", [96, 128, 512])
def test_snap_length_copy(
    snaplen: int, tmp_path: Path, original: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    assert EDITCAP is not None
    cut = tmp_path / f"s{snaplen}.pcapng"
    subprocess.run([EDITCAP, "-s", str(snaplen), str(ORIGINAL), str(cut)], check=True)
    lines = list(dissector.decode(cut))
    check_agreement(lines, dissector.analyze(cut))
    assert _flagged(lines, "truncated") > 0
    assert not any(d["status"] == "malformed" for d in lines)
    assert check_bodies(lines, original) > 0


def _lossy(tmp_path: Path, seed: int) -> Path:
    assert EDITCAP is not None
    frames = ft.resegment(ft.read_frames(ORIGINAL))
    whole = ft.write_pcap(tmp_path / "whole.pcap", frames)
    drop = random.Random(seed).sample(ft.losable(frames), round(len(frames) * 0.01))
    lossy = tmp_path / "lossy.pcap"
    subprocess.run(
        [EDITCAP, str(whole), str(lossy), *(str(i + 1) for i in sorted(drop))], check=True
    )
    return lossy


@needs_editcap
@pytest.mark.parametrize("seed", range(3))
def test_copy_with_packets_removed(
    seed: int, tmp_path: Path, original: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    lossy = _lossy(tmp_path, seed)
    lines = list(dissector.decode(lossy))
    check_agreement(lines, dissector.analyze(lossy))
    assert _flagged(lines, "capture_gap") > 0
    assert check_bodies(lines, original) > len(lines)


def test_tls_capture_read_with_its_keys() -> None:
    capture, keys = TLS.with_suffix(".pcapng"), TLS.with_suffix(".keys")
    lines = list(dissector.decode(capture, tls_keylog=keys))
    check_agreement(lines, dissector.analyze(capture, tls_keylog=keys))
    assert lines and all("tls" in d["flags"] for d in lines)


ROTATION = REPO / "captures" / "kafka-4-longpoll-rotation.pcapng"
HEURISTIC = REPO / "captures" / "heuristic-port-19192.pcapng"
UUID_LENGTH = 36


@needs_editcap
@pytest.mark.parametrize(
    ("capture", "snaplen"), [(ORIGINAL, 144), (ROTATION, 264), (ROTATION, 400), (HEURISTIC, 200)]
)
def test_topic_ids_named_by_cut_responses(capture: Path, snaplen: int, tmp_path: Path) -> None:
    """Snap lengths at which Metadata and share-group responses are cut after some of
    their topic entries: the ids those entries name whole are learnt by ``decode`` as by
    ``analyze`` (the same topics on every row; the pair's own ids named by its cut
    response, as by a whole one), and every name learnt so is the name the whole
    original capture gives that pair's topic."""
    assert EDITCAP is not None
    cut = tmp_path / "cut.pcapng"
    subprocess.run([EDITCAP, "-s", str(snaplen), str(capture), str(cut)], check=True)
    lines = list(dissector.decode(cut))
    check_agreement(lines, dissector.analyze(cut))
    whole = {_pair_id(d): d for d in dissector.decode(capture)}
    named = 0
    for d in lines:
        want = set((whole[_pair_id(d)]["summary"] or {}).get("topics", []))
        for topic in (d["summary"] or {}).get("topics", []):
            if len(topic) != UUID_LENGTH:
                assert topic in want, (_pair_id(d), topic)
                named += 1
    assert named > 0


@needs_editcap
def test_core_records_tell_what_the_stage_records_tell(tmp_path: Path) -> None:
    """``decode`` reads the core's exchange records as they come; their derived facts
    (``holed``, ``end_ts_ns``, ``wire_size``, computed in Rust) are the stage
    dataclass's (``stages.Frame``'s properties) on a snap-cut copy, cut sides included."""
    from dissector.options import keyword_options
    from dissector.wire import core

    assert EDITCAP is not None
    cut = tmp_path / "s128.pcapng"
    subprocess.run([EDITCAP, "-s", "128", str(ORIGINAL), str(cut)], check=True)
    holed = 0
    for x in core.iter_core_exchanges([str(cut)], keyword_options(None)):
        record = core.exchange_record(x)
        for got, want in ((x.request, record.request), (x.response, record.response)):
            assert (got is None) == (want is None)
            if got is not None and want is not None:
                assert (got.holed, got.end_ts_ns, got.wire_size) == (
                    want.holed,
                    want.end_ts_ns,
                    want.wire_size,
                )
                holed += got.holed
    assert holed > 0
