"""The drivers' record of what they did, written as JSON next to a capture."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The APIs a consumer in a group uses, which every driver declares for its "consume" op.
CLASSIC_CONSUMER_APIS = (
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "OffsetFetch",
    "Fetch",
    "OffsetCommit",
)
KIP848_CONSUMER_APIS = (
    "FindCoordinator",
    "ConsumerGroupHeartbeat",
    "OffsetFetch",
    "Fetch",
    "OffsetCommit",
)


@dataclass(slots=True)
class ExpectedError:
    """A Kafka error the driver provoked on purpose and the API whose response carries it."""

    api: str
    error: str


@dataclass(slots=True)
class Operation:
    """One thing a client did, as the client reports it.

    `apis` names the Kafka APIs (Apache Kafka's message names) that must appear for
    `client_id` on `port`; `records` is what the client counted (acknowledged for produce,
    delivered to the application for consume).
    """

    op: str
    client: str
    client_id: str
    port: int
    apis: list[str]
    ok: bool = True
    topic: str | None = None
    codec: str | None = None
    records: int | None = None
    group_id: str | None = None
    group_protocol: str | None = None
    errors: list[ExpectedError] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0
    finished: float = 0.0


@dataclass(slots=True)
class Ledger:
    driver: str
    clients: dict[str, str]
    operations: list[Operation] = field(default_factory=list)

    def add(self, operation: Operation) -> Operation:
        self.operations.append(operation)
        return operation

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")


class Timed:
    """Context manager stamping an operation's wall-clock start and end."""

    def __init__(self, operation: Operation) -> None:
        self.operation = operation

    def __enter__(self) -> Operation:
        self.operation.started = time.time()
        return self.operation

    def __exit__(self, *exc: object) -> None:
        self.operation.finished = time.time()


def driver_parser(
    doc: str, prefix: str, *, sasl: bool = False, per_codec: int | None = None
) -> argparse.ArgumentParser:
    """The command line every driver shares: name prefix, broker addresses, ledger path."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--prefix", default=prefix)
    parser.add_argument("--plaintext", default="127.0.0.1:9092")
    if sasl:
        parser.add_argument("--sasl", default="127.0.0.1:9094")
    if per_codec is not None:
        parser.add_argument("--per-codec", type=int, default=per_codec)
    parser.add_argument("--ledger", type=Path, required=True)
    return parser
