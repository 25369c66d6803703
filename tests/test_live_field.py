"""Mirror tunnels and IP fragments on the live path: ``test_field_tunnels``' captures
(the real ``kafka-4-mixed`` capture re-encapsulated by scapy in every tunnel kind, and
cut into IPv4 fragments) replayed onto ``lo`` by tcpreplay while ``LiveCapture``
captures them with a filter that takes the outer packets. The oracle is
``dissector.analyze`` of the replayed file (itself checked against the original
capture and tshark in ``test_field_tunnels``): every row equal but for the times.

The capture's broker port is first moved to a private one (tcprewrite), so that the
broker test bed's own traffic on ``lo`` never mixes in. Needs root and tcpreplay.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dissector
from dissector.live import LiveCapture, LiveOptions
from dissector.options import Options
from tests import field_transforms as ft
from tests.live_replay import (
    IFACE,
    NEEDS,
    TIMEOUT_S,
    Capture,
    frame_rows,
    port_moved,
    replay,
    rows,
)

REPO = Path(__file__).resolve().parents[1]
ORIGINAL = REPO / "captures" / "kafka-4-mixed.pcapng"
# The capture's two brokers, each moved to a private port.
MOVED = {9092: 39396, 9094: 39397}
PORTS = frozenset(MOVED.values())
# The plain TCP of the connections not carried in a tunnel, the tunnels' outer packets
# (documentation ranges), any IPv4 fragment, and MPLS (last: BPF's ``mpls`` moves the
# offsets of what follows it).
FILTER = " or ".join(
    [
        *(f"tcp port {p}" for p in sorted(PORTS)),
        "net 192.0.2.0/24",
        "net 2001:db8::/32",
        "(ip and ip[6:2] & 0x3fff != 0)",
        "mpls",
    ]
)

pytestmark = NEEDS


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[ft.Frame]:
    moved = tmp_path_factory.mktemp("moved") / "moved.pcap"
    return ft.read_frames(port_moved(ORIGINAL, moved, MOVED))


@pytest.mark.parametrize("kind", ["tunnels", "fragments"])
def test_live_opens_tunnels_and_reassembles_fragments(
    kind: str, frames: list[ft.Frame], tmp_path: Path
) -> None:
    made = ft.tunnelled(frames, ft.TUNNELS_V4) if kind == "tunnels" else ft.fragmented_v4(frames)
    path = ft.write_pcap(tmp_path / f"{kind}.pcap", made)
    df = dissector.analyze(path, ports=PORTS)
    expected = frame_rows(df)
    assert len(expected) > 400

    cap = LiveCapture(
        LiveOptions(IFACE, bpf=FILTER, analysis=Options(ports=PORTS), duration=TIMEOUT_S)
    )
    collecting = Capture(cap)
    replay(path, pps=10_000)
    got = rows(collecting.finish())

    assert cap.final_stats.dropped == 0
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a == b
    c, offline = cap.counters, df.attrs["counters"]
    if kind == "tunnels":
        for name in ["vxlan", "geneve", "gre", "erspan", "ip_in_ip", "mpls"]:
            assert c[f"tunnel_{name}"] == offline[f"tunnel_{name}"] > 0, name
    else:
        assert c["ip_reassembled"] == offline["ip_reassembled"] > 100
    assert c["tcp_packets"] == offline["tcp_packets"] == len(frames)
