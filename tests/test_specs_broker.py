"""The shipped specs know every API version the test-bed broker (Apache Kafka 4.4) speaks.

The broker's own ApiVersions answer is the oracle: a v0 request written by hand, its
response read by hand (error code, then key/min/max triples), no decoder of ours in
between. When a newer broker is put in the test bed, this fails until the bundled data
is regenerated (``python -m scripts.specs.generate --kafka X.Y.Z``).
"""

from __future__ import annotations

import socket
import struct
import subprocess

import pytest

from dissector.protocol.bundled import bundled_release
from dissector.protocol.messages import get_registry
from dissector.protocol.spec import REQUEST, RESPONSE
from tests.conftest import KAFKA_BROKER

pytestmark = pytest.mark.broker

CLIENT_ID = b"specs-check"


def _broker_port() -> int:
    env = subprocess.run(
        [str(KAFKA_BROKER), "env"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    settings = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
    return int(settings["KAFKA_PLAINTEXT_PORT"])


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"broker closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def broker_api_versions(port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 by hand: request header v1, response header v0, body v0."""
    body = struct.pack(">hhih", 18, 0, 7, len(CLIENT_ID)) + CLIENT_ID
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read_exactly(sock, 4))
        frame = _read_exactly(sock, size)
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame)
    assert correlation_id == 7 and error_code == 0
    ranges = {}
    for i in range(count):
        key, low, high = struct.unpack_from(">hhh", frame, 10 + 6 * i)
        ranges[key] = (low, high)
    assert len(frame) == 10 + 6 * count
    return ranges


def test_shipped_specs_know_every_version_the_test_bed_broker_answers(
    kafka_broker: None,
) -> None:
    advertised = broker_api_versions(_broker_port())
    assert len(advertised) > 50
    specs = get_registry().specs
    unknown = sorted(
        (key, version, direction)
        for key, (low, high) in advertised.items()
        for version in range(low, high + 1)
        for direction in (REQUEST, RESPONSE)
        if specs.get(key, version, direction) is None
    )
    assert unknown == [], (
        f"the broker speaks versions the shipped specs (Kafka {bundled_release()}) lack:"
        f" {unknown}; regenerate with python -m scripts.specs.generate --kafka <release>"
    )
    # ApiVersions itself: the 4.4 broker's v5 is what the older specs lacked.
    assert advertised[18][1] >= 5
