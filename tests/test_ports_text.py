"""What the README says about ports is what the tool does (issue #22).

The default broker port list is read out of the README's "Broker ports" text, not copied
here. The bundled capture of Kafka on port 19192 (found only by the heuristic) is
rewritten with scapy (an independent writer) onto each listed port, where the
connections must be taken for Kafka without the heuristic, and onto a port not listed,
where the heuristic must find them; ``--ports`` turns the heuristic off. A bundled TLS
capture moved off its broker port is still decrypted and found by the heuristic.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import dissector
from dissector.cli import main

scapy_all = pytest.importorskip("scapy.all")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
HEURISTIC = ROOT / "captures" / "heuristic-port-19192.pcapng"
TLS = ROOT / "captures" / "tls" / "tls12-java"


def _readme_default_ports() -> set[int]:
    text = " ".join(README.read_text(encoding="utf-8").split())
    match = re.search(r"Broker ports recognised by default: ([0-9, -]+);", text)
    assert match is not None, "README lacks the default broker ports sentence"
    ports: set[int] = set()
    for item in match.group(1).split(","):
        low, _, high = item.strip().partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def _moved(source: Path, old: set[int], new: int, out: Path) -> Path:
    """``source`` with every TCP port in ``old`` changed to ``new`` (checksums redone)."""
    packets = scapy_all.rdpcap(str(source))
    tcp = scapy_all.TCP
    for packet in packets:
        if tcp in packet:
            for side in ("sport", "dport"):
                if getattr(packet[tcp], side) in old:
                    setattr(packet[tcp], side, new)
            del packet[tcp].chksum
    scapy_all.wrpcap(str(out), packets)
    return out


@pytest.fixture(scope="module")
def original() -> pd.DataFrame:
    return dissector.analyze(HEURISTIC)


def _key(df: pd.DataFrame) -> list[tuple[object, ...]]:
    rows = df[["api_name", "api_version", "correlation_id"]].astype({"api_name": str})
    return sorted(map(tuple, rows.itertuples(index=False)))


def test_the_listed_defaults_are_broker_ports(original: pd.DataFrame, tmp_path: Path) -> None:
    assert original.attrs["counters"]["kafka_found_by_heuristic"] == 3
    listed = _readme_default_ports()
    assert {9092, 19092} <= listed
    for port in sorted(listed):
        df = dissector.analyze(_moved(HEURISTIC, {19192}, port, tmp_path / f"{port}.pcap"))
        assert "kafka_found_by_heuristic" not in df.attrs["counters"], port
        assert _key(df) == _key(original), port
        assert set(df["broker_port"]) == {port}


def test_an_unlisted_port_is_found_by_the_heuristic_and_ports_turns_it_off(
    original: pd.DataFrame, tmp_path: Path
) -> None:
    unlisted = 9091
    assert unlisted not in _readme_default_ports()
    moved = _moved(HEURISTIC, {19192}, unlisted, tmp_path / "9091.pcap")
    found = dissector.analyze(moved)
    assert found.attrs["counters"]["kafka_found_by_heuristic"] == 3
    assert _key(found) == _key(original)
    assert dissector.analyze(moved, ports=[9092]).empty
    assert _key(dissector.analyze(moved, ports=[unlisted])) == _key(original)


def test_tls_off_the_broker_ports_is_decrypted_and_found(tmp_path: Path) -> None:
    keys = [TLS.with_suffix(".keys")]
    original = dissector.analyze(TLS.with_suffix(".pcapng"), tls_keylog=keys)
    assert len(original) > 0
    ports = set(original["broker_port"])
    moved = _moved(TLS.with_suffix(".pcapng"), ports, 12345, tmp_path / "tls-12345.pcap")
    df = dissector.analyze(moved, tls_keylog=keys)
    assert df.attrs["counters"]["kafka_found_by_heuristic"] > 0
    assert _key(df) == _key(original)
    assert dissector.analyze(moved, tls_keylog=keys, ports=[9092]).empty


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("9092", True), ("9092-9099", True), ("9092,9094-9096", True), (" 9092 , 9093", True),
     ("9092,,9093", False), ("9092,", False), ("", False), ("9099-9092", False),
     ("0", False), ("65536", False), ("abc", False)],
)  # fmt: skip
def test_ports_values_as_the_readme_says(value: str, accepted: bool) -> None:
    result = CliRunner().invoke(main, ["analyze", str(HEURISTIC), "--ports", value, "--quiet"])
    assert result.exit_code == (0 if accepted else 2), result.output
    if not accepted:
        assert "--ports" in result.stderr and "Traceback" not in result.stderr
