"""Markdown summary of a scenario's driver ledgers (what the clients themselves reported).

python -m scripts.testbed.summarize captures/kafka-4-mixed.drivers.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any


def produced(doc: dict[str, Any]) -> Counter[tuple[str, str, str]]:
    """Acknowledged records per (client, topic, codec)."""
    out: Counter[tuple[str, str, str]] = Counter()
    for ledger in doc["drivers"]:
        for op in ledger["operations"]:
            if op["op"].startswith("produce") and op["records"]:
                out[(op["client"], op["topic"], op["codec"] or "none")] += op["records"]
    return out


def consumed(doc: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """(client, group, protocol, records) for every consuming operation."""
    rows = []
    for ledger in doc["drivers"]:
        for op in ledger["operations"]:
            if op["op"].startswith(("consume", "share_consume")) and op["records"] is not None:
                rows.append((op["client"], op["group_id"], op["group_protocol"], op["records"]))
    return rows


def expected_errors(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for ledger in doc["drivers"]:
        for op in ledger["operations"]:
            for err in op["errors"]:
                rows.append((op["client"], op["op"], err["api"], err["error"]))
            if op["detail"].get("unanswered"):
                for api, version in op["detail"]["unanswered"].items():
                    rows.append((op["client"], op["op"], f"{api} v{version}", "(no response)"))
    return rows


def markdown(doc: dict[str, Any]) -> str:
    clients = {k: v for ledger in doc["drivers"] for k, v in ledger["clients"].items()}
    out = [
        f"Broker: Apache Kafka {doc['broker']['kafka']} (KRaft, one node); Java tools "
        f"{doc['broker']['tools']}. Clients: "
        + ", ".join(f"{k} {v}" for k, v in sorted(clients.items()))
        + f". Capture: {doc['capture_tool']} on lo, filter `{doc['capture_filter']}`.",
        "",
        "Records produced and acknowledged, per client, topic and codec:",
        "",
        "| client | topic | codec | records |",
        "| --- | --- | --- | ---: |",
    ]
    for (client, topic, codec), n in sorted(produced(doc).items()):
        out.append(f"| {client} | {topic} | {codec} | {n} |")
    out += ["", "Records delivered to the application, per consuming group:", ""]
    out += ["| client | group | protocol | records |", "| --- | --- | --- | ---: |"]
    for client, group, protocol, n in consumed(doc):
        out.append(f"| {client} | {group} | {protocol} | {n} |")
    out += ["", "Errors provoked on purpose:", ""]
    out += ["| client | operation | API | error |", "| --- | --- | --- | --- |"]
    for client, op, api, err in expected_errors(doc):
        out.append(f"| {client} | {op} | {api} | {err} |")
    if "broker_log" in doc:
        out += [
            "",
            "What the broker stored (its log segments, read with DumpLogSegments after the run;"
            " control batches left out):",
            "",
            "| topic | codec | records |",
            "| --- | --- | ---: |",
        ]
        for topic, per_codec in sorted(doc["broker_log"]["records_by_topic_codec"].items()):
            for codec, n in sorted(per_codec.items()):
                out.append(f"| {topic} | {codec} | {n} |")
        out.append(
            f"\nTransaction marker (control) batches: {doc['broker_log']['control_batches']}."
        )
    ops = sum(len(ledger["operations"]) for ledger in doc["drivers"])
    out += ["", f"Operations in the ledger: {ops}."]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ledger", type=Path)
    args = parser.parse_args(argv)
    print(markdown(json.loads(args.ledger.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
