"""Requests no library will send, written byte by byte: an ApiVersions request at a version
from the future, which a Kafka broker must answer (KIP-511) with an ApiVersions v0 response
carrying UNSUPPORTED_VERSION and its own supported ranges, as it does for a client newer
than itself.

    python -m scripts.testbed.raw_driver --prefix mix --ledger out.json
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from pathlib import Path

from scripts.testbed.ledger import ExpectedError, Ledger, Operation, Timed

CLIENT = "raw-socket"
API_VERSIONS = 18
UNSUPPORTED_VERSION = 35


def compact_string(text: str) -> bytes:
    data = text.encode()
    return bytes([len(data) + 1]) + data  # unsigned varint; the strings here are short


def api_versions_request(version: int, correlation_id: int, client_id: str) -> bytes:
    """Request header v2 (flexible) and an ApiVersions v3+ body, size prefix included."""
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, version, correlation_id, len(cid)) + cid + b"\x00"
    body = compact_string("kafka-dissector-raw") + compact_string("0.1") + b"\x00"
    message = header + body
    return struct.pack(">i", len(message)) + message


def read_frame(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    if not 0 <= size <= 1 << 20:
        raise ValueError(f"implausible response size {size}")
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="raw")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--ledger", type=Path, required=True)
    args = parser.parse_args(argv)
    ledger = Ledger(driver=CLIENT, clients={"python": sys.version.split()[0]})
    cid = f"{args.prefix}-raw-apiversions-v99"
    op = ledger.add(
        Operation(
            op="api_versions_unsupported_version",
            client=CLIENT,
            client_id=cid,
            port=args.port,
            apis=["ApiVersions"],
            errors=[ExpectedError("ApiVersions", "UNSUPPORTED_VERSION")],
            detail={"request_version": 99, "correlation_id": 7},
        )
    )
    with Timed(op), socket.create_connection((args.host, args.port), timeout=5) as sock:
        sock.sendall(api_versions_request(99, 7, cid))
        frame = read_frame(sock, 5)
        # Response header v0 (ApiVersions responses never use the flexible header), then
        # the v0 body: error_code first.
        correlation_id, error_code = struct.unpack(">ih", frame[:6])
        op.ok = correlation_id == 7 and error_code == UNSUPPORTED_VERSION
        op.detail |= {"response_error_code": error_code, "response_size": len(frame) + 4}
        time.sleep(0.05)
    ledger.write(args.ledger)
    if not op.ok:
        print(f"raw driver: unexpected answer {op.detail}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
