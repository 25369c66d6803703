"""What the broker itself stored: record batches per topic, read from its log segments with
Apache Kafka's DumpLogSegments tool.

This is the strongest oracle for "records per topic and codec": it is the broker's own
account of what arrived, independent of what a client claims to have configured and of
kafka-dissector.

    python -m scripts.testbed.broker_log --prefix mix
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

KAFKA_BROKER = Path(__file__).resolve().parent.parent / "kafka-broker"
DUMP = "org.apache.kafka.tools.DumpLogSegments"
BATCH_RE = re.compile(
    r"count: (?P<count>\d+) .*isTransactional: (?P<txn>\w+) isControl: (?P<control>\w+)"
    r".*magic: (?P<magic>\d+) compresscodec: (?P<codec>\w+)"
)


@dataclass(frozen=True, slots=True)
class Batch:
    topic: str
    partition: int
    count: int
    codec: str
    transactional: bool
    control: bool
    magic: int


def parse_dump(text: str) -> list[Batch]:
    """Batches from DumpLogSegments output; each file section starts with 'Dumping PATH'."""
    batches: list[Batch] = []
    topic, partition = "", -1
    for line in text.splitlines():
        if line.startswith("Dumping "):
            tp_dir = Path(line.removeprefix("Dumping ").strip()).parent.name
            topic, _, part = tp_dir.rpartition("-")
            partition = int(part)
            continue
        m = BATCH_RE.search(line)
        if m and line.startswith("baseOffset:"):
            batches.append(
                Batch(
                    topic=topic,
                    partition=partition,
                    count=int(m["count"]),
                    codec=m["codec"],
                    transactional=m["txn"] == "true",
                    control=m["control"] == "true",
                    magic=int(m["magic"]),
                )
            )
    return batches


def dump_topics(data_dir: Path, prefix: str, timeout: float = 120) -> list[Batch]:
    """Every batch of every partition whose topic starts with `prefix-`."""
    files = sorted(
        str(seg)
        for part_dir in data_dir.glob(f"{prefix}-*")
        if part_dir.is_dir() and not part_dir.name.endswith("-delete")
        for seg in part_dir.glob("*.log")
    )
    if not files:
        return []
    done = subprocess.run(
        [str(KAFKA_BROKER), "tool", DUMP, "--files", ",".join(files)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return parse_dump(done.stdout)


def records_by_topic_codec(batches: list[Batch]) -> dict[str, dict[str, int]]:
    """Data records (control batches left out) per topic and codec."""
    out: dict[str, dict[str, int]] = {}
    for b in batches:
        if not b.control:
            per_codec = out.setdefault(b.topic, {})
            per_codec[b.codec] = per_codec.get(b.codec, 0) + b.count
    return out


def summary(batches: list[Batch]) -> dict[str, object]:
    return {
        "records_by_topic_codec": records_by_topic_codec(batches),
        "control_batches": sum(1 for b in batches if b.control),
        "batches": [asdict(b) for b in batches],
    }


def data_dir_from_env() -> Path:
    out = subprocess.run(
        [str(KAFKA_BROKER), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return Path(env["KAFKA_BROKER_DIR"]) / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    batches = dump_topics(args.data_dir or data_dir_from_env(), args.prefix)
    print(json.dumps(records_by_topic_codec(batches), indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
