"""Regenerate dissector/protocol/data/kafka-specs.json.gz from kafka-clients jars.

    python -m scripts.specs.generate                     # Kafka 4.4.0, older layers 4.0.0, 3.9.1
    python -m scripts.specs.generate --kafka 4.5.0       # a newer release
    python -m scripts.specs.generate --check             # exit 1 when the shipped file differs

What is shipped is the protocol facts of Apache Kafka's own JSON message specs, read from
the ``kafka-clients`` jar of each release on Maven Central (``common/message/*.json``):
names, api keys, valid and flexible versions, listeners, fields with their types,
versions, nullable and tagged versions, tags, defaults, map keys and entity types.
Prose (``about``) and the license comments are left out.

Layers, newest first: the newest release describes every version it supports; an older
release adds only the versions Kafka later removed (KIP-896 removed many in 4.0; the
inter-broker APIs 4-7 of ZooKeeper clusters; the early-access v0 of the share-group
APIs in 4.0). A loader takes each (api_key, version, direction) from the first layer
that has it.

Also generated, so that the package needs no Kafka client library at run time:

- ``errors``: every ``org.apache.kafka.common.protocol.Errors`` member of the newest jar
  (code, NAME, retriable = its exception is a ``RetriableException``), printed by
  ``ErrorTable.java`` beside this file (Java's source launcher: needs a JDK).
- ``releases``: the API version ranges each Apache Kafka release supports, for the
  report's "broker is Kafka X or newer" line, copied from kafka-python's
  ``kafka.protocol.broker_version_data`` (a dev extra) with its version recorded.

Jars are resolved with ``mvn dependency:get`` into the cache scripts/kafka-broker uses
(``${XDG_CACHE_HOME:-~/.cache}/kafka-dissector/m2``). The output is deterministic
(sorted keys, gzip without a time stamp): the same jars give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUTPUT = REPO / "dissector" / "protocol" / "data" / "kafka-specs.json.gz"
ERROR_TABLE_JAVA = Path(__file__).with_name("ErrorTable.java")
FORMAT = 1
NEWEST = "4.4.0"
# Older releases, newest first: each adds only versions the layers before it lack.
OLDER = ("4.0.0", "3.9.1")
SLF4J = "org.slf4j:slf4j-api:2.0.17"  # Errors logs through SLF4J: on the class path to load it
PROSE = frozenset({"about"})


def m2_repo() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-dissector" / "m2"


def resolve(artifact: str) -> Path:
    """The jar of ``group:name:version`` in the cache, fetched with Maven when missing."""
    group, name, version = artifact.split(":")
    jar = m2_repo().joinpath(*group.split("."), name, version, f"{name}-{version}.jar")
    if jar.is_file():
        return jar
    if shutil.which("mvn") is None:
        sys.exit(f"{jar} is not cached and mvn is not installed (apt-get install maven)")
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "dependency:get",
            f"-Dartifact={artifact}",
            "-Dtransitive=false",
            f"-Dmaven.repo.local={m2_repo()}",
        ],
        check=True,
        timeout=600,
    )
    if not jar.is_file():
        sys.exit(f"mvn did not leave {jar}")
    return jar


def strip_comments(text: str) -> str:
    """Apache's spec files carry // comments, which JSON does not allow."""
    # The same reader the package uses for --specs, so both agree on what a spec says.
    sys.path.insert(0, str(REPO))
    from dissector.protocol.sources import strip_json_comments

    return strip_json_comments(text)


def without_prose(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_prose(v) for k, v in value.items() if k not in PROSE}
    if isinstance(value, list):
        return [without_prose(v) for v in value]
    return value


def jar_messages(jar: Path) -> list[dict[str, Any]]:
    """The request and response specs of a kafka-clients jar, prose removed, by file name."""
    out: list[dict[str, Any]] = []
    with zipfile.ZipFile(jar) as archive:
        for name in sorted(archive.namelist()):
            if not (name.startswith("common/message/") and name.endswith(".json")):
                continue
            spec = json.loads(strip_comments(archive.read(name).decode("utf-8")))
            if spec.get("type") in ("request", "response") and "apiKey" in spec:
                out.append(without_prose(spec))
    return out


def versions(text: str | None) -> range:
    """Apache's validVersions syntax ("0-5", "3+", "2", "none") as a range."""
    if not text or text == "none":
        return range(0)
    if text.endswith("+"):
        raise ValueError(f"open validVersions {text!r}")
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


def combinations(messages: list[dict[str, Any]]) -> set[tuple[int, int, str]]:
    return {
        (int(m["apiKey"]), v, str(m["type"]))
        for m in messages
        for v in versions(m.get("validVersions"))
    }


def layers(newest: str, older: tuple[str, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    known: set[tuple[int, int, str]] = set()
    for release in (newest, *older):
        artifact = f"org.apache.kafka:kafka-clients:{release}"
        jar = resolve(artifact)
        messages = jar_messages(jar)
        if out:  # an older layer keeps only the messages that add versions
            messages = [m for m in messages if combinations([m]) - known]
        known |= combinations(messages)
        out.append(
            {
                "release": release,
                "artifact": artifact,
                "sha256": hashlib.sha256(jar.read_bytes()).hexdigest(),
                "messages": messages,
            }
        )
    return out


def error_table(newest: str) -> list[dict[str, Any]]:
    if shutil.which("java") is None:
        sys.exit("java is not installed: the error table is read from the jar by Java")
    classpath = os.pathsep.join(
        str(resolve(a)) for a in (f"org.apache.kafka:kafka-clients:{newest}", SLF4J)
    )
    out = subprocess.run(
        ["java", "-cp", classpath, str(ERROR_TABLE_JAVA)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    table: list[dict[str, Any]] = []
    for line in out.splitlines():
        match = re.fullmatch(r"(-?\d+)\t([A-Z0-9_]+)\t(true|false)", line.strip())
        if match is None:
            sys.exit(f"unexpected line from ErrorTable.java: {line!r}")
        table.append({"code": int(match[1]), "name": match[2], "retriable": match[3] == "true"})
    if len(table) < 100:
        sys.exit(f"only {len(table)} errors read from the jar")
    return sorted(table, key=lambda e: e["code"])


def release_table() -> dict[str, Any]:
    try:
        from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
    except ImportError:
        sys.exit("kafka-python is not installed (pip install -e '.[dev]'): the release table")
    from importlib import metadata

    return {
        "source": f"kafka-python {metadata.version('kafka-python')}",
        "ranges": {
            ".".join(map(str, release)): {
                str(key): [int(lo), int(hi)] for key, (lo, hi) in sorted(ranges.items())
            }
            for release, ranges in sorted(BROKER_API_VERSIONS.items())
        },
    }


def build(newest: str, older: tuple[str, ...]) -> bytes:
    data = {
        "format": FORMAT,
        "generator": "scripts/specs/generate.py",
        "layers": layers(newest, older),
        "errors": error_table(newest),
        "releases": release_table(),
    }
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kafka", default=NEWEST, help="the newest release (default %(default)s)")
    parser.add_argument(
        "--older",
        default=",".join(OLDER),
        help="older releases for removed versions, newest first (default %(default)s)",
    )
    parser.add_argument("--out", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    older = tuple(v for v in args.older.split(",") if v)
    blob = build(args.kafka, older)
    if args.check:
        same = args.out.is_file() and args.out.read_bytes() == blob
        print(f"{args.out}: {'up to date' if same else 'differs from the jars'}")
        sys.exit(0 if same else 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(blob)
    print(f"wrote {args.out} ({len(blob):,} bytes)")


if __name__ == "__main__":
    main()
