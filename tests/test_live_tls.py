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
tcpreplay``), editcap for the split replay; helpers in ``tests/live_replay.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import dissector
from dissector.live import LiveCapture, LiveOptions
from dissector.options import Options
from dissector.tls import key_logs
from tests.live_replay import (
    IFACE,
    NEEDS,
    SETTLE_S,
    TIMEOUT_S,
    Capture,
    frame_rows,
    port_moved,
    replay,
    rows,
)
from tests.live_replay import run as _run

REPO = Path(__file__).resolve().parents[1]
TLS = REPO / "captures" / "tls"
REPLAY_PORT = 39395  # the captures' broker port is rewritten to this (nothing else on it)

# (capture, key log): TLS 1.3 and 1.2, AES-GCM and ChaCha20, client and broker key
# logs, a SASL_SSL listener, three client libraries, TLS 1.3 KeyUpdates.
CASES = [
    ("tls13-kafka-python", "keys"),
    ("tls12-kafka-python", "broker.keys"),
    ("tls13-chacha-kafka-python", "keys"),
    ("tls12-chacha-kafka-python", "keys"),
    ("sasl-ssl-aiokafka", "keys"),
    ("tls13-confluent", "broker.keys"),
    ("tls12-java", "keys"),
    # KeyUpdates both ways, each end asking for the other's; the broker's key log holds
    # only the first traffic secrets
    ("tls13-keyupdate-java", "broker.keys"),
]

pytestmark = NEEDS


def replayable(name: str, out: Path) -> Path:
    """The capture with its broker port rewritten to ``REPLAY_PORT`` (pcap)."""
    ledger = json.loads((TLS / f"{name}.drivers.json").read_text())
    port = int(ledger["operations"][0]["port"])
    return port_moved(TLS / f"{name}.pcapng", out / f"{name}.pcap", {port: REPLAY_PORT})


def offline(path: Path, keys: Path) -> list[dict[str, Any]]:
    return frame_rows(dissector.analyze(path, tls_keylog=keys))


def live_capture(keys: Path) -> LiveCapture:
    return LiveCapture(
        LiveOptions(
            IFACE,
            analysis=Options(ports=frozenset({REPLAY_PORT}), tls=key_logs([keys], follow=True)),
            duration=TIMEOUT_S,
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
        # The capture is open once this line is out (on a loaded machine the interpreter
        # may take seconds); the read ends at the latest when live does (--duration).
        started = []
        assert proc.stderr is not None
        for line in proc.stderr:
            started.append(line)
            if "capturing on" in line:
                break
        replay(path)
        time.sleep(SETTLE_S)
        proc.send_signal(2)  # Ctrl-C: drains, writes, prints the summary
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        stderr = "".join(started) + stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0, stderr
    assert "TLS connections 7: tls_decrypted_connections 7" in stdout, stdout
    _run([sys.executable, "-c", CLI_CODE, "analyze", str(path), "--tls-keylog", str(keys),
          "-o", str(ref)])  # fmt: skip
    live_table, ref_table = pq.read_table(out), pq.read_table(ref)
    assert live_table.schema == ref_table.schema
    expected = rows(ref_table)
    assert len(expected) > 15
    assert rows(live_table) == expected
