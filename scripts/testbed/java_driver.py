"""Apache Kafka's own Java tools as a traffic driver (run through `scripts/kafka-broker tool`).

The console producer, the KIP-932 share-group command (reset, describe, offsets, members,
list, delete offsets) and the console share consumer, so ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge, ShareGroupDescribe and the share-offset admin APIs appear in real traffic
from the reference client.

    python -m scripts.testbed.java_driver --prefix mix --ledger out.json
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from scripts.testbed.ledger import Ledger, Operation, Timed, driver_parser

CLIENT = "kafka-java-tools"
SCRIPT_DIR = Path(__file__).resolve().parent.parent
KAFKA_BROKER = SCRIPT_DIR / "kafka-broker"

PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
TOPICS = "org.apache.kafka.tools.TopicCommand"


def tools_version() -> str:
    out = subprocess.run(
        [str(KAFKA_BROKER), "env"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return env["KAFKA_TOOLS_VERSION"]


def run_tool(
    cls: str, args: list[str], stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_BROKER), "tool", cls, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Driver:
    def __init__(self, prefix: str, plaintext: str, records: int, workdir: Path) -> None:
        self.prefix = prefix
        self.plaintext = plaintext
        self.port = int(plaintext.rsplit(":", 1)[1])
        self.records = records
        self.workdir = workdir
        self.ledger = Ledger(driver=CLIENT, clients={"kafka-tools": tools_version()})

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def op(self, **kw: Any) -> Operation:
        kw.setdefault("port", self.port)
        return self.ledger.add(Operation(client=CLIENT, **kw))

    def client_config(self, client_id: str) -> Path:
        path = self.workdir / f"{client_id}.properties"
        path.write_text(f"client.id={client_id}\n")
        return path

    def group_command(
        self, op_name: str, apis: list[str], args: list[str]
    ) -> subprocess.CompletedProcess[str]:
        cid = self.name("java-share-admin")
        group = self.name("share-group")
        with Timed(
            self.op(op=op_name, client_id=cid, apis=apis, group_id=group, group_protocol="share")
        ) as o:
            done = run_tool(
                SHARE_GROUPS,
                [
                    "--bootstrap-server",
                    self.plaintext,
                    "--command-config",
                    str(self.client_config(cid)),
                    "--group",
                    group,
                    *args,
                ],
            )
            o.ok = done.returncode == 0
            o.detail = {"args": args, "stdout": done.stdout.strip()[-2000:]}
            if not o.ok:
                o.detail["stderr"] = done.stderr.strip()[-2000:]
        return done

    def run(self) -> None:
        topic = self.name("share")
        cid = self.name("java-topics")
        with Timed(
            self.op(op="create_topics", client_id=cid, apis=["CreateTopics"], topic=topic)
        ) as o:
            done = run_tool(
                TOPICS,
                [
                    "--bootstrap-server",
                    self.plaintext,
                    "--command-config",
                    str(self.client_config(cid)),
                    "--create",
                    "--topic",
                    topic,
                    "--partitions",
                    "1",
                    "--replication-factor",
                    "1",
                ],
            )
            o.ok = done.returncode == 0
            if not o.ok:
                o.detail["stderr"] = done.stderr.strip()[-2000:]
        cid = self.name("java-producer")
        lines = "".join(f"share record {i:04d} {'payload ' * 6}\n" for i in range(self.records))
        with Timed(
            self.op(op="produce", client_id=cid, apis=["Produce"], topic=topic, codec="zstd")
        ) as o:
            done = run_tool(
                PRODUCER,
                [
                    "--bootstrap-server",
                    self.plaintext,
                    "--topic",
                    topic,
                    "--command-property",
                    f"client.id={cid}",
                    # The console producer sets compression.type from this option itself
                    # (default none), overriding a compression.type property.
                    "--compression-codec",
                    "zstd",
                    "--command-property",
                    "linger.ms=50",
                ],
                stdin=lines,
            )
            # The console producer reports nothing per record: exit status 0 means every
            # line was sent and acknowledged before it closed (acks=all, flush on close).
            o.ok = done.returncode == 0
            o.records = self.records if o.ok else 0
            if not o.ok:
                o.detail["stderr"] = done.stderr.strip()[-2000:]
        # Share groups start at the latest offset; move the new group to the earliest so the
        # consumer sees what was just produced.
        self.group_command(
            "share_reset_offsets",
            ["AlterShareGroupOffsets"],
            ["--reset-offsets", "--to-earliest", "--execute", "--topic", topic],
        )
        cid = self.name("java-share-consumer")
        group = self.name("share-group")
        with Timed(
            self.op(
                op="share_consume",
                client_id=cid,
                apis=["ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge"],
                topic=topic,
                group_id=group,
                group_protocol="share",
            )
        ) as o:
            done = run_tool(
                SHARE_CONSUMER,
                [
                    "--bootstrap-server",
                    self.plaintext,
                    "--topic",
                    topic,
                    "--group",
                    group,
                    "--max-messages",
                    str(self.records),
                    "--timeout-ms",
                    "20000",
                    "--command-property",
                    f"client.id={cid}",
                ],
                timeout=60,
            )
            got = [line for line in done.stdout.splitlines() if line.startswith("share record")]
            o.records = len(got)
            o.ok = done.returncode == 0 and o.records == self.records
            if not o.ok:
                o.detail["stderr"] = done.stderr.strip()[-2000:]
        self.group_command("share_describe", ["ShareGroupDescribe"], ["--describe"])
        self.group_command(
            "share_describe_members", ["ShareGroupDescribe"], ["--describe", "--members"]
        )
        self.group_command(
            "share_describe_offsets", ["DescribeShareGroupOffsets"], ["--describe", "--offsets"]
        )
        self.group_command(
            "share_delete_offsets",
            ["DeleteShareGroupOffsets"],
            ["--delete-offsets", "--topic", topic],
        )


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__ or "", "java")
    parser.add_argument("--records", type=int, default=25)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kafka-java-driver-") as tmp:
        d = Driver(args.prefix, args.plaintext, args.records, Path(tmp))
        try:
            d.run()
        finally:
            d.ledger.write(args.ledger)
    failed = [(o.op, o.detail.get("stderr", "")[-300:]) for o in d.ledger.operations if not o.ok]
    if failed:
        print(f"java driver: operations not as expected: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
