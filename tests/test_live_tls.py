"""Live capture of Kafka over TLS: the bundled TLS captures replayed onto ``lo``.

Each capture of ``captures/tls`` (real clients against the test bed broker, recorded
with their key logs) is rewritten to a private broker port (tcprewrite) and sent onto
the loopback interface, packet for packet, by tcpreplay while the live path (the core's
own capture and rows threads, ``LiveCapture``, or the ``live`` command) captures it with
the key log. The oracle is ``dissector.analyze`` of the replayed file with the same key
log: every row equal but for the times (the replay's, paced), and tshark's decryption of
the capture (``test_tls``) behind that. A key log that only appears halfway through the
replay is read when it does (a client writes its line at its handshake).

Needs root (capture on ``lo``), tcpreplay and tcprewrite (``apt-get install
tcpreplay``), editcap for the split replay. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import dissector
from dissector.live import LiveCapture, LiveOptions
from dissector.live.loop import Tick
from dissector.tls import key_logs

REPO = Path(__file__).resolve().parents[1]
TLS = REPO / "captures" / "tls"
IFACE = "lo"
REPLAY_PORT = 39395  # the captures' broker port is rewritten to this (nothing else on it)
REPLAY_PPS = 5000  # a few hundred packets: well under a second each
START_S = 0.5  # the capture's ring is open before this; the wait only spares a race
SETTLE_S = 0.5  # loopback delivery after tcpreplay returns
JOIN_S = 30.0
TIMEOUT_S = 60.0

# The replay's own: when a packet was sent (paced), and what follows from it.
TIMING = {
    "capture",
    "request_time",
    "response_time",
    "latency_ms",
    "first_byte_ms",
    "fetch_wait",
    "service_ms",
    "queue_ms",
}

# (capture, key log): TLS 1.3 and 1.2, AES-GCM and ChaCha20, client and broker key
# logs, a SASL_SSL listener, three client libraries.
CASES = [
    ("tls13-kafka-python", "keys"),
    ("tls12-kafka-python", "broker.keys"),
    ("tls13-chacha-kafka-python", "keys"),
    ("tls12-chacha-kafka-python", "keys"),
    ("sasl-ssl-aiokafka", "keys"),
    ("tls13-confluent", "broker.keys"),
    ("tls12-java", "keys"),
]

pytestmark = [
    pytest.mark.skipif(
        not hasattr(os, "geteuid") or os.geteuid() != 0,
        reason="live capture on lo needs root (or CAP_NET_RAW+CAP_NET_ADMIN)",
    ),
    pytest.mark.skipif(
        not (shutil.which("tcpreplay") and shutil.which("tcprewrite")),
        reason="tcpreplay/tcprewrite not installed (apt-get install tcpreplay)",
    ),
]


def _run(args: list[str]) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=TIMEOUT_S)


def _broker_port(name: str) -> int:
    import json

    ledger = json.loads((TLS / f"{name}.drivers.json").read_text())
    return int(ledger["operations"][0]["port"])


def replayable(name: str, out: Path) -> Path:
    """The capture with its broker port rewritten to ``REPLAY_PORT`` (pcap)."""
    path = out / f"{name}.pcap"
    _run(["tcprewrite", f"--portmap={_broker_port(name)}:{REPLAY_PORT}",
          "-i", str(TLS / f"{name}.pcapng"), "-o", str(path)])  # fmt: skip
    return path


def replay(path: Path) -> None:
    _run(["tcpreplay", "-q", "-i", IFACE, f"--pps={REPLAY_PPS}", str(path)])


def rows(tables: list[pa.Table] | pa.Table) -> list[dict[str, Any]]:
    """Every row with every column but the replay's timing, in (stream, correlation
    id) order."""
    table = pa.concat_tables(tables) if isinstance(tables, list) else tables
    keep = [c for c in table.column_names if c not in TIMING]
    out = table.select(keep).to_pylist()
    return sorted(out, key=lambda r: (r["stream"], r["correlation_id"] or -1, r["api_key"]))


def offline(path: Path, keys: Path) -> list[dict[str, Any]]:
    df = dissector.analyze(path, tls_keylog=keys)
    return rows(pa.Table.from_pandas(df, preserve_index=False))


class Capture:
    """A ``LiveCapture``'s Arrow tables, collected on a thread (bounded join)."""

    def __init__(self, cap: LiveCapture) -> None:
        self.cap = cap
        self.tables: list[pa.Table] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()
        time.sleep(START_S)

    def _collect(self) -> None:
        try:
            for item in self.cap.tables(eager=True):
                if not isinstance(item, Tick):
                    self.tables.append(item)
        except BaseException as exc:  # surfaced in finish()
            self.error = exc

    def finish(self) -> list[pa.Table]:
        time.sleep(SETTLE_S)
        self.cap.stop("test")
        self._thread.join(JOIN_S)
        assert not self._thread.is_alive(), "live capture did not stop"
        if self.error is not None:
            raise self.error
        return self.tables


def live_capture(keys: Path) -> LiveCapture:
    return LiveCapture(
        LiveOptions(
            IFACE,
            ports=frozenset({REPLAY_PORT}),
            duration=TIMEOUT_S,
            tls=key_logs([keys], follow=True),
        )
    )


@pytest.mark.parametrize("name,suffix", CASES, ids=lambda v: str(v))
def test_live_decrypts_like_analyze(name: str, suffix: str, tmp_path: Path) -> None:
    path = replayable(name, tmp_path)
    keys = TLS / f"{name}.{suffix}"
    expected = offline(path, keys)
    assert len(expected) > 15 and all("tls" in r["flags"] for r in expected)

    cap = live_capture(keys)
    collecting = Capture(cap)
    replay(path)
    got = rows(collecting.finish())

    assert cap.final_stats.dropped == 0
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert a == b
    c = cap.counters
    assert c["tls_connections"] > 0
    assert c["tls_decrypted_connections"] == c["tls_connections"]
    assert c["tls_bytes"] == 0  # nothing left encrypted


def test_live_reads_a_key_log_that_appears_halfway(tmp_path: Path) -> None:
    """As in a live run the client writes its key log line while the handshake goes
    by: the key log is not there when the capture starts and gets its lines after half
    the packets were sent; the records held meanwhile are read once it is there, and
    every connection is decrypted."""
    name = "tls13-kafka-python"
    path = replayable(name, tmp_path)
    total = int(
        subprocess.run(
            ["capinfos", "-Mc", str(path)], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
    )
    first, second = tmp_path / "first.pcap", tmp_path / "second.pcap"
    half = total // 2
    _run(["editcap", "-r", str(path), str(first), f"1-{half}"])
    _run(["editcap", "-r", str(path), str(second), f"{half + 1}-{total}"])
    expected = offline(path, TLS / f"{name}.keys")

    keys = tmp_path / "live.keys"
    cap = live_capture(keys)
    collecting = Capture(cap)
    replay(first)
    time.sleep(SETTLE_S)
    keys.write_text((TLS / f"{name}.keys").read_text())
    replay(second)
    got = rows(collecting.finish())

    c = cap.counters
    assert c["tls_decrypted_connections"] == c["tls_connections"] == 7
    assert [(r["stream"], r["correlation_id"], r["api_key"], r["status"]) for r in got] == [
        (r["stream"], r["correlation_id"], r["api_key"], r["status"]) for r in expected
    ]


CLI_CODE = "import sys; from dissector.cli import main; sys.argv[0] = 'kafka-dissector'; main()"


def test_cli_live_tls_keylog_writes_what_analyze_writes(tmp_path: Path) -> None:
    """``live --tls-keylog K -o x.parquet`` while the capture is replayed: the Parquet
    file holds the rows ``analyze --tls-keylog K -o`` writes of the replayed file, and
    the summary counts the decrypted connections."""
    name = "tls12-kafka-python"
    path = replayable(name, tmp_path)
    keys = TLS / f"{name}.keys"
    out, ref = tmp_path / "live.parquet", tmp_path / "analyze.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SSLKEYLOGFILE", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI_CODE, "live", "-i", IFACE, "--ports", str(REPLAY_PORT),
         "--tls-keylog", str(keys), "-o", str(out), "--view", "plain", "--duration", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        time.sleep(3.0)  # interpreter start and capture open (a slow shared machine)
        replay(path)
        time.sleep(SETTLE_S)
        proc.send_signal(2)  # Ctrl-C: drains, writes, prints the summary
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)

    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
    assert "TLS connections 7: tls_decrypted_connections 7" in stdout, stdout
    _run([sys.executable, "-c", CLI_CODE, "analyze", str(path), "--tls-keylog", str(keys),
          "-o", str(ref)])  # fmt: skip
    import pyarrow.parquet as pq

    live_table, ref_table = pq.read_table(out), pq.read_table(ref)
    assert live_table.schema == ref_table.schema
    expected = rows(ref_table)
    assert len(expected) > 15
    assert rows(live_table) == expected
