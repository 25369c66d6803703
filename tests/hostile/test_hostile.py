"""Hostile captures (issue #11): no crash, no hang, no memory blow-up, no silent loss.

Each case is generated here. Most are spliced between two copies of a real recorded
capture, and the analysis runs in a child process so that its wall time and peak RSS
are its own; every case asserts a clean exit, bounded time and memory, that the real
pairs before and after the hostile part are all still there, and that the anomaly is
visible in a counter, ``decode_error`` or ``flags``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.build import (
    ACK,
    PEAK_RSS,
    PSH,
    RST,
    SYN,
    Conversation,
    analyze_child,
    api_versions,
    metadata_v1_many_topics,
    produce_v3,
    real_frames,
    run_child,
    sandwich,
    tcp_frame,
    tiny_records,
    v2_batch,
    write_pcap,
)

# Generous on purpose: the failures these guard against took minutes and gigabytes.
MAX_SECONDS = 60
MAX_RSS = 1_500 * 2**20


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The clean sandwich: both copies of the real capture, nothing hostile between."""
    path = write_pcap(tmp_path_factory.mktemp("clean") / "clean.pcap", sandwich([]))
    stats, _ = analyze_child(path)
    assert stats["ok"] > 400  # two copies of a real capture: hundreds of pairs
    return stats


def _check(path: Path, baseline: dict[str, Any], *, extra_ok: int = 0) -> dict[str, Any]:
    stats, outcome = analyze_child(path, timeout=MAX_SECONDS * 2)
    assert outcome.seconds < MAX_SECONDS, f"took {outcome.seconds:.1f} s"
    assert stats["peak_rss"] < MAX_RSS, f"peak RSS {stats['peak_rss'] / 2**20:.0f} MiB"
    assert stats["ok"] >= baseline["ok"] + extra_ok, "real pairs around the hostile part lost"
    return stats


def _t(i: int = 0) -> int:
    return real_frames()[-1][0] + 5 * 10**9 + i


# ---------------------------------------------------------------- crashes


def _pcapng_with(idbs: list[bytes], epbs: list[bytes]) -> bytes:
    """SHB + the given IDBs + EPBs of the real capture on interface 0 + the hostile EPBs."""

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out = [shb, block(1, struct.pack("<HHI", 1, 0, 262144))]
    out += [block(1, body) for body in idbs]
    frames = list(sandwich([]))
    half = len(frames) // 2
    for ts, frame in frames[:half]:
        us = ts // 1000
        out.append(
            block(
                6,
                struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(frame), len(frame)) + frame,
            )
        )
    out += [block(6, e) for e in epbs]
    for ts, frame in frames[half:]:
        us = ts // 1000
        out.append(
            block(
                6,
                struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(frame), len(frame)) + frame,
            )
        )
    return b"".join(out)


def _epb(iface: int, ticks: int, frame: bytes) -> bytes:
    return (
        struct.pack(
            "<IIIII", iface, (ticks >> 32) & 0xFFFFFFFF, ticks & 0xFFFFFFFF, len(frame), len(frame)
        )
        + frame
    )


def _idb_options(*opts: tuple[int, bytes]) -> bytes:
    body = struct.pack("<HHI", 1, 0, 262144)
    for code, value in opts:
        body += struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)
    return body + struct.pack("<HH", 0, 0)


def test_timestamps_overflowing_int64_nanoseconds(tmp_path: Path, baseline: dict[str, Any]) -> None:
    frame = tcp_frame("127.0.0.30", "127.0.0.40", 1234, 9092, 1, 1, ACK, b"x")
    idbs = [
        _idb_options((9, bytes([0]))),  # if_tsresol 10^0: seconds
        _idb_options((14, struct.pack("<q", -(2**62)))),  # if_tsoffset far in the past
    ]
    epbs = [
        _epb(0, 0x00210000 << 32, frame),  # microseconds past 2^63 ns
        _epb(1, 2**63, frame),
        _epb(2, 2**62, frame),
    ]
    path = tmp_path / "ts.pcapng"
    path.write_bytes(_pcapng_with(idbs, epbs))
    stats = _check(path, baseline)
    assert stats["counters"].get("bad_timestamp", 0) >= 2


def test_idb_option_cut_by_block_end(tmp_path: Path, baseline: dict[str, Any]) -> None:
    cut = struct.pack("<HHI", 1, 0, 262144) + struct.pack("<HH", 14, 8) + b"\x01\x02\x03\x04"
    path = tmp_path / "idb.pcapng"
    path.write_bytes(_pcapng_with([cut], []))
    _check(path, baseline)


# ---------------------------------------------------------------- CPU and memory bombs


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_out_of_order_one_byte_segments_are_linear(
    tmp_path: Path, baseline: dict[str, Any], order: str
) -> None:
    n = 200_000
    conv = Conversation(t_ns=_t()).handshake()
    base = conv.seq_c
    seqs = range(base + 1, base + 1 + n)  # byte `base` never arrives: a hole before all
    for seq in seqs if order == "forward" else reversed(seqs):
        conv._emit(True, PSH | ACK, b"\x00", seq=seq)
    path = write_pcap(tmp_path / "ooo.pcap", sandwich(conv.frames))
    stats = _check(path, baseline)
    assert stats["counters"].get("tcp_out_of_order", 0) > 0


def test_zstd_record_bombs_share_one_budget(tmp_path: Path, baseline: dict[str, Any]) -> None:
    import zstandard

    n = (64 << 20) // 7
    bomb = zstandard.ZstdCompressor(level=1).compress(tiny_records(n))
    assert len(bomb) < 64 << 10
    req, resp = produce_v3(1, "bombs", [v2_batch(bomb, n, codec=4)] * 100)
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    path = write_pcap(tmp_path / "bomb.pcap", sandwich(conv.frames))
    stats = _check(path, baseline, extra_ok=1)
    assert any("decompression_limit" in e for e in stats["decode_errors"]), stats["decode_errors"]


@pytest.fixture(scope="module")
def big_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 32 MB Produce frame of zstd bombs (each inflating to 64 MiB) between the two
    copies of the real capture (built once: analyze and report read the same file)."""
    import zstandard

    n = (64 << 20) // 7
    bomb = zstandard.ZstdCompressor(level=1).compress(tiny_records(n))
    copies = (32 << 20) // len(bomb)
    req, resp = produce_v3(1, "bombs", [v2_batch(bomb, n, codec=4)] * copies)
    assert len(req) > 30 << 20
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    return write_pcap(tmp_path_factory.mktemp("big-bomb") / "big-bomb.pcap", sandwich(conv.frames))


def test_a_large_frame_of_bombs_buys_no_more_than_the_fixed_cap(
    big_bomb: Path, baseline: dict[str, Any]
) -> None:
    """A 32 MB Produce frame of zstd bombs: its decompression budget stops at the fixed
    cap (FRAME_BUDGET_CAP), not at 32x its size (1 GiB, 2.3 GB of memory before)."""
    stats = _check(big_bomb, baseline, extra_ok=1)
    assert any("decompression_limit" in e for e in stats["decode_errors"]), stats["decode_errors"]
    assert stats["peak_rss"] < 1 << 30


REPORT = (
    PEAK_RSS
    + """
import json, sys
from dissector.cli.app import main
try:
    main(["report", sys.argv[1], "-o", sys.argv[2]], standalone_mode=False)
finally:
    print(json.dumps({"peak_rss": peak_rss()}))
"""
)


def test_report_of_a_large_frame_of_bombs_stays_under_the_cap(
    big_bomb: Path, tmp_path: Path
) -> None:
    """``report`` reads the same frame in its pairs and its partitions passes (2.9 GB
    before the fixed cap): under 1 GiB, in bounded time, the frame's pair in the page
    with its decompression_limit error."""
    import json

    out = tmp_path / "report.html"
    outcome = run_child(["-c", REPORT, str(big_bomb), str(out)], timeout=MAX_SECONDS * 2)
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    assert "Traceback" not in outcome.stderr
    assert outcome.seconds < MAX_SECONDS, f"took {outcome.seconds:.1f} s"
    peak = json.loads(outcome.stdout.strip().splitlines()[-1])["peak_rss"]
    assert peak < 1 << 30, f"peak RSS {peak / 2**20:.0f} MiB"
    page = out.read_text(encoding="utf-8")
    assert "decompression_limit" in page


def test_gzip_capture_of_zeros_stops_early(tmp_path: Path) -> None:
    import zlib

    head = tmp_path / "head.pcap"
    write_pcap(head, sandwich([]))
    raw = head.read_bytes() + bytes(256 << 20)
    path = tmp_path / "zeros.pcap.gz"
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    path.write_bytes(comp.compress(raw) + comp.flush())
    stats, outcome = analyze_child(path, timeout=MAX_SECONDS * 2)
    assert outcome.seconds < 20
    assert stats["ok"] > 400
    assert any(k in stats["counters"] for k in ("capture_truncated", "bad_record")), stats[
        "counters"
    ]


def test_metadata_request_of_millions_of_empty_topics(
    tmp_path: Path, baseline: dict[str, Any]
) -> None:
    req, resp = metadata_v1_many_topics(7, 5_000_000)
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    path = write_pcap(tmp_path / "meta.pcap", sandwich(conv.frames))
    stats = _check(path, baseline, extra_ok=1)
    assert stats["peak_rss"] < 600 * 2**20


def test_a_flood_of_syns_does_not_hold_state(tmp_path: Path, baseline: dict[str, Any]) -> None:
    t = _t()
    syns = [
        (t + i, tcp_frame(f"127.0.{1 + i // 60000 % 200}.{1 + i // 250 % 240}", "127.0.0.20",
                          1024 + i % 60000, 9092, i, 0, SYN))
        for i in range(200_000)
    ]  # fmt: skip
    path = write_pcap(tmp_path / "syns.pcap", sandwich(syns))
    stats = _check(path, baseline)
    assert stats["counters"].get("tcp_streams", 0) >= 200_000


# ---------------------------------------------------------------- silent loss


def test_bad_crc_reaches_decode_error_without_changing_status(
    tmp_path: Path, baseline: dict[str, Any]
) -> None:
    batch = v2_batch(tiny_records(3), 3, bad_crc=True)
    req, resp = produce_v3(3, "crc", [batch])
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    path = write_pcap(tmp_path / "crc.pcap", sandwich(conv.frames))
    stats = _check(path, baseline, extra_ok=1)
    assert any("crc_mismatch" in e for e in stats["decode_errors"]), stats["decode_errors"]


def test_ip_total_length_beyond_the_frame(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    conv.pair(*api_versions(1))
    req, resp = api_versions(2)
    # The IP header claims 64 KB; the frame holds the real request only.
    conv._emit(True, PSH | ACK, req, ip_total_length=65000)
    conv.seq_c += len(req)
    conv.send(False, resp)
    conv.pair(*api_versions(3)).close()
    path = write_pcap(tmp_path / "iplen.pcap", sandwich(conv.frames))
    _check(path, baseline, extra_ok=3)


def test_spoofed_syn_mid_stream(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    conv.pair(*api_versions(1))
    conv._emit(True, SYN, seq=77_777)  # another ISN on the same 4-tuple
    conv._emit(False, ACK)  # the broker's challenge ACK still acknowledges the real stream
    conv.pair(*api_versions(2)).pair(*api_versions(3)).close()
    path = write_pcap(tmp_path / "syn.pcap", sandwich(conv.frames))
    _check(path, baseline, extra_ok=3)


def test_in_window_rst_followed_by_data(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    conv.pair(*api_versions(1))
    conv._emit(True, RST | ACK)
    conv.pair(*api_versions(2)).pair(*api_versions(3)).close()
    path = write_pcap(tmp_path / "rst.pcap", sandwich(conv.frames))
    _check(path, baseline, extra_ok=3)


def test_tls_looking_bytes_do_not_end_kafka(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    conv.pair(*api_versions(1))
    conv.send(True, b"\x16\x03\x01\x00\x05hello")  # a TLS record header at a frame boundary
    conv.pair(*api_versions(2)).pair(*api_versions(3)).close()
    path = write_pcap(tmp_path / "tls.pcap", sandwich(conv.frames))
    _check(path, baseline, extra_ok=3)


def test_pairs_after_a_hole_still_pair(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    conv.pair(*api_versions(1))
    lost, _ = api_versions(2)
    conv.send(True, lost, lose=True)  # the capture missed this request
    reqs = [api_versions(i) for i in (3, 4, 5)]
    for req, _ in reqs:
        conv.send(True, req)
    for _, resp in reqs:
        conv.send(False, resp)
    conv.close()
    path = write_pcap(tmp_path / "hole.pcap", sandwich(conv.frames))
    stats = _check(path, baseline, extra_ok=4)
    assert stats["statuses"].get("orphan_response", 0) <= baseline["statuses"].get(
        "orphan_response", 0
    )


def test_backwards_timestamps_are_flagged(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = Conversation(t_ns=_t()).handshake()
    req, resp = api_versions(1)
    conv.send(True, req)
    conv.t_ns -= 10**9  # the response is stamped a second before its request
    conv.send(False, resp).close()
    path = write_pcap(tmp_path / "back.pcap", sandwich(conv.frames))
    stats = _check(path, baseline, extra_ok=1)
    assert "negative_latency" in stats["flags"]


DECODE = (
    PEAK_RSS
    + """
import json, sys
import dissector
rows = list(dissector.decode(sys.argv[1]))
errors = sorted({str(r.get("request", {}).get("error")) for r in rows if r.get("request")})
print(json.dumps({"rows": len(rows), "errors": errors,
                  "peak_rss": peak_rss()}))
"""
)


def test_full_decode_of_millions_of_empty_topics_is_bounded(tmp_path: Path) -> None:
    """The full-body decoder (``decode``) refuses an array no real message has, by name,
    instead of building millions of Python strings."""
    import json

    from tests.hostile.build import run_child

    req, resp = metadata_v1_many_topics(7, 5_000_000)
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    path = write_pcap(tmp_path / "meta.pcap", conv.frames)
    outcome = run_child(["-c", DECODE, str(path)], MAX_SECONDS * 2)
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    got = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert got["rows"] == 1
    assert any("topics" in e and "decode limit" in e for e in got["errors"]), got["errors"]
    assert got["peak_rss"] < 600 * 2**20


def test_a_string_length_below_minus_one_is_a_decode_error(
    tmp_path: Path, baseline: dict[str, Any]
) -> None:
    """-1 is null; -2 is no length at all: Kafka's readers refuse it, so does the row
    (it used to read as null and pass without a decode_error)."""
    req, resp = produce_v3(1, "neg", [v2_batch(tiny_records(3), 3)])
    null_tid = struct.pack(">h", -1)
    at = 4 + 2 + 2 + 4 + 2 + len("hostile-producer")  # size, key, version, id, client_id
    assert req[at : at + 2] == null_tid  # transactional_id: null
    req = req[:at] + struct.pack(">h", -2) + req[at + 2 :]
    conv = Conversation(t_ns=_t()).handshake().pair(req, resp).close()
    stats = _check(write_pcap(tmp_path / "neg.pcap", sandwich(conv.frames)), baseline)
    assert any("length -2" in e for e in stats["decode_errors"]), stats["decode_errors"]
