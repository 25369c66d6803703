"""Mirror tunnels and IP fragments: the real capture as the field delivers it.

Oracles: the whole original capture (``captures/kafka-4-mixed.pcapng``) and tshark.
The capture is re-encapsulated by scapy (an independent encoder) in every tunnel kind
that traffic mirroring uses (VXLAN, GENEVE, GRE with IPv4/IPv6/Ethernet inside, ERSPAN
types I-III, IP in IP, IPv4 in IPv6, IPv6 in IPv4/IPv6, MPLS label stacks with IP or an
Ethernet pseudowire, and a four-deep nest), one kind per TCP connection, and cut into
IPv4 and IPv6 fragments (in order, reversed, duplicated, and fragments of the tunnel's
outer packet). Every transformed capture must give the original's pairs, row for row
and column for column; and tshark must find in it the Kafka messages it finds in the
original, which shows the transformation itself is sound.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import dissector
from tests import field_transforms as ft

REPO = Path(__file__).resolve().parents[1]
ORIGINAL = REPO / "captures" / "kafka-4-mixed.pcapng"
TSHARK = shutil.which("tshark")


@pytest.fixture(scope="module")
def frames() -> list[ft.Frame]:
    return ft.read_frames(ORIGINAL)


@pytest.fixture(scope="module")
def original() -> pd.DataFrame:
    return dissector.analyze(ORIGINAL)


@pytest.fixture(scope="module")
def original_v6(frames: list[ft.Frame], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ft.write_pcap(tmp_path_factory.mktemp("v6") / "v6.pcap", ft.to_ipv6(frames))


def same_pairs(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Row for row, every column but the capture's name."""
    assert len(got) == len(want)
    pd.testing.assert_frame_equal(
        got.drop(columns="capture").reset_index(drop=True),
        want.drop(columns="capture").reset_index(drop=True),
        check_categorical=False,
    )


def tshark_messages(path: Path) -> Counter[tuple[str, str]]:
    """Kafka messages tshark finds: (tcp.stream, correlation id), counted."""
    assert TSHARK is not None
    # tshark guesses no payload after an MPLS label: the pseudowire one is named.
    decode_as = ["-d", "tcp.port==9094,kafka", "-d", "mpls.label==18,pwethcw"]
    fields = ["-T", "fields", "-e", "tcp.stream", "-e", "kafka.correlation_id"]
    out = subprocess.run(
        [TSHARK, "-n", "-r", str(path), *decode_as, "-Y", "kafka", *fields],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    found: Counter[tuple[str, str]] = Counter()
    for line in out.splitlines():
        stream, ids = line.split("\t")
        for cid in ids.split(","):
            found[(stream, cid)] += 1
    return found


@pytest.fixture(scope="module")
def tshark_original() -> Counter[tuple[str, str]]:
    if TSHARK is None:
        pytest.skip("tshark is not installed")
    return tshark_messages(ORIGINAL)


def test_every_tunnel_kind_gives_the_original_pairs(
    frames: list[ft.Frame],
    original: pd.DataFrame,
    tmp_path: Path,
    tshark_original: Counter[tuple[str, str]],
) -> None:
    path = ft.write_pcap(tmp_path / "tunnels.pcap", ft.tunnelled(frames, ft.TUNNELS_V4))
    got = dissector.analyze(path)
    same_pairs(got, original)
    counters = got.attrs["counters"]
    for name in ["vxlan", "geneve", "gre", "erspan", "ip_in_ip", "mpls"]:
        assert counters.get(f"tunnel_{name}", 0) > 0, name
    assert counters["tcp_packets"] == len(frames)
    assert not {
        k for k in counters if k in {"non_ip", "non_tcp", "bad_tunnel_header", "tunnel_too_deep"}
    }
    assert tshark_messages(path) == tshark_original


def test_ipv6_tunnels_give_the_ipv6_pairs(
    frames: list[ft.Frame], original: pd.DataFrame, original_v6: Path, tmp_path: Path
) -> None:
    v6 = dissector.analyze(original_v6)
    # The IPv6 copy itself: the original pairs with the stand-in addresses.
    mapped = original.copy()
    for col in ["client_ip", "broker_ip"]:
        mapped[col] = [ft.v6_address(bytes(map(int, ip.split(".")))) for ip in original[col]]
    same_pairs(
        v6.astype({"client_ip": str, "broker_ip": str}),
        mapped.astype({"client_ip": str, "broker_ip": str}),
    )
    path = ft.write_pcap(
        tmp_path / "tunnels6.pcap", ft.tunnelled(ft.read_frames(original_v6), ft.TUNNELS_V6)
    )
    same_pairs(dissector.analyze(path), v6)
    if TSHARK is not None:
        assert tshark_messages(path) == tshark_messages(original_v6)


def test_ipv4_fragments_are_reassembled(
    frames: list[ft.Frame],
    original: pd.DataFrame,
    tmp_path: Path,
    tshark_original: Counter[tuple[str, str]],
) -> None:
    path = ft.write_pcap(tmp_path / "frag4.pcap", ft.fragmented_v4(frames))
    got = dissector.analyze(path)
    same_pairs(got, original)
    counters = got.attrs["counters"]
    assert counters["ip_reassembled"] > 100
    assert counters["tcp_packets"] == len(frames)
    dropped = {k for k in counters if k.startswith("ip_fragments_")}
    assert not dropped
    assert tshark_messages(path) == tshark_original


def test_ipv6_fragments_are_reassembled(original_v6: Path, tmp_path: Path) -> None:
    v6_frames = ft.read_frames(original_v6)
    path = ft.write_pcap(tmp_path / "frag6.pcap", ft.fragmented_v6(v6_frames))
    got = dissector.analyze(path)
    same_pairs(got, dissector.analyze(original_v6))
    counters = got.attrs["counters"]
    assert counters["ip_reassembled"] > 100
    assert counters["tcp_packets"] == len(v6_frames)
    if TSHARK is not None:
        assert tshark_messages(path) == tshark_messages(original_v6)


def test_fragments_never_completed_are_counted_not_kept(
    frames: list[ft.Frame], tmp_path: Path
) -> None:
    """The last fragment of every datagram removed: nothing is reassembled, every
    fragment kept is counted as dropped (incomplete at the end, or timed out), and the
    connections go on after the holes."""
    kept = [fr for fr in ft.fragmented_v4(frames) if _fragment(fr[1]) != "last"]
    got = dissector.analyze(ft.write_pcap(tmp_path / "holes.pcap", kept))
    counters = got.attrs["counters"]
    fragments = sum(1 for fr in kept if _fragment(fr[1]))
    dropped = sum(v for k, v in counters.items() if k.startswith("ip_fragments_"))
    assert counters.get("ip_reassembled", 0) == 0
    assert counters["ip_fragment"] == dropped == fragments > 0
    assert counters["tcp_gaps"] > 0
    assert len(got) > 0


def _fragment(frame: bytes) -> str | None:
    """'first'/'middle'/'last' for an Ethernet/IPv4 fragment, None for a whole packet."""
    if struct.unpack_from("!H", frame, 12)[0] != 0x0800:
        return None
    flags = struct.unpack_from("!H", frame, 20)[0]
    more, offset = flags & 0x2000, flags & 0x1FFF
    if not (more or offset):
        return None
    return "last" if not more else ("first" if not offset else "middle")
