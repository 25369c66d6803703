"""Property: the same TCP bytes, however segmented, reordered or duplicated, give the same pairs.

The packets come from real captures; hypothesis re-cuts their payloads at random
points, shuffles them within a small window and repeats some. Reassembly must hide
all of that, so every column that does not depend on packet timing is unchanged.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dissector import protocol
from dissector.accounting import Counters
from dissector.table.frame import records_to_frame
from tests.oracle.capture import Packet, read_packets
from tests.oracle.pipeline import Session, iter_packet_exchanges
from tests.oracle.rows import build_record

TIMING = ["request_time", "response_time", "latency_ms", "first_byte_ms"]
CAPTURES = ["local-tansu-confluent-kafka.pcapng", "ndpi-kafka.pcapng"]


def _frame_of(packets: list[Packet]) -> pd.DataFrame:
    session = Session()
    topics = protocol.TopicNames()
    recs = [
        build_record("x", ex, protocol, topics) for ex in iter_packet_exchanges(packets, session)
    ]
    df = records_to_frame(recs).drop(columns=TIMING)
    return df.sort_values(["stream", "correlation_id", "status"]).reset_index(drop=True)


CONTROL = 0x07  # FIN, SYN, RST: never split or moved


def _split(pkt: Packet, cuts: list[int]) -> list[Packet]:
    data = pkt.payload
    points = sorted({c % len(data) for c in cuts if c % len(data)})
    out = []
    start = 0
    for end in [*points, len(data)]:
        seq = (pkt.seq + start) & 0xFFFFFFFF
        out.append(dataclasses.replace(pkt, payload=data[start:end], seq=seq))
        start = end
    return out


def _direction(pkt: Packet) -> tuple[str, int, str, int]:
    return (pkt.src, pkt.sport, pkt.dst, pkt.dport)


def _mangle(packets: list[Packet], draw: st.DrawFn) -> list[Packet]:
    pieces: list[Packet] = []
    for pkt in packets:
        if len(pkt.payload) > 1 and not pkt.flags & CONTROL and draw(st.integers(0, 3)) == 0:
            pieces.extend(_split(pkt, draw(st.lists(st.integers(1, 10_000), max_size=3))))
        else:
            pieces.append(pkt)
    # Reorder data segments only among neighbours of the same direction (a response
    # never overtakes its request), never across SYN/FIN/RST, and repeat a few of
    # them as retransmissions.
    # The first data segment of a direction stays first: in a capture that starts
    # mid-connection nothing tells where that direction's byte stream begins.
    out: list[Packet] = []
    window: list[Packet] = []
    started: set[tuple[str, int, str, int]] = set()
    for pkt in pieces:
        if window and _direction(window[0]) != _direction(pkt):
            out.extend(draw(st.permutations(window)))
            window = []
        first = pkt.payload and _direction(pkt) not in started
        if first:
            started.add(_direction(pkt))
        if pkt.payload and not pkt.flags & CONTROL and not first:
            window.append(pkt)
            if draw(st.integers(0, 4)) == 0:
                window.append(pkt)
            if len(window) >= 4:
                out.extend(draw(st.permutations(window)))
                window = []
        else:
            out.extend(window)
            window = []
            out.append(pkt)
    out.extend(window)
    return out


@pytest.mark.parametrize("name", CAPTURES)
def test_resegmented_reordered_duplicated_segments_give_the_same_pairs(
    shared_captures: Path, name: str
) -> None:
    packets = list(read_packets(str(shared_captures / name), Counters()))
    expected = _frame_of(packets)
    assert len(expected) > 0

    @settings(
        max_examples=15,
        deadline=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking a capture is slow
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def check(data: st.DataObject) -> None:
        mangled = _mangle(packets, data.draw)
        pd.testing.assert_frame_equal(_frame_of(mangled), expected)

    check()
