"""Framing: size-prefixed frames cut from chunks of one direction."""

from __future__ import annotations

import struct

from dissector.accounting import Counters
from tests.oracle.framing import Framer
from tests.oracle.kafka_header import request_start_check
from tests.oracle.tcp import Chunk

CLIENT = ("10.0.0.1", 50000)
BROKER = ("10.0.0.2", 9092)


def _known(key: int, version: int) -> bool:
    return 0 <= key <= 92 and 0 <= version <= 20


def _request(corr: int, key: int = 18, version: int = 3, client_id: bytes = b"cli") -> bytes:
    body = struct.pack(">hhih", key, version, corr, len(client_id)) + client_id + b"\x00"
    return struct.pack(">i", len(body)) + body


def _chunk(data: bytes, ts: int, frame: int, resync: bool = False, lost: int = 0) -> Chunk:
    return Chunk(0, CLIENT, BROKER, data, ts, frame, resync, lost)


def _framer(counters: Counters) -> Framer:
    return Framer(0, CLIENT, BROKER, counters, request_start_check(_known), max_frame=1 << 20)


def test_frames_split_across_chunks_keep_first_and_last_packet_times() -> None:
    c = Counters()
    f = _framer(c)
    msg = _request(7)
    assert f.feed(_chunk(msg[:3], 100, 1)) == []
    assert f.feed(_chunk(msg[3:9], 200, 2)) == []
    (frame,) = f.feed(_chunk(msg[9:], 300, 3))
    assert frame.payload == msg[4:]
    assert (frame.first_ts_ns, frame.last_ts_ns, frame.first_frame, frame.last_frame) == (
        100,
        300,
        1,
        3,
    )
    assert frame.wire_size == len(msg)


def test_frame_ends_with_the_latest_packet_among_its_bytes() -> None:
    """Chunks of segments held behind a hole come with their own, older, times: a frame
    is complete when its last-arriving byte was captured, and the next frame of the
    same chunk is timed by that chunk alone."""
    f = _framer(Counters())
    one, two = _request(7), _request(8)
    # The retransmission (frame 9, t=900) filled a hole; the held bytes follow it.
    assert f.feed(_chunk(one[:5], 900, 9)) == []
    first, second = f.feed(_chunk(one[5:] + two, 400, 4))
    assert (first.first_frame, first.last_frame, first.last_ts_ns) == (9, 9, 900)
    assert (second.first_frame, second.last_frame, second.last_ts_ns) == (4, 4, 400)


def test_several_frames_in_one_chunk_and_a_tail_into_the_next() -> None:
    f = _framer(Counters())
    a, b, cc = _request(1), _request(2), _request(3)
    frames = f.feed(_chunk(a + b + cc[:5], 10, 1))
    assert [fr.payload for fr in frames] == [a[4:], b[4:]]
    (last,) = f.feed(_chunk(cc[5:], 20, 2))
    assert last.payload == cc[4:] and last.first_ts_ns == 10 and last.last_ts_ns == 20


def test_resync_after_gap_skips_to_next_plausible_request_at_a_chunk_start() -> None:
    c = Counters()
    f = _framer(c)
    msg = _request(5)
    assert f.feed(_chunk(msg[:6], 1, 1)) == []
    # A hole: the rest of msg is lost, and more; the next chunk is the middle of something.
    # msg goes on as a holed frame (its end lost in the hole) to be paired and flagged.
    (holed,) = f.feed(_chunk(b"\x12\x34\x56\x78garbage", 2, 2, resync=True, lost=100))
    assert (holed.payload, holed.wire_size, holed.end_lost) == (msg[4:6], len(msg), True)
    (frame,) = f.feed(_chunk(_request(6), 3, 3))
    assert frame.after_gap
    assert c["frames_cut_by_gap"] == 1
    assert c["resync_skipped_bytes"] == 11
    (nxt,) = f.feed(_chunk(_request(7), 4, 4))
    assert not nxt.after_gap


def test_hole_inside_a_frame_keeps_sync_by_its_size_prefix() -> None:
    """As Wireshark goes on after "previous segment not captured": the hole's size and
    the frame's size prefix say where the next frame starts, so nothing after the hole
    is skipped and the next frame is not taken as a guess (no after_gap)."""
    c = Counters()
    f = _framer(c)
    big = _request(5) + b"x" * 300
    big = struct.pack(">i", len(big) - 4) + big[4:]
    nxt = _request(6)
    assert f.feed(_chunk(big[:100], 1, 1)) == []
    # Bytes 100..199 lost; the rest of big and the next request follow.
    holed, after = f.feed(_chunk(big[200:] + nxt, 3, 3, resync=True, lost=100))
    # missing: every payload byte beyond the first hole, lost or not.
    assert (holed.payload, holed.missing, holed.end_lost) == (big[4:100], len(big) - 100, False)
    assert (holed.first_frame, holed.last_frame, holed.wire_size) == (1, 3, len(big))
    assert after.payload == nxt[4:] and not after.after_gap
    assert c["frames_cut_by_gap"] == 1 and not c["resyncs"] and not c["resync_skipped_bytes"]


def test_oversized_size_prefix_loses_sync_and_is_counted() -> None:
    c = Counters()
    f = _framer(c)
    assert f.feed(_chunk(struct.pack(">i", 1 << 30) + b"xxxx", 1, 1)) == []
    assert c["bad_frame_size"] == 1
    (frame,) = f.feed(_chunk(_request(9), 2, 2))
    assert frame.after_gap


def test_tls_client_hello_is_detected_not_framed() -> None:
    c = Counters()
    f = _framer(c)
    hello = bytes.fromhex("160301020001") + b"\x00" * 64
    assert f.feed(_chunk(hello, 1, 1)) == []
    assert f.tls
    assert f.feed(_chunk(b"\x17\x03\x03\x00\x10" + b"\x00" * 16, 2, 2)) == []
    assert c["tls_bytes"] == len(hello) + 21


def test_partial_frame_at_close_is_counted() -> None:
    c = Counters()
    f = _framer(c)
    f.feed(_chunk(_request(1)[:7], 1, 1))
    f.close()
    assert c["truncated_frames"] == 1 and c["truncated_frame_bytes"] == 7


def test_resync_candidate_split_in_tiny_segments_is_kept_until_it_can_be_judged() -> None:
    c = Counters()
    f = _framer(c)
    msg = _request(42, client_id=b"a-long-client-id")
    assert f.feed(_chunk(msg[:6], 1, 1, resync=True)) == []
    assert f.feed(_chunk(msg[6:9], 2, 2)) == []
    (frame,) = f.feed(_chunk(msg[9:], 3, 3))
    assert frame.payload == msg[4:] and frame.after_gap and frame.first_ts_ns == 1
    assert c["resync_skipped_bytes"] == 0
