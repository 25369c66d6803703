"""The broker's own account of every request it completed: kafka.request.logger at DEBUG.

`scripts/kafka-broker start` with `KAFKA_REQUEST_LOG=1` writes one line per request to
`request.log` in the broker dir:

    [2026-01-02T10:11:12,345+01:00] Completed request:{"isForwarded":false,
      "requestHeader":{"requestApiKey":3,"requestApiVersion":12,"correlationId":7,
      "clientId":"x","requestApiKeyName":"METADATA"},"request":{...},"response":{...},
      "connection":"127.0.0.1:9092-127.0.0.1:51234-0-3","totalTimeMs":1.2,...,
      "sendTimeMs":0.1,"listener":"PLAINTEXT",...}

The broker writes the line after the response was sent (or the connection dropped), from
its own request header and its own response object: an oracle that shares no code with
kafka-dissector. The error codes and the throttle of a response are read from that
response object here, the same way the schema describes `error_code`/`error_count`/
`throttle_ms` (top-level code, else the first non-zero nested one).

    python -m scripts.testbed.request_log BROKER_DIR_OR_FILE   # one summary line per request
    python -m scripts.testbed.request_log FILE --jsonl --port 9095   # the oracle of a capture
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

MARKER = "] Completed request:"
LOG_NAME = "request.log"
MAX_DEPTH = 64  # responses nest a few levels; never recurse without bound


@dataclass(frozen=True, slots=True)
class Endpoint:
    ip: str
    port: int


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One "Completed request" line."""

    time: datetime  # when the broker logged it (after the response was sent)
    api_key: int
    api_name: str  # the log's spelling, e.g. API_VERSIONS
    api_version: int
    correlation_id: int
    client_id: str | None
    listener: str
    security_protocol: str
    principal: str
    broker: Endpoint
    client: Endpoint
    forwarded: bool
    total_ms: float
    request_queue_ms: float
    local_ms: float
    remote_ms: float
    throttle_ms: float  # how long the broker held the connection muted for a quota
    response_queue_ms: float
    send_ms: float
    software_name: str | None
    software_version: str | None
    # From the response object (None when the log has no response or no such field).
    response_throttle_ms: int | None
    error_code: int | None
    error_count: int
    response: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[int, int, int]:
        """(broker port, client port, correlation id): one request on the wire."""
        return (self.broker.port, self.client.port, self.correlation_id)

    @property
    def in_broker_ms(self) -> float:
        """From the request read off the socket to the response handed to the socket."""
        return self.total_ms - self.send_ms


def parse_endpoint(text: str) -> Endpoint:
    host, _, port = text.rpartition(":")
    return Endpoint(host.strip("[]"), int(port))


def parse_connection(connection: str) -> tuple[Endpoint, Endpoint]:
    """Kafka's connection id is `local:port-remote:port-processor-index`; the broker is
    the local end."""
    local, remote, *_ = connection.split("-")
    return parse_endpoint(local), parse_endpoint(remote)


def _is_error_key(key: str) -> bool:
    return key == "errorCode" or key.endswith("ErrorCode")


def error_codes(node: Any, depth: int = 0) -> Iterator[int]:
    """Every integer error code in a response object, in field order."""
    if depth > MAX_DEPTH:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, int) and not isinstance(value, bool) and _is_error_key(key):
                yield value
            elif isinstance(value, dict | list):
                yield from error_codes(value, depth + 1)
    elif isinstance(node, list):
        for item in node:
            yield from error_codes(item, depth + 1)


def summary_error(response: dict[str, Any] | None) -> tuple[int | None, int]:
    """(error code, count of non-zero codes): the top-level code when non-zero, else the
    first non-zero nested one, else 0 when the response has any error code at all."""
    if response is None:
        return None, 0
    codes = list(error_codes(response))
    nonzero = [c for c in codes if c]
    top = response.get("errorCode")
    if isinstance(top, int) and top:
        return top, len(nonzero)
    if nonzero:
        return nonzero[0], len(nonzero)
    return (0 if codes else None), 0


def parse_time(stamp: str) -> datetime:
    # ISO8601_OFFSET_DATE_TIME_HHCMM: 2026-01-02T10:11:12,345+01:00
    return datetime.fromisoformat(stamp.replace(",", "."))


def parse_line(line: str) -> LoggedRequest | None:
    """The record of one log line, None for a line that is not a completed request."""
    if not line.startswith("[") or MARKER not in line:
        return None
    stamp, _, payload = line[1:].partition(MARKER)
    doc = json.loads(payload)
    header = doc["requestHeader"]
    broker, client = parse_connection(doc["connection"])
    response = doc.get("response")
    response = response if isinstance(response, dict) else None
    throttle = response.get("throttleTimeMs") if response else None
    code, count = summary_error(response)
    info = doc.get("clientInformation") or {}
    return LoggedRequest(
        time=parse_time(stamp),
        api_key=int(header["requestApiKey"]),
        api_name=str(header.get("requestApiKeyName", "")),
        api_version=int(header["requestApiVersion"]),
        correlation_id=int(header["correlationId"]),
        client_id=header.get("clientId"),
        listener=str(doc.get("listener", "")),
        security_protocol=str(doc.get("securityProtocol", "")),
        principal=str(doc.get("principal", "")),
        broker=broker,
        client=client,
        forwarded=bool(doc.get("isForwarded", False)),
        total_ms=float(doc["totalTimeMs"]),
        request_queue_ms=float(doc["requestQueueTimeMs"]),
        local_ms=float(doc["localTimeMs"]),
        remote_ms=float(doc["remoteTimeMs"]),
        throttle_ms=float(doc["throttleTimeMs"]),
        response_queue_ms=float(doc["responseQueueTimeMs"]),
        send_ms=float(doc["sendTimeMs"]),
        software_name=info.get("softwareName"),
        software_version=info.get("softwareVersion"),
        response_throttle_ms=throttle if isinstance(throttle, int) else None,
        error_code=code,
        error_count=count,
        response=response,
    )


def parse_lines(lines: Iterable[str]) -> list[LoggedRequest]:
    return [r for r in map(parse_line, lines) if r is not None]


def log_files(path: Path) -> list[Path]:
    """The log and its rolled files, oldest first (log4j2's rollover: .1 is the newest)."""
    base = path / LOG_NAME if path.is_dir() else path
    rolled = sorted(
        (p for p in base.parent.glob(base.name + ".*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
        reverse=True,
    )
    return [*rolled, *([base] if base.exists() else [])]


def read_request_log(path: Path) -> list[LoggedRequest]:
    """Every completed request in a broker dir's request log (or one log file)."""
    out: list[LoggedRequest] = []
    for file in log_files(path):
        with file.open(encoding="utf-8", errors="replace") as fh:
            out.extend(parse_lines(fh))
    return out


def oracle_record(r: LoggedRequest) -> dict[str, Any]:
    """What a capture's test compares of one request: who sent it, which, and the
    response's error codes."""
    return {
        "client_port": r.client.port,
        "correlation_id": r.correlation_id,
        "api_key": r.api_key,
        "api_version": r.api_version,
        "client_id": r.client_id,
        "listener": r.listener,
        "error_code": r.error_code,
        "error_count": r.error_count,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="broker dir (KAFKA_BROKER_DIR) or a log file")
    parser.add_argument("--jsonl", action="store_true", help="one JSON object per request")
    parser.add_argument("--port", type=int, help="only requests to this broker port")
    args = parser.parse_args(argv)
    requests = [r for r in read_request_log(args.path) if args.port in (None, r.broker.port)]
    if args.jsonl:
        for r in requests:
            print(json.dumps(oracle_record(r), sort_keys=True))
        return 0
    for r in requests:
        print(
            f"{r.time.isoformat()} {r.listener} {r.client.port} {r.correlation_id} "
            f"{r.api_name} v{r.api_version} client_id={r.client_id!r} error={r.error_code} "
            f"throttle={r.response_throttle_ms} total={r.total_ms} send={r.send_ms}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
