"""Packet loss: real captures with packets removed, against the whole original capture.

Oracle: the original capture's pairs (``captures/kafka-4-*.pcapng``). Packets are removed
the way a capture loses them (``tests/field_transforms.py``: payload that no other
packet carries again and whose loss leaves evidence, a later segment or the peer's ACK;
``editcap IN OUT N...`` removes the same frames), and the loopback captures' 64 KiB
segments are first cut to a 1,448-byte MSS as a real network carries them. Every pair
of the original must then come out the same (status, latency within 1 ms) or carry a
flag naming the hole (``capture_gap``); nothing answered may be shown ``unanswered``
without one, and a pair whose request was lost is an orphan response that says so.
"""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest

import dissector
from tests import field_transforms as ft
from tests import tshark_kafka as tsk
from tests.oracle import correlate as oracle_correlate
from tests.oracle.pipeline import iter_pairs

REPO = Path(__file__).resolve().parents[1]
CAPTURES = REPO / "captures"
TOLERANCE_MS = 1.0


def _key(df: pd.DataFrame) -> pd.Series:
    return df["stream"].astype(str) + "/" + df["correlation_id"].astype("string").fillna("-")


def _flagged(row: pd.Series) -> bool:
    return "capture_gap" in list(row["flags"])


def check_against_original(
    whole: pd.DataFrame, damaged: pd.DataFrame, hit: set[int] | None = None
) -> dict[str, int]:
    """Every pair of ``whole``: the same in ``damaged`` or flagged there; or, on the
    connections that lost packets (``hit``), gone with both its frames. Returns counts."""
    got = damaged.assign(key=_key(damaged))
    orphans = got[got["status"] == "orphan_response"]
    got = got[got["status"] != "orphan_response"].drop_duplicates("key").set_index("key")
    seen = {"same": 0, "flagged": 0, "request_lost": 0, "both_lost": 0}
    want = whole[whole["status"] != "orphan_response"]
    for key, row in zip(_key(want), want.itertuples(index=False), strict=True):
        if key not in got.index:
            # The request was lost: its response must be an orphan flagged capture_gap.
            match = orphans[(orphans["stream"] == row.stream)]
            match = match[match["correlation_id"] == row.correlation_id]
            if not len(match) and hit is not None and row.stream in hit:
                seen["both_lost"] += 1  # request and response both in holes
                continue
            assert len(match) == 1, f"{key}: neither the pair nor its orphan response"
            assert _flagged(match.iloc[0]), f"{key}: orphan response without capture_gap"
            seen["request_lost"] += 1
            continue
        r = got.loc[key]
        if _flagged(r):
            seen["flagged"] += 1
            continue
        assert r["status"] == row.status, f"{key}: {row.status} shown {r['status']}, no flag"
        if pd.isna(row.latency_ms):
            assert pd.isna(r["latency_ms"]), key
        else:
            off = abs(r["latency_ms"] - row.latency_ms)
            assert off <= TOLERANCE_MS, f"{key}: latency {off:.3f} ms off, no flag"
        seen["same"] += 1
    # Orphans the original did not have all say why.
    extra = orphans[~orphans["correlation_id"].isin(whole["correlation_id"])]
    assert all(_flagged(r) for _, r in extra.iterrows())
    return seen


@pytest.fixture(scope="module")
def rotation(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ft.Frame], pd.DataFrame]:
    frames = ft.read_frames(CAPTURES / "kafka-4-longpoll-rotation.pcapng")
    path = ft.write_pcap(tmp_path_factory.mktemp("whole") / "whole.pcap", frames)
    return frames, dissector.analyze(path)


@pytest.fixture(scope="module")
def mixed_1448(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ft.Frame], pd.DataFrame]:
    frames = ft.resegment(ft.read_frames(CAPTURES / "kafka-4-mixed.pcapng"))
    path = ft.write_pcap(tmp_path_factory.mktemp("whole") / "mixed-1448.pcap", frames)
    return frames, dissector.analyze(path)


def _lose(
    frames: list[ft.Frame], share: float, seed: int, path: Path
) -> tuple[pd.DataFrame, set[int]]:
    """The capture with that share of its packets lost, and the connections hit."""
    candidates = ft.losable(frames)
    drop = random.Random(seed).sample(candidates, max(1, round(len(frames) * share)))
    streams: dict[tuple[object, ...], int] = {}
    index = [ft.stream_of(f, streams) if ft._tcp_layout(f) else -1 for _ts, f in frames]
    damaged = dissector.analyze(ft.write_pcap(path, ft.without(frames, drop)))
    return damaged, {index[i] for i in drop}


@pytest.mark.parametrize("seed", range(4))
def test_transactional_capture_with_a_tenth_of_a_percent_lost(
    rotation: tuple[list[ft.Frame], pd.DataFrame], seed: int, tmp_path: Path
) -> None:
    """The long-poll capture (transactional, idempotent and zstd producers, 16
    consumers): 0.1% of its packets removed (7 of 6,674)."""
    frames, whole = rotation
    damaged, hit = _lose(frames, 0.001, seed, tmp_path / "lossy.pcap")
    seen = check_against_original(whole, damaged, hit)
    assert damaged.attrs["counters"]["tcp_gaps"] >= 1
    assert seen["same"] >= len(whole) - 30


@pytest.mark.parametrize("seed", range(4))
def test_mixed_capture_at_1448_mss_with_one_percent_lost(
    mixed_1448: tuple[list[ft.Frame], pd.DataFrame], seed: int, tmp_path: Path
) -> None:
    frames, whole = mixed_1448
    damaged, hit = _lose(frames, 0.01, seed, tmp_path / "lossy.pcap")
    seen = check_against_original(whole, damaged, hit)
    assert seen["same"] >= len(whole) - 60


@pytest.fixture(scope="module")
def lag_1448() -> list[ft.Frame]:
    return ft.resegment(ft.read_frames(CAPTURES / "kafka-4-lag.pcapng"))


def _largest_response(frames: list[ft.Frame]) -> tuple[int, list[int]]:
    """The stream of the largest multi-segment response from port 9092, and the indexes
    of its segments (its size prefix read from its first segment's payload)."""
    streams: dict[tuple[object, ...], int] = {}
    stream_of = [
        ft.stream_of(f, streams) if ft._tcp_layout(f) is not None else -1 for _ts, f in frames
    ]

    def payload(i: int) -> bytes:
        f = frames[i][1]
        lay = ft._tcp_layout(f)
        if lay is None or f[lay[1] : lay[1] + 2] != (9092).to_bytes(2, "big"):
            return b""
        return f[lay[2] : lay[2] + ft.tcp_payload_len(f)]

    best: tuple[int, int, list[int]] = (0, -1, [])
    for i in range(len(frames)):
        data = payload(i)
        if len(data) < 8:
            continue
        size = int.from_bytes(data[:4], "big") + 4
        if size <= len(data) or size <= best[0] or size > 1 << 20:
            continue
        segs, left = [i], size - len(data)
        for j in range(i + 1, len(frames)):
            if left <= 0:
                break
            if stream_of[j] == stream_of[i] and payload(j):
                segs.append(j)
                left -= len(payload(j))
        best = (size, stream_of[i], segs)
    return best[1], best[2]


@pytest.mark.parametrize("lost", ["middle", "two_middle", "last"])
def test_a_fetch_response_missing_segments_the_client_acknowledged(
    lag_1448: list[ft.Frame], lost: str, tmp_path: Path
) -> None:
    """The largest Fetch response of the lag capture (16 KB, 12 segments at MSS 1,448)
    loses segments the client acknowledged. That pair is flagged, status ``unknown``
    (its body is decoded only up to the hole; its latency stands when its last byte was
    captured); every other pair of
    the connection, held behind the hole until the ACKs proved it lost, keeps its own
    times and its answer: no resync skips them."""
    whole = dissector.analyze(ft.write_pcap(tmp_path / "whole.pcap", lag_1448))
    stream, segs = _largest_response(lag_1448)
    assert len(segs) >= 10
    drop = {"middle": [segs[5]], "two_middle": segs[4:6], "last": [segs[-1]]}[lost]
    damaged = dissector.analyze(ft.write_pcap(tmp_path / "d.pcap", ft.without(lag_1448, drop)))
    counters = damaged.attrs["counters"]
    assert counters["frames_cut_by_gap"] == 1
    assert counters.get("resyncs", 0) == whole.attrs["counters"].get("resyncs", 0)
    mine = damaged[damaged["stream"] == stream].reset_index(drop=True)
    orig = whole[whole["stream"] == stream].reset_index(drop=True)
    assert list(mine["correlation_id"]) == list(orig["correlation_id"])
    hit = mine["decode_error"].astype("string").fillna("").str.contains("response_incomplete")
    assert hit.sum() == 1
    cut = mine[hit].iloc[0]
    before = orig[hit].iloc[0]
    assert list(cut["flags"]) == ["capture_gap"]
    # No error code in its bytes before the hole; the lost ones may hold one.
    assert before["status"] == "ok" and cut["status"] == "unknown"
    assert cut["response_size"] == before["response_size"]
    if lost == "last":
        assert pd.isna(cut["latency_ms"])  # its last byte was never captured
    else:
        assert abs(cut["latency_ms"] - before["latency_ms"]) <= TOLERANCE_MS
    rest, rest_orig = mine[~hit], orig[~hit]
    assert list(rest["status"]) == list(rest_orig["status"])
    assert all(list(f) == list(g) for f, g in zip(rest["flags"], rest_orig["flags"], strict=True))
    off = (rest["latency_ms"] - rest_orig["latency_ms"]).abs().max()
    assert off <= TOLERANCE_MS
    check_against_original(whole, damaged)


# --- a response lost whole; frame starts after a hole; tshark on the same copy ---------

COMPARED = (
    "api_key",
    "api_version",
    "correlation_id",
    "client_id",
    "request_size",
    "response_size",
    "request_time",
    "response_time",
    "error_code",
    "topics",
    "records",
    "decode_error",
)


def _broker_payload(frames: list[ft.Frame], i: int, port: int) -> bytes:
    """The TCP payload of frame ``i`` when the broker (``port``) sent it, else b""."""
    f = frames[i][1]
    lay = ft._tcp_layout(f)
    if lay is None or f[lay[1] : lay[1] + 2] != port.to_bytes(2, "big"):
        return b""
    return f[lay[2] : lay[2] + ft.tcp_payload_len(f)]


def whole_responses(frames: list[ft.Frame], port: int) -> list[tuple[int, int, int]]:
    """(frame index, tcp.stream, correlation id) of the losable packets that carry exactly
    one whole response of the broker on ``port``."""
    streams: dict[tuple[object, ...], int] = {}
    index = [ft.stream_of(f, streams) if ft._tcp_layout(f) else -1 for _ts, f in frames]
    out = []
    for i in ft.losable(frames):
        data = _broker_payload(frames, i, port)
        if len(data) >= 8 and int.from_bytes(data[:4], "big") + 4 == len(data):
            out.append((i, index[i], int.from_bytes(data[4:8], "big", signed=True)))
    return out


def _same_cell(a: object, b: object) -> bool:
    if isinstance(a, list | tuple) or hasattr(a, "__array__"):
        return list(a) == list(b)  # type: ignore[call-overload]
    return bool(pd.isna(a) and pd.isna(b)) or a == b


@pytest.mark.parametrize("nth", [10, 100, 200, 300])
def test_a_response_lost_whole_is_response_lost(nth: int, tshark: str, tmp_path: Path) -> None:
    """One packet carrying one whole response of the mixed capture removed: that
    request's row is ``response_lost`` flagged ``capture_gap`` (not ``unanswered``), and
    every other row is the original's (the next pair of the connection may say
    ``capture_gap``: it came after lost bytes). tshark reads the copy the same way."""
    original = CAPTURES / "kafka-4-mixed.pcapng"
    frames = ft.read_frames(original)
    whole = dissector.analyze(original)
    i, stream, corr = whole_responses(frames, 9092)[nth]
    path = ft.write_pcap(tmp_path / "lost.pcap", ft.without(frames, [i]))
    got = dissector.analyze(path)
    assert len(got) == len(whole)
    a, b = whole.assign(k=_key(whole)).set_index("k"), got.assign(k=_key(got)).set_index("k")
    lost = f"{stream}/{corr}"
    row, before = b.loc[lost], a.loc[lost]
    assert before["status"] in ("ok", "error")
    assert row["status"] == "response_lost" and list(row["flags"]) == ["capture_gap"]
    assert pd.isna(row["response_size"]) and pd.isna(row["latency_ms"])
    for col in ("api_key", "api_version", "request_size", "request_time", "client_id"):
        assert _same_cell(row[col], before[col]), col
    rest = b.drop(index=lost)
    assert set(rest.index) == set(a.index) - {lost}
    for key, r in rest.iterrows():
        o = a.loc[key]
        assert r["status"] == o["status"], key
        for col in (*COMPARED, "latency_ms"):
            assert _same_cell(r[col], o[col]), (key, col)
        extra = [f for f in r["flags"] if f not in list(o["flags"])]
        assert extra in ([], ["capture_gap"]) and (not extra or r["stream"] == stream), key
    assert tsk.agrees(tshark, path, got) == 0  # no hole left tshark behind here
    seen = tsk.read(tshark, path, [9092])
    assert (stream, corr) in seen.requests and (stream, corr) not in seen.responses


def frame_starts(frames: list[ft.Frame], port: int) -> list[int]:
    """The losable packets that open a response of several packets (its size prefix
    and header): losing one leaves framing to find the next frame in a body."""
    out = []
    for i in ft.losable(frames):
        data = _broker_payload(frames, i, port)
        if len(data) >= 8 and int.from_bytes(data[:4], "big") + 4 > len(data):
            out.append(i)
    return out


@pytest.fixture(scope="module")
def rotation_536(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[ft.Frame], pd.DataFrame]:
    """The long-poll capture at a 536-byte MSS (the IPv4 default): more packets start
    inside a body, where a hole leaves framing to look for the next frame."""
    frames = ft.resegment(ft.read_frames(CAPTURES / "kafka-4-longpoll-rotation.pcapng"), mss=536)
    path = ft.write_pcap(tmp_path_factory.mktemp("whole") / "rotation-536.pcap", frames)
    return frames, dissector.analyze(path)


def nothing_false(whole: pd.DataFrame, got: pd.DataFrame) -> dict[str, int]:
    """Every row of ``got`` is a pair of ``whole``: the same API, version and sides;
    its status and times the original's unless flagged ``capture_gap``; an orphan
    response only with a correlation id the original's connection used."""
    a = whole[whole["status"] != "orphan_response"]
    a = a.assign(k=_key(a)).set_index("k")
    used = set(zip(whole["stream"], whole["correlation_id"], strict=True))
    seen = {"same": 0, "flagged": 0, "orphans": 0}
    for r in got.itertuples():
        if r.status == "orphan_response":
            assert (r.stream, r.correlation_id) in used, f"false orphan {r.correlation_id}"
            seen["orphans"] += 1
            continue
        key = f"{r.stream}/{r.correlation_id}"
        assert key in a.index, f"{key}: a pair the original does not have"
        o = a.loc[key]
        assert (r.api_key, r.api_version, r.request_size) == (
            o["api_key"],
            o["api_version"],
            o["request_size"],
        ), key
        if "capture_gap" in list(r.flags):
            seen["flagged"] += 1
            continue
        assert r.status == o["status"], key
        for col in COMPARED:
            assert _same_cell(getattr(r, col), o[col]), (key, col)
        seen["same"] += 1
    return seen


def test_frame_starts_after_a_hole_are_confirmed_by_correlation_ids(
    rotation_536: tuple[list[ft.Frame], pd.DataFrame], tshark: str, tmp_path: Path
) -> None:
    """The first packet of a multi-packet response lost: framing must find the next
    frame inside what follows, where look-alike headers sit in record data. A frame
    start is taken only when its correlation id fits the connection's requests (a
    response answers one still open; a request repeats no recent id), so no false
    pair or orphan comes out of a body; the refusals are counted. Against the whole
    original and tshark's reading of each copy."""
    frames, whole = rotation_536
    starts = frame_starts(frames, 19392)
    assert len(starts) > 100
    refused = 0
    for i in starts[::24][:8]:
        path = ft.write_pcap(tmp_path / f"hole-{i}.pcap", ft.without(frames, [i]))
        got = dissector.analyze(path)
        seen = nothing_false(whole, got)
        assert seen["same"] >= len(whole) - 40, (i, seen)
        refused += got.attrs["counters"].get("resync_unconfirmed", 0)
        tsk.agrees(tshark, path, got)
    assert refused >= 4  # look-alike headers were met and refused


def test_without_the_correlation_check_a_body_hides_the_next_frame(
    rotation_536: tuple[list[ft.Frame], pd.DataFrame],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the check above guards against, on the Python twin of the framing and
    correlation stages: the first response of connection 0 (ApiVersions, two packets)
    loses its first packet; its second packet starts with record-like bytes that read
    as a sane size. Refused by its correlation id, the next packet (the Metadata
    response) is found; taken as a candidate, it waits for more bytes that never come
    and swallows that response: an answered request shown ``unanswered`` unflagged."""
    frames, _whole = rotation_536
    path = ft.write_pcap(
        tmp_path / "hole.pcap", ft.without(frames, [frame_starts(frames, 19392)[0]])
    )

    def stream_0() -> list[tuple[int | None, str, list[str]]]:
        return sorted(
            (r.correlation_id, r.status, r.flags) for r in iter_pairs(path) if r.stream == 0
        )

    checked = stream_0()
    native = dissector.analyze(path)
    native_0 = native[native["stream"] == 0]
    assert checked == sorted(
        zip(
            native_0["correlation_id"],
            native_0["status"],
            map(list, native_0["flags"]),
            strict=True,
        )
    )
    assert checked == [(1, "response_lost", ["capture_gap"]), (2, "ok", ["capture_gap"])]
    monkeypatch.setattr(oracle_correlate.Correlator, "confirms_start", lambda *_a: True)
    assert stream_0() == [(1, "response_lost", ["capture_gap"]), (2, "unanswered", [])]
