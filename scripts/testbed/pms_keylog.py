"""Pre-master key log lines of a recorded TLS 1.2 RSA key exchange, made with the server's
private key: the oracle for the key log forms that carry a pre-master secret.

    python -m scripts.testbed.pms_keylog CAPTURE SERVER_KEY --rsa OUT.rsa.keys --pms OUT.pms.keys

tshark reads each connection's ClientHello random and the ClientKeyExchange's encrypted
pre-master secret; ``openssl pkeyutl -decrypt`` (PKCS #1 v1.5) opens the latter with the
broker's throw-away key. Written: ``RSA <first 8 bytes of the encrypted pre-master>
<pre-master>`` (what NSS wrote for RSA key exchanges) and ``PMS_CLIENT_RANDOM <client
random> <pre-master>``, one line per connection, both forms Wireshark reads.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

CLIENT_HELLO, CLIENT_KEY_EXCHANGE = "1", "16"


def handshakes(capture: Path) -> dict[str, dict[str, str]]:
    """Per TCP stream: the client random and the encrypted pre-master secret (hex)."""
    hellos = "tls.handshake.type == 1 || tls.handshake.type == 16"
    out = subprocess.run(
        ["tshark", "-n", "-r", str(capture), "-Y", hellos, "-T", "fields", "-E", "occurrence=f",
         "-e", "tcp.stream", "-e", "tls.handshake.type", "-e", "tls.handshake.random",
         "-e", "tls.handshake.epms"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    streams: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        stream, kind, random, epms = [*line.split("\t"), "", "", ""][:4]
        entry = streams.setdefault(stream, {})
        if kind == CLIENT_HELLO and random:
            entry["random"] = random.replace(":", "")
        elif kind == CLIENT_KEY_EXCHANGE and epms:
            entry["epms"] = epms.replace(":", "")
    return streams


def decrypt(epms_hex: str, key: Path) -> str:
    with tempfile.NamedTemporaryFile() as fh:
        fh.write(bytes.fromhex(epms_hex))
        fh.flush()
        pms = subprocess.run(
            ["openssl", "pkeyutl", "-decrypt", "-inkey", str(key), "-in", fh.name],
            check=True, capture_output=True,
        ).stdout  # fmt: skip
    if len(pms) != 48:
        raise SystemExit(f"pre-master secret of {len(pms)} bytes, not 48")
    return pms.hex()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("key", type=Path, help="the server's private key (PEM)")
    ap.add_argument("--rsa", type=Path, required=True, help="write the RSA <epms> <pms> lines")
    ap.add_argument("--pms", type=Path, required=True, help="write the PMS_CLIENT_RANDOM lines")
    args = ap.parse_args(argv)
    rsa, pms = [], []
    for entry in handshakes(args.capture).values():
        if "random" not in entry or "epms" not in entry:
            continue  # not a full RSA handshake (resumed, or another key exchange)
        secret = decrypt(entry["epms"], args.key)
        rsa.append(f"RSA {entry['epms'][:16]} {secret}\n")
        pms.append(f"PMS_CLIENT_RANDOM {entry['random']} {secret}\n")
    if not rsa:
        raise SystemExit(f"{args.capture}: no RSA key exchange found")
    args.rsa.write_text("".join(rsa))
    args.pms.write_text("".join(pms))
    print(f"{len(rsa)} connections")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
