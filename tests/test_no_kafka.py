"""A capture that holds no Kafka says so, with what it held instead, in analyze and report.

The captures are made here with scapy (an independent writer): HTTP on the Kafka port
9092 and on 80, and a capture of UDP only; their makeup is what the sentences must say.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli_counters import Conversation, write_capture

scapy_all = pytest.importorskip("scapy.all")

ROOT = Path(__file__).resolve().parents[1]
HTTP_GET = b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n"
HTTP_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dissector.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nokafka") / "http-on-9092.pcap"
    return write_capture(
        path,
        [
            Conversation(40000, 9092, [(HTTP_GET, HTTP_OK)]),
            Conversation(40001, 80, [(HTTP_GET, HTTP_OK)]),
        ],
    )


@pytest.fixture(scope="module")
def udp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nokafka") / "udp-only.pcap"
    packets = []
    for i in range(5):
        pkt = (
            scapy_all.Ether()
            / scapy_all.IP(src="10.0.0.1", dst="10.0.0.2")
            / scapy_all.UDP(sport=5353, dport=53)
            / scapy_all.Raw(b"x" * 20)
        )
        pkt.time = 1.7e9 + i
        packets.append(pkt)
    scapy_all.wrpcap(str(path), packets)
    return path


def test_analyze_says_no_kafka_and_what_the_tcp_was(http: Path, tmp_path: Path) -> None:
    proc = _cli("analyze", str(http), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "No Kafka found: the capture held 2 TCP connections whose traffic was not Kafka" in out
    assert "--ports" in out
    assert "┃ API" not in proc.stdout  # no empty table that reads like an answer
    assert "counters: " in proc.stdout


def test_analyze_says_no_kafka_and_that_it_was_udp(udp: Path, tmp_path: Path) -> None:
    proc = _cli("analyze", str(udp), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "No Kafka found: the capture held 5 IP packets that are not TCP (UDP, ICMP...)" in out
    assert "Kafka runs over TCP" in out


def test_analyze_of_several_names_the_capture_without_kafka(udp: Path, tmp_path: Path) -> None:
    bundled = ROOT / "captures" / "kafka-4-mixed.pcapng"
    proc = _cli("analyze", str(bundled), str(udp), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"note: {udp}: No Kafka found" in proc.stderr
    assert "┃ API" in proc.stdout and "No Kafka found" not in proc.stdout


def test_with_ports_the_hint_names_them(http: Path, tmp_path: Path) -> None:
    proc = _cli("analyze", str(http), "--ports", "9092", cwd=tmp_path)
    assert "Only ports 9092 were taken for Kafka (--ports)" in " ".join(proc.stdout.split())


def test_with_ports_the_other_ports_bytes_are_named(tmp_path: Path) -> None:
    """The bundled capture's Kafka is on 19192; with --ports 9092 its three connections
    are not read, and the sentence says what they carried: the TCP payload bytes tshark
    counts, retransmissions left out (18,487)."""
    capture = ROOT / "captures" / "heuristic-port-19192.pcapng"
    proc = _cli("analyze", str(capture), "--ports", "9092", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    payload = _tshark_payload_bytes(capture)
    assert (
        f"No Kafka found: the capture held 3 TCP connections carrying {payload:,} bytes on "
        "ports not taken for Kafka." in out
    )
    assert "Only ports 9092 were taken for Kafka (--ports)" in out


def _tshark_payload_bytes(capture: Path) -> int:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (the oracle for the payload bytes)")
    proc = subprocess.run(
        ["tshark", "-r", str(capture), "-Y", "tcp.len > 0 and not tcp.analysis.retransmission",
         "-T", "fields", "-e", "tcp.len"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return sum(int(line) for line in proc.stdout.split())


def test_tls_without_keys_says_how_to_give_them(tmp_path: Path) -> None:
    capture = ROOT / "captures" / "tls-on-kafka-port.pcapng"
    proc = _cli("analyze", str(capture), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert (
        "No Kafka found: the capture held 1 TCP connection; TLS on 2 connection directions "
        "without its session keys." in out
    )
    assert "--tls-keylog" in out.split("No Kafka found", 1)[1]


@pytest.mark.parametrize("which", ["http", "udp"])
def test_report_is_one_page_saying_why(which: str, http: Path, udp: Path, tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    capture = {"http": http, "udp": udp}[which]
    out = tmp_path / "r.html"
    proc = _cli("report", str(capture), "-o", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    text = " ".join(html.split())
    assert "No Kafka in this capture" in text and "No Kafka found: the capture held" in text
    held = "2 TCP connections whose traffic was not Kafka" if which == "http" else "5 IP packets"
    assert held in text
    assert "<img" not in html  # no empty chart frames
    assert html.count("<section") == 2
    assert len(html) < 20_000


@pytest.mark.parametrize("which", ["http", "udp"])
def test_decode_says_no_kafka_on_stderr(which: str, http: Path, udp: Path, tmp_path: Path) -> None:
    """decode's stdout is JSON lines: no line at all, and the sentence on stderr."""
    capture = {"http": http, "udp": udp}[which]
    proc = _cli("decode", str(capture), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    err = " ".join(proc.stderr.split())
    held = "2 TCP connections whose traffic was not Kafka" if which == "http" else "5 IP packets"
    assert f"note: {capture}: No Kafka found: the capture held {held}" in err


def test_decode_filtered_to_nothing_does_not_say_no_kafka(tmp_path: Path) -> None:
    """A Kafka capture whose lines --api thins out to none held Kafka all the same."""
    bundled = ROOT / "captures" / "heuristic-port-19192.pcapng"
    proc = _cli("decode", str(bundled), "--api", "DeleteTopics", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "No Kafka found" not in proc.stderr
    with_kafka = _cli("decode", str(bundled), cwd=tmp_path)
    assert with_kafka.stdout.count("\n") > 0 and "No Kafka found" not in with_kafka.stderr
