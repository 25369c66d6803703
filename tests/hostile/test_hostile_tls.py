"""Hostile TLS through the whole pipeline (issue #20): truncated records, the largest
record lengths, garbage after a valid handshake, a wrong key and a flood of
ClientHellos, each spliced between two copies of a real capture and analysed with a
key log in a child process (its own wall time and peak RSS). Each ends in the counter
named for it, the real pairs around it all still there; the flood's time and memory
are checked at two sizes: memory must not grow with it.

The TLS records are written here byte by byte from RFC 8446's layouts; the stage's
own unit tests (native/tests/tls_hostile.rs) check the same cases one stage deep.
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.build import PEAK_RSS, Conversation, run_child, sandwich, write_pcap

MAX_SECONDS = 60
MAX_RSS = 1_000 * 2**20
TLS_PORT = 9095  # the test bed's SSL listener

ANALYZE_TLS = (
    PEAK_RSS
    + """
import json, sys
import dissector
df = dissector.analyze(sys.argv[1], tls_keylog=[sys.argv[2]])
print(json.dumps({
    "ok": int(df["status"].isin(["ok", "error"]).sum()),
    "counters": df.attrs["counters"],
    "peak_rss": peak_rss(),
}))
"""
)


def _record(kind: int, body: bytes) -> bytes:
    return struct.pack(">BHH", kind, 0x0303, len(body)) + body


def _handshake(kind: int, body: bytes) -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "big") + body


def client_hello(client_random: bytes) -> bytes:
    body = b"\x03\x03" + client_random + b"\x00"  # legacy version, random, no session id
    body += b"\x00\x02\x13\x01" + b"\x01\x00"  # TLS_AES_128_GCM_SHA256; no compression
    body += b"\x00\x07" + b"\x00\x2b\x00\x03\x02\x03\x04"  # supported_versions: TLS 1.3
    return _record(22, _handshake(1, body))


def server_hello() -> bytes:
    body = b"\x03\x03" + b"\x55" * 32 + b"\x00" + b"\x13\x01\x00"
    body += b"\x00\x06" + b"\x00\x2b\x00\x02\x03\x04"
    return _record(22, _handshake(2, body))


def key_log(client_random: bytes) -> str:
    """TLS 1.3 secrets for the client random: well formed, but not the connection's."""
    cr, secret = client_random.hex(), "11" * 32
    names = ("CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET")
    names += ("CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0")
    return "".join(f"{name} {cr} {secret}\n" for name in names)


def _t() -> int:
    from tests.hostile.build import real_frames

    return real_frames()[-1][0] + 5 * 10**9


def _conversation(port: int = 40000) -> Conversation:
    conv = Conversation(t_ns=_t(), client=("127.0.0.10", port), broker=("127.0.0.20", TLS_PORT))
    return conv.handshake()


def _analyze(tmp_path: Path, frames: list[tuple[int, bytes]], keys: str) -> dict[str, Any]:
    path = write_pcap(tmp_path / "hostile-tls.pcap", sandwich(frames))
    keylog = tmp_path / "keys.log"
    keylog.write_text(keys)
    outcome = run_child(["-c", ANALYZE_TLS, str(path), str(keylog)], timeout=MAX_SECONDS * 2)
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    assert "Traceback" not in outcome.stderr
    stats = json.loads(outcome.stdout.strip().splitlines()[-1])
    stats["seconds"] = outcome.seconds
    assert outcome.seconds < MAX_SECONDS, f"took {outcome.seconds:.1f} s"
    assert stats["peak_rss"] < MAX_RSS, f"peak RSS {stats['peak_rss'] / 2**20:.0f} MiB"
    return stats


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The clean sandwich with an empty key log: the real pairs every case must keep."""
    stats = _analyze(tmp_path_factory.mktemp("clean"), [], "")
    assert stats["ok"] > 400
    return stats


def _tls(stats: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in stats["counters"].items() if k.startswith("tls_")}


def test_a_record_cut_off_at_the_end(tmp_path: Path, baseline: dict[str, Any]) -> None:
    conv = _conversation()
    conv.send(True, client_hello(b"\x01" * 32)[:-10]).close()
    stats = _analyze(tmp_path, conv.frames, "")
    assert stats["ok"] == baseline["ok"]
    assert _tls(stats)["tls_connections"] == 1 and _tls(stats)["tls_no_handshake"] == 1


@pytest.mark.parametrize(
    ("length", "outcome"),
    [
        (2**14 + 2048, "tls_bad_record"),
        (2**14 + 256, "tls_decrypt_failed"),
        (2**14 + 2049, "tls_bad_record"),
    ],
)
def test_the_largest_record_lengths(
    tmp_path: Path, baseline: dict[str, Any], length: int, outcome: str
) -> None:
    """2^14 + 2048 is TLS 1.2's most, 2^14 + 256 TLS 1.3's; one byte more is no record."""
    cr = b"\x02" * 32
    conv = _conversation()
    conv.send(True, client_hello(cr)).send(False, server_hello())
    conv.send(False, struct.pack(">BHH", 23, 0x0303, length) + b"\xab" * length).close()
    stats = _analyze(tmp_path, conv.frames, key_log(cr))
    assert stats["ok"] == baseline["ok"]
    assert _tls(stats).get(outcome) == 1, _tls(stats)
    assert not _tls(stats).get("tls_decrypted_connections")


def test_random_bytes_after_a_valid_handshake(tmp_path: Path, baseline: dict[str, Any]) -> None:
    cr = b"\x03" * 32
    garbage = random.Random(20).randbytes(1 << 20)
    conv = _conversation()
    conv.send(True, client_hello(cr)).send(False, server_hello())
    conv.send(False, garbage).send(True, garbage).close()
    stats = _analyze(tmp_path, conv.frames, key_log(cr))
    assert stats["ok"] == baseline["ok"]
    tls = _tls(stats)
    assert tls["tls_connections"] == 1
    assert tls.get("tls_bad_record", 0) + tls.get("tls_decrypt_failed", 0) == 1, tls
    assert stats["counters"].get("kafka_frames", 0) == baseline["counters"]["kafka_frames"]


def test_records_under_a_wrong_key(tmp_path: Path, baseline: dict[str, Any]) -> None:
    cr = b"\x04" * 32
    conv = _conversation()
    conv.send(True, client_hello(cr)).send(False, server_hello())
    for _ in range(100):
        conv.send(False, _record(23, os.urandom(200)))
    conv.close()
    stats = _analyze(tmp_path, conv.frames, key_log(cr))
    assert stats["ok"] == baseline["ok"]
    assert _tls(stats)["tls_decrypt_failed"] == 1


def _flood(n: int) -> list[tuple[int, bytes]]:
    """``n`` ClientHellos on one connection, then nothing: a handshake that never ends."""
    conv = _conversation()
    conv.step_ns = 1_000
    hellos = b"".join(client_hello(struct.pack(">I", i).rjust(32, b"\x07")) for i in range(n))
    return conv.send(True, hellos).close().frames


def test_a_flood_of_client_hellos_costs_no_memory(tmp_path: Path, baseline: dict[str, Any]) -> None:
    small = _analyze(tmp_path, _flood(50_000), "")
    large = _analyze(tmp_path, _flood(400_000), "")  # 8x the input: 23 MB of hellos
    for stats in (small, large):
        assert stats["ok"] == baseline["ok"]
        tls = _tls(stats)
        assert tls["tls_connections"] == 1 and tls["tls_no_handshake"] == 1, tls
    # One connection's hellos: bytes are read or given up as they come, none held.
    assert large["peak_rss"] - small["peak_rss"] < 64 * 2**20, (
        small["peak_rss"] >> 20,
        large["peak_rss"] >> 20,
    )


def _hello_per_connection(n: int) -> list[tuple[int, bytes]]:
    """``n`` connections that each send one ClientHello and close."""
    frames: list[tuple[int, bytes]] = []
    t = _t()
    for i in range(n):
        conv = Conversation(
            t_ns=t + i * 10_000,
            client=(f"127.1.{i // 50_000}.{1 + i // 250 % 200}", 1024 + i % 50_000),
            broker=("127.0.0.20", TLS_PORT),
        )
        conv.step_ns = 1_000
        conv.handshake().send(True, client_hello(struct.pack(">I", i).rjust(32, b"\x08")))
        frames += conv.close().frames
    frames.sort(key=lambda f: f[0])
    return frames


def test_a_client_hello_on_each_of_many_connections(
    tmp_path: Path, baseline: dict[str, Any]
) -> None:
    small = _analyze(tmp_path, _hello_per_connection(10_000), "")
    large = _analyze(tmp_path, _hello_per_connection(80_000), "")
    for n, stats in ((10_000, small), (80_000, large)):
        assert stats["ok"] == baseline["ok"]
        tls = _tls(stats)
        assert tls["tls_connections"] == n and tls["tls_no_handshake"] == n, tls
    # Each connection's TLS state goes with it: 8x the connections, flat memory.
    assert large["peak_rss"] - small["peak_rss"] < 64 * 2**20, (
        small["peak_rss"] >> 20,
        large["peak_rss"] >> 20,
    )
