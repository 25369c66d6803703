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
    loses segments the client acknowledged. That pair is flagged (its body is not
    decoded; its latency stands when its last byte was captured); every other pair of
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
    assert cut["status"] == "ok" and cut["response_size"] == before["response_size"]
    if lost == "last":
        assert pd.isna(cut["latency_ms"])  # its last byte was never captured
    else:
        assert abs(cut["latency_ms"] - before["latency_ms"]) <= TOLERANCE_MS
    rest, rest_orig = mine[~hit], orig[~hit]
    assert (rest["status"] == rest_orig["status"]).all()
    assert all(list(f) == list(g) for f, g in zip(rest["flags"], rest_orig["flags"], strict=True))
    off = (rest["latency_ms"] - rest_orig["latency_ms"]).abs().max()
    assert off <= TOLERANCE_MS
    check_against_original(whole, damaged)
