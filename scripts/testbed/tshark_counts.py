"""Count Kafka requests and responses in a capture with tshark's own Kafka dissector.

An oracle independent of kafka-dissector: tshark decodes the ports given as Kafka and this
counts request and response PDUs per API key (and request versions). API names come from
kafka-python's ApiKey table, also independent of our code.

    python -m scripts.testbed.tshark_counts captures/kafka-4-mixed.pcapng --ports 9092,9094
    python -m scripts.testbed.tshark_counts CAPTURE --markdown
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kafka.protocol.api_key import ApiKey

TSHARK_TIMEOUT_S = 120


@dataclass(slots=True)
class TsharkCounts:
    requests: Counter[int] = field(default_factory=Counter)
    responses: Counter[int] = field(default_factory=Counter)
    request_versions: dict[int, Counter[int]] = field(default_factory=dict)
    client_ids: Counter[str] = field(default_factory=Counter)
    packets: int = 0
    tcp_streams: int = 0


def api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"api_{key}"


def split_values(cell: str) -> list[str]:
    # One frame can carry several Kafka PDUs; tshark joins each field's values with commas.
    return [v for v in cell.split(",") if v != ""]


def count(capture: Path, ports: tuple[int, ...]) -> TsharkCounts:
    decode_as: list[str] = []
    for port in ports:
        decode_as += ["-d", f"tcp.port=={port},kafka"]
    cmd = [
        "tshark", "-n", "-r", str(capture), *decode_as, "-T", "fields",
        "-e", "tcp.stream", "-e", "kafka.request_key", "-e", "kafka.response_key",
        "-e", "kafka.api_version", "-e", "kafka.client_id",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TSHARK_TIMEOUT_S, check=True)
    out = TsharkCounts()
    streams: set[str] = set()
    for line in done.stdout.splitlines():
        cells = (line.split("\t") + [""] * 5)[:5]
        stream, req, resp, versions, clients = cells
        out.packets += 1
        streams.add(stream)
        req_keys = [int(v) for v in split_values(req)]
        # api_version is written for requests only (tshark has no version in a response).
        vers = [int(v) for v in split_values(versions)]
        for i, key in enumerate(req_keys):
            out.requests[key] += 1
            if i < len(vers):
                out.request_versions.setdefault(key, Counter())[vers[i]] += 1
        for key in split_values(resp):
            out.responses[int(key)] += 1
        for cid in split_values(clients):
            out.client_ids[cid] += 1
    out.tcp_streams = len(streams - {""})
    return out


def markdown(counts: TsharkCounts) -> str:
    lines = [
        "| API key | name | requests | responses | request versions |",
        "| ---: | --- | ---: | ---: | --- |",
    ]
    for key in sorted(set(counts.requests) | set(counts.responses)):
        versions = ", ".join(
            f"v{v}×{n}" for v, n in sorted(counts.request_versions.get(key, Counter()).items())
        )
        lines.append(
            f"| {key} | {api_name(key)} | {counts.requests[key]} | {counts.responses[key]} "
            f"| {versions} |"
        )
    lines.append(
        f"| | **total** | {sum(counts.requests.values())} | {sum(counts.responses.values())} | |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path)
    parser.add_argument("--ports", default="9092,9094")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    ports = tuple(int(p) for p in args.ports.split(","))
    counts = count(args.capture, ports)
    if args.markdown:
        print(markdown(counts))
        print(f"\npackets: {counts.packets}, TCP connections: {counts.tcp_streams}")
    else:
        print(
            json.dumps(
                {
                    "packets": counts.packets,
                    "tcp_streams": counts.tcp_streams,
                    "requests": {api_name(k): v for k, v in sorted(counts.requests.items())},
                    "responses": {api_name(k): v for k, v in sorted(counts.responses.items())},
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
