"""Consumer groups at different lags, recorded with the broker's own account of them.

One producer writes to a 3-partition topic while consumer groups read it (kafka-python,
in threads):

- ``caught-up``: joins before the first record, commits after every poll and ends at
  the log end;
- ``prefetch``: joins part-way, fetches everything there is in one go and works
  through it slowly, committing as it goes: its last Fetch is long before its last
  commit, so its fetch position says little about its lag;
- ``earliest``: a new group that joins late with no committed offset (OffsetFetch
  answers -1, the consumer resets to the earliest offset) and reads in small fetches;
- ``txn``: a consume-transform-produce loop committing its offsets in transactions
  (TxnOffsetCommit, then EndTxn); its last transaction is aborted, so the broker keeps
  the offsets of the one before.

When every client has closed, and while the capture still runs, Kafka's own tools say
what the broker holds: ``kafka-consumer-groups --describe`` (ConsumerGroupCommand:
CURRENT-OFFSET, LOG-END-OFFSET, LAG per group and partition) and GetOffsetShell (the
log-end offset per partition). They connect to the SASL listener, so a capture of the
plaintext port alone holds only the clients' traffic, and one of both ports holds
the tools' requests too.

    scripts/kafka-broker start
    python -m scripts.testbed.lag_scenario --out-dir captures --name kafka-4-lag --prefix lag
    scripts/kafka-broker stop

writes ``<name>.pcapng`` and ``<name>.json`` (``LagRun``: what the clients and the tools
said) into the output directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from scripts.testbed.capture import Capture

KAFKA_BROKER = Path(__file__).resolve().parent.parent / "kafka-broker"
DESCRIBE = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"
PLAINTEXT_PORT = 9092
SASL_PORT = 9094
# The tools log in as the test bed's admin user (scripts/kafka-broker: loopback only).
ADMIN_CONFIG = (
    "security.protocol=SASL_PLAINTEXT\n"
    "sasl.mechanism=PLAIN\n"
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret";\n'
)
PARTITIONS = 3
RECORDS = 1500
PRODUCE_S = 5.0
TOOL_TIMEOUT_S = 120
JOIN_TIMEOUT_S = 60
METADATA_TIMEOUT_S = 30
GROUPS = ("caught-up", "prefetch", "earliest", "txn")


@dataclass(frozen=True, slots=True)
class DescribeRow:
    """One row of ``kafka-consumer-groups --describe`` (None where it prints "-")."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None


@dataclass
class LagRun:
    """What the scenario did and what Kafka's tools said at its end."""

    capture: str  # file name, beside the JSON document
    topic: str
    groups: dict[str, str]  # role -> group id
    clients: dict[str, str]  # role -> client id
    produced: dict[int, int]  # partition -> records acknowledged to the producer
    create_ms: dict[int, dict[int, int]]  # partition -> offset -> record timestamp (ms)
    describe: list[DescribeRow]
    log_end: dict[int, int]  # partition -> GetOffsetShell's latest offset
    errors: list[str] = field(default_factory=list)
    timeline: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = asdict(self)
        doc["describe"] = [asdict(r) for r in self.describe]
        return json.dumps(doc, indent=1)

    @staticmethod
    def from_json(text: str) -> LagRun:
        doc = json.loads(text)
        doc["describe"] = [DescribeRow(**r) for r in doc["describe"]]
        doc["produced"] = {int(k): v for k, v in doc["produced"].items()}
        doc["log_end"] = {int(k): v for k, v in doc["log_end"].items()}
        doc["create_ms"] = {
            int(p): {int(o): ts for o, ts in offsets.items()}
            for p, offsets in doc["create_ms"].items()
        }
        return LagRun(**doc)


# ---------------------------------------------------------------- Kafka's tools


def run_tool(cls: str, *args: str) -> str:
    out = subprocess.run(
        [str(KAFKA_BROKER), "tool", cls, *args],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{cls} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def _offset(text: str) -> int | None:
    return None if text == "-" else int(text)


def parse_describe(text: str) -> list[DescribeRow]:
    """Rows of ``--describe`` output: a header line starting GROUP, then one line per
    group and partition (several groups: one table each)."""
    rows = []
    columns: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "GROUP":
            columns = words
            continue
        if not columns or len(words) < len(columns):
            continue  # "Consumer group 'x' has no active members." and the like
        cell = dict(zip(columns, words, strict=False))
        rows.append(
            DescribeRow(
                group=cell["GROUP"],
                topic=cell["TOPIC"],
                partition=int(cell["PARTITION"]),
                current_offset=_offset(cell["CURRENT-OFFSET"]),
                log_end_offset=_offset(cell["LOG-END-OFFSET"]),
                lag=_offset(cell["LAG"]),
            )
        )
    return rows


def describe_groups(groups: list[str], config: Path, port: int = SASL_PORT) -> list[DescribeRow]:
    args = ["--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(config)]
    for group in groups:
        args += ["--group", group]
    return parse_describe(run_tool(DESCRIBE, *args, "--describe"))


def parse_offset_shell(text: str) -> dict[tuple[str, int], int]:
    """``topic:partition:offset`` lines."""
    out = {}
    for line in text.splitlines():
        topic, sep, rest = line.strip().rpartition(":")
        name, sep2, partition = topic.rpartition(":")
        if sep and sep2 and rest.lstrip("-").isdigit() and partition.isdigit():
            out[(name, int(partition))] = int(rest)
    return out


def latest_offsets(topic: str, config: Path, port: int = SASL_PORT) -> dict[int, int]:
    text = run_tool(
        OFFSET_SHELL,
        "--bootstrap-server",
        f"127.0.0.1:{port}",
        "--command-config",
        str(config),
        "--topic",
        topic,
        "--time",
        "-1",
    )
    return {p: o for (t, p), o in parse_offset_shell(text).items() if t == topic}


# ---------------------------------------------------------------- clients


def _bootstrap() -> str:
    return f"127.0.0.1:{PLAINTEXT_PORT}"


def _create_topics(*topics: tuple[str, int]) -> None:
    """Create ``topics`` (name, partitions) and wait until the broker's metadata has
    a leader for every partition. Once, on a busy machine, the caught-up consumer,
    joining 0.7 s after the topics were created, was assigned (generation 1), rejoined
    at once as group leader (generation 2), and then neither polled nor heartbeated
    until the broker removed it 45 s later: the scenario failed with "caught-up: no
    assignment". Joining once the partitions have leaders, it no longer rejoined in
    the run that checked this (the late groups still rejoin once, as before)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=_bootstrap(), client_id="lag-admin")
    try:
        admin.create_topics([NewTopic(t, n, 1) for t, n in topics])
        wanted = dict(topics)
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        while not _led(admin.describe_topics(list(wanted)), wanted):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topics {sorted(wanted)} have no leader after "
                                   f"{METADATA_TIMEOUT_S} s")  # fmt: skip
            time.sleep(0.1)
    finally:
        admin.close()


def _led(described: list[dict[str, Any]], wanted: dict[str, int]) -> bool:
    """Whether every topic of ``wanted`` (name -> partitions) is described with that
    many partitions, each with a leader."""
    found = {t["name"]: t["partitions"] for t in described if not t["error_code"]}
    return all(
        len(found.get(name, ())) == count
        and all(not p["error_code"] and p["leader_id"] >= 0 for p in found[name])
        for name, count in wanted.items()
    )


@dataclass
class Consumer:
    """A consumer group member in a thread: ``step`` handles each poll's records."""

    role: str
    group: str
    client_id: str
    topic: str
    config: dict[str, Any]
    pause_s: float
    stop: threading.Event = field(default_factory=threading.Event)
    assigned: threading.Event = field(default_factory=threading.Event)
    done: Callable[[Any], bool] | None = None  # the consumer's own end condition
    step: Callable[[Any, dict[Any, list[Any]]], None] | None = None
    finish: Callable[[Any], None] | None = None
    error: str | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=self.role, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=_bootstrap(),
            group_id=self.group,
            client_id=self.client_id,
            enable_auto_commit=False,
            **self.config,
        )
        try:
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                if consumer.assignment():
                    self.assigned.set()
                if batch:
                    (self.step or _commit)(consumer, batch)
                    time.sleep(self.pause_s)
                if self.done is not None and self.done(consumer):
                    break
            (self.finish or _final_commit)(consumer)
        except Exception as exc:  # reported by the scenario, never swallowed
            self.error = f"{self.role}: {type(exc).__name__}: {exc}"
            self.assigned.set()
        finally:
            consumer.close(autocommit=False)

    def join(self, timeout: float) -> None:
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():
                self.error = self.error or f"{self.role}: did not stop within {timeout} s"


def _commit(consumer: Any, _batch: dict[Any, list[Any]]) -> None:
    consumer.commit()


def _final_commit(consumer: Any) -> None:
    if consumer.assignment():
        consumer.commit()


class Transactional:
    """Consume-transform-produce: each poll's records copied to ``out_topic`` and the
    consumer's offsets committed in the same transaction; ``abort_last`` aborts the
    final one (its offsets must not count)."""

    def __init__(self, transactional_id: str, client_id: str, out_topic: str) -> None:
        from kafka import KafkaProducer

        self.out_topic = out_topic
        self.producer = KafkaProducer(
            bootstrap_servers=_bootstrap(),
            client_id=client_id,
            transactional_id=transactional_id,
            linger_ms=5,
        )
        self.producer.init_transactions()

    def _offsets(self, consumer: Any) -> dict[Any, Any]:
        from kafka.structs import OffsetAndMetadata

        return {
            tp: OffsetAndMetadata(consumer.position(tp), "", -1) for tp in consumer.assignment()
        }

    def step(self, consumer: Any, batch: dict[Any, list[Any]]) -> None:
        self.producer.begin_transaction()
        for records in batch.values():
            for record in records:
                self.producer.send(self.out_topic, value=record.value)
        self.producer.send_offsets_to_transaction(
            self._offsets(consumer), consumer.group_metadata()
        )
        self.producer.commit_transaction()

    def abort_last(self, consumer: Any) -> None:
        """One more poll's worth in a transaction that is aborted."""
        batch = consumer.poll(timeout_ms=2000, max_records=20)
        self.producer.begin_transaction()
        for records in batch.values():
            for record in records:
                self.producer.send(self.out_topic, value=record.value)
        self.producer.send_offsets_to_transaction(
            self._offsets(consumer), consumer.group_metadata()
        )
        self.producer.abort_transaction()

    def close(self) -> None:
        self.producer.close(timeout=10)


def _produce(topic: str, client_id: str, on_progress: Callable[[int], None]) -> list[Any]:
    """RECORDS records round the partitions over PRODUCE_S seconds; their metadata."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=_bootstrap(), client_id=client_id, acks="all", linger_ms=10
    )
    futures = []
    bursts = 50
    per_burst = RECORDS // bursts
    try:
        for b in range(bursts):
            for i in range(per_burst):
                n = b * per_burst + i
                futures.append(producer.send(topic, value=b"r%06d" % n, partition=n % PARTITIONS))
            on_progress((b + 1) * per_burst)
            time.sleep(PRODUCE_S / bursts)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    return [f.get(timeout=10) for f in futures]


# ---------------------------------------------------------------- the scenario


def run_lag_scenario(out_dir: Path, prefix: str, name: str | None = None) -> LagRun:
    """Run the scenario while capturing both listeners into ``out_dir/<name>.pcapng``
    (``name`` defaults to ``prefix``, which starts every topic, group and client id)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "admin.properties"
        config.write_text(ADMIN_CONFIG)
        return _scenario(out_dir / f"{name or prefix}.pcapng", prefix, config)


def _scenario(capture: Path, prefix: str, config: Path) -> LagRun:
    topic, out_topic = f"{prefix}-in", f"{prefix}-out"
    groups = {role: f"{prefix}-{role}" for role in GROUPS}
    clients = {role: f"{prefix}-{role}-client" for role in (*GROUPS, "producer", "txn-producer")}
    _create_topics((topic, PARTITIONS), (out_topic, 1))
    t0 = time.time()
    timeline: dict[str, float] = {}

    def mark(name: str) -> None:
        timeline[name] = round(time.time() - t0, 3)

    # The log end once the producer is done; set whole, from the main thread, once.
    final: list[dict[Any, int]] = []

    def caught_up(consumer: Any) -> bool:
        return bool(final) and all(consumer.position(tp) >= end for tp, end in final[0].items())

    base = {"auto_offset_reset": "earliest"}
    caught = Consumer("caught-up", groups["caught-up"], clients["caught-up"], topic, base, 0.0)
    caught.done = caught_up
    # One fetch takes all there is (kafka-python fetches a partition again only when
    # its buffered records are used up); 10 records per poll at 5 polls a second.
    prefetch = Consumer(
        "prefetch", groups["prefetch"], clients["prefetch"], topic,
        {**base, "max_poll_records": 10}, 0.2,
    )  # fmt: skip
    earliest = Consumer(
        "earliest", groups["earliest"], clients["earliest"], topic,
        {**base, "max_partition_fetch_bytes": 2048, "max_poll_records": 25}, 0.05,
    )  # fmt: skip
    txn = Consumer(
        "txn", groups["txn"], clients["txn"], topic,
        {**base, "isolation_level": "read_committed", "max_poll_records": 20}, 0.2,
    )  # fmt: skip
    consumers = [caught, prefetch, earliest, txn]
    errors: list[str] = []
    with Capture(capture, ports=(PLAINTEXT_PORT, SASL_PORT)):
        transactional = Transactional(f"{prefix}-txn", clients["txn-producer"], out_topic)
        txn.step, txn.finish = transactional.step, transactional.abort_last
        caught.start()
        if not caught.assigned.wait(JOIN_TIMEOUT_S):
            errors.append("caught-up: no assignment")
        mark("caught_up_joined")
        late = {int(RECORDS * 0.4): prefetch, int(RECORDS * 0.5): txn, int(RECORDS * 0.7): earliest}

        def on_progress(sent: int) -> None:
            for at, consumer in list(late.items()):
                if sent >= at:
                    consumer.start()
                    mark(f"{consumer.role}_started")
                    del late[at]

        metadata = _produce(topic, clients["producer"], on_progress)
        mark("produced")
        from kafka.structs import TopicPartition

        ends: dict[Any, int] = {}
        for m in metadata:
            tp = TopicPartition(m.topic, m.partition)
            ends[tp] = max(ends.get(tp, 0), m.offset + 1)
        final.append(ends)
        caught.join(JOIN_TIMEOUT_S)
        mark("caught_up_done")
        time.sleep(1.0)  # the lagging groups keep committing a little longer
        for consumer in consumers:
            consumer.stop.set()
        for consumer in consumers:
            consumer.join(JOIN_TIMEOUT_S)
        transactional.close()
        mark("consumers_closed")
        errors += [c.error for c in consumers if c.error]
        describe = describe_groups(list(groups.values()), config)
        mark("described")
        log_end = latest_offsets(topic, config)
        mark("offset_shell")
    produced: dict[int, int] = {}
    create_ms: dict[int, dict[int, int]] = {}
    for m in metadata:
        produced[m.partition] = produced.get(m.partition, 0) + 1
        create_ms.setdefault(m.partition, {})[m.offset] = m.timestamp
    return LagRun(
        capture=capture.name,
        topic=topic,
        groups=groups,
        clients=clients,
        produced=produced,
        create_ms=create_ms,
        describe=describe,
        log_end=log_end,
        errors=errors,
        timeline=timeline,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path(tempfile.gettempdir()) / "lag")
    parser.add_argument("--prefix", default=f"lag{os.getpid()}")
    parser.add_argument("--name", help="file name stem (default: the prefix)")
    args = parser.parse_args()
    name = args.name or args.prefix
    run = run_lag_scenario(args.out_dir, args.prefix, name)
    out = args.out_dir / f"{name}.json"
    out.write_text(run.to_json() + "\n")
    print(f"wrote {args.out_dir / run.capture} and {out}; errors: {run.errors or 'none'}")


if __name__ == "__main__":
    main()
