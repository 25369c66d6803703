"""kafka-python traffic driver: produce (none/gzip/snappy/lz4), a consumer group, a wide
spread of admin APIs, SASL SCRAM, and a Produce request to a missing topic.

kafka-python picks its own API versions (often older than librdkafka's or Java's), which is
what makes it worth capturing next to the other clients.

    python -m scripts.testbed.kafka_python_driver --prefix mix --ledger out.json
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from scripts.testbed.ledger import (
    CLASSIC_CONSUMER_APIS,
    ExpectedError,
    Ledger,
    Operation,
    Timed,
    driver_parser,
)

CLIENT = "kafka-python"
CODECS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4")


def payload(i: int) -> bytes:
    return (f"kp record {i:05d} " + "kafka-python says hello " * 8).encode()


def error_name(exc: BaseException) -> str:
    # kafka-python's broker errors carry Kafka's own name in `message`.
    return str(getattr(exc, "message", None) or type(exc).__name__)


class Driver:
    def __init__(self, prefix: str, plaintext: str, sasl: str, per_codec: int) -> None:
        self.prefix = prefix
        self.plaintext = plaintext
        self.sasl = sasl
        self.plaintext_port = int(plaintext.rsplit(":", 1)[1])
        self.sasl_port = int(sasl.rsplit(":", 1)[1])
        self.per_codec = per_codec
        self.ledger = Ledger(driver=CLIENT, clients={"kafka-python": kafka.__version__})

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def op(self, **kw: Any) -> Operation:
        kw.setdefault("port", self.plaintext_port)
        return self.ledger.add(Operation(client=CLIENT, **kw))

    def attempt(self, operation: Operation, call: Callable[[], Any]) -> Any:
        """Run one admin call, noting a client-side failure in the operation."""
        with Timed(operation) as o:
            try:
                result = call()
                return result
            except Exception as exc:
                o.ok = False
                o.detail["client_error"] = error_name(exc)
                return None

    # ------------------------------------------------------------------ admin

    def admin(self) -> None:
        cid = self.name("kp-admin")
        admin = KafkaAdminClient(
            bootstrap_servers=self.plaintext, client_id=cid, request_timeout_ms=20000
        )
        topics = [self.name(f"kp-{c}") for c in CODECS]
        topics += [self.name("kp-scratch"), self.name("kp-old")]
        self.attempt(
            self.op(
                op="create_topics", client_id=cid, apis=["CreateTopics"], detail={"topics": topics}
            ),
            lambda: admin.create_topics(
                [NewTopic(t, 1, 1) for t in topics], wait_for_metadata=True
            ),
        )
        scratch = self.name("kp-scratch")
        calls: list[tuple[str, list[str], Callable[[], Any]]] = [
            ("describe_cluster", ["DescribeCluster"], admin.describe_cluster),
            (
                "describe_topic_partitions",
                ["DescribeTopicPartitions"],
                lambda: admin.describe_topic_partitions([scratch]),
            ),
            (
                "create_partitions",
                ["CreatePartitions"],
                lambda: admin.create_partitions({scratch: NewPartitions(2)}),
            ),
            (
                "describe_configs",
                ["DescribeConfigs"],
                lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, scratch)]),
            ),
            ("describe_log_dirs", ["DescribeLogDirs"], admin.describe_log_dirs),
            ("describe_metadata_quorum", ["DescribeQuorum"], admin.describe_metadata_quorum),
            (
                "describe_user_scram_credentials",
                ["DescribeUserScramCredentials"],
                admin.describe_user_scram_credentials,
            ),
            ("list_transactions", ["ListTransactions"], admin.list_transactions),
        ]
        for op_name, apis, call in calls:
            self.attempt(self.op(op=op_name, client_id=cid, apis=apis, topic=None), call)
        self.admin_client = admin

    def admin_after(self) -> None:
        admin = self.admin_client
        cid = self.name("kp-admin")
        group = self.name("kp-group")
        scratch = self.name("kp-scratch")
        self.attempt(
            self.op(op="list_groups", client_id=cid, apis=["ListGroups"]), admin.list_groups
        )
        self.attempt(
            self.op(op="describe_groups", client_id=cid, apis=["DescribeGroups"], group_id=group),
            lambda: admin.describe_groups([group]),
        )
        self.attempt(
            self.op(op="list_group_offsets", client_id=cid, apis=["OffsetFetch"], group_id=group),
            lambda: admin.list_group_offsets(group),
        )
        tp = TopicPartition(self.name("kp-none"), 0)
        self.attempt(
            self.op(op="delete_records", client_id=cid, apis=["DeleteRecords"], topic=tp.topic),
            lambda: admin.delete_records({tp: 5}),
        )
        self.attempt(
            self.op(
                op="delete_group_offsets", client_id=cid, apis=["OffsetDelete"], group_id=group
            ),
            lambda: admin.delete_group_offsets(group, [TopicPartition(self.name("kp-lz4"), 0)]),
        )
        self.attempt(
            self.op(op="delete_groups", client_id=cid, apis=["DeleteGroups"], group_id=group),
            lambda: admin.delete_groups([group]),
        )
        self.attempt(
            self.op(op="delete_topics", client_id=cid, apis=["DeleteTopics"], topic=scratch),
            lambda: admin.delete_topics([scratch]),
        )
        admin.close()

    # ------------------------------------------------------------------ produce / consume

    def produce_codecs(self) -> None:
        for codec in CODECS:
            cid = self.name(f"kp-produce-{codec}")
            topic = self.name(f"kp-{codec}")
            with Timed(
                self.op(op="produce", client_id=cid, apis=["Produce"], topic=topic, codec=codec)
            ) as o:
                producer = KafkaProducer(
                    bootstrap_servers=self.plaintext,
                    client_id=cid,
                    compression_type=None if codec == "none" else codec,
                    linger_ms=20,
                )
                futures = [
                    producer.send(topic, value=payload(i), key=f"k{i}".encode())
                    for i in range(self.per_codec)
                ]
                producer.flush(timeout=30)
                acked = sum(1 for f in futures if f.succeeded())
                producer.close(timeout=10)
                o.records = acked
                o.ok = acked == self.per_codec

    def consume(self) -> None:
        cid = self.name("kp-consume")
        group = self.name("kp-group")
        topics = [self.name(f"kp-{c}") for c in CODECS]
        expected = self.per_codec * len(CODECS)
        with Timed(
            self.op(
                op="consume",
                client_id=cid,
                apis=list(CLASSIC_CONSUMER_APIS),
                group_id=group,
                group_protocol="classic",
                detail={"topics": topics},
            )
        ) as o:
            consumer = KafkaConsumer(
                *topics,
                bootstrap_servers=self.plaintext,
                client_id=cid,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            counts: Counter[str] = Counter()
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline and sum(counts.values()) < expected:
                for tp, msgs in consumer.poll(timeout_ms=500).items():
                    counts[tp.topic] += len(msgs)
            consumer.commit()
            consumer.close()
            o.records = sum(counts.values())
            o.ok = o.records == expected
            o.detail["per_topic"] = dict(counts)

    def sasl_scram(self) -> None:
        cid = self.name("kp-sasl-scram")
        topic = self.name("kp-gzip")
        with Timed(
            self.op(
                op="produce_sasl_scram",
                client_id=cid,
                port=self.sasl_port,
                apis=["SaslHandshake", "SaslAuthenticate", "Produce"],
                topic=topic,
                codec="gzip",
                detail={"mechanism": "SCRAM-SHA-256", "user": "bob"},
            )
        ) as o:
            producer = KafkaProducer(
                bootstrap_servers=self.sasl,
                client_id=cid,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="bob",
                sasl_plain_password="bob-secret",
                compression_type="gzip",
            )
            futures = [producer.send(topic, value=payload(1000 + i)) for i in range(5)]
            producer.flush(timeout=30)
            o.records = sum(1 for f in futures if f.succeeded())
            producer.close(timeout=10)
            o.ok = o.records == 5

    def old_protocol(self) -> None:
        """Clients told the broker is 0.11 / 0.10.0: the oldest versions Kafka 4 still takes,
        then versions it no longer takes (Produce v2, removed by KIP-896)."""
        topic = self.name("kp-old")
        cid = self.name("kp-old-produce")
        with Timed(
            self.op(
                op="produce_old_versions",
                client_id=cid,
                apis=["ApiVersions", "Metadata", "Produce"],
                topic=topic,
                codec="gzip",
                detail={"api_version": "0.11", "expect_versions": {"Produce": 3}},
            )
        ) as o:
            producer = KafkaProducer(
                bootstrap_servers=self.plaintext,
                client_id=cid,
                api_version=(0, 11),
                compression_type="gzip",
                linger_ms=20,
            )
            futures = [producer.send(topic, value=payload(2000 + i)) for i in range(15)]
            producer.flush(timeout=30)
            o.records = sum(1 for f in futures if f.succeeded())
            producer.close(timeout=10)
            o.ok = o.records == 15
        cid = self.name("kp-old-consume")
        group = self.name("kp-old-group")
        with Timed(
            self.op(
                op="consume_old_versions",
                client_id=cid,
                apis=["FindCoordinator", "JoinGroup", "SyncGroup", "OffsetFetch", "Fetch"],
                topic=topic,
                group_id=group,
                group_protocol="classic",
                detail={"api_version": "0.11", "expect_versions": {"Fetch": 5}},
            )
        ) as o:
            consumer = KafkaConsumer(
                topic,
                bootstrap_servers=self.plaintext,
                client_id=cid,
                group_id=group,
                api_version=(0, 11),
                auto_offset_reset="earliest",
            )
            got = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and got < 15:
                got += sum(len(m) for m in consumer.poll(timeout_ms=500).values())
            consumer.close()
            o.records = got
            o.ok = got == 15

    # ------------------------------------------------------------------ errors

    def produce_unsupported_version(self) -> None:
        """kafka-python told the broker is 0.10.0 sends Produce v2; Kafka 4 dropped it, so
        the broker closes the connection without answering."""
        cid = self.name("kp-too-old")
        topic = self.name("kp-old")
        with Timed(
            self.op(
                op="produce_unsupported_version",
                client_id=cid,
                apis=["ApiVersions", "Metadata"],
                topic=topic,
                codec="none",
                detail={
                    "api_version": "0.10.0",
                    "unanswered": {"Produce": 2},
                    "records_in_unanswered_request": 1,
                },
            )
        ) as o:
            producer = KafkaProducer(
                bootstrap_servers=self.plaintext,
                client_id=cid,
                api_version=(0, 10, 0),
                retries=0,
                max_block_ms=4000,
                request_timeout_ms=3000,
                delivery_timeout_ms=4000,
            )
            future = producer.send(topic, value=payload(3000))
            producer.flush(timeout=8)
            producer.close(timeout=3)
            o.records = 0
            o.ok = not future.succeeded()
            o.detail["client_error"] = error_name(future.exception) if future.exception else None

    def produce_missing_topic(self) -> None:
        """A Produce request for a topic that does not exist (auto-create is off).

        Every real producer asks Metadata first and never sends it, so the request is built
        with kafka-python's own protocol classes and sent over its admin connection.
        """
        cid = self.name("kp-raw-produce")
        missing = self.name("kp-no-such-topic")
        with Timed(
            self.op(
                op="produce_raw_missing_topic",
                client_id=cid,
                apis=["Produce"],
                topic=missing,
                codec="none",
                errors=[ExpectedError("Produce", "UNKNOWN_TOPIC_OR_PARTITION")],
                detail={"records_in_request": 3},
            )
        ) as o:
            admin = KafkaAdminClient(
                bootstrap_servers=self.plaintext, client_id=cid, request_timeout_ms=10000
            )
            builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=16384)
            for i in range(3):
                builder.append(int(time.time() * 1000), None, payload(i), [])
            builder.close()
            topic_cls = ProduceRequest.TopicProduceData
            request = ProduceRequest(
                transactional_id=None,
                acks=1,
                timeout_ms=5000,
                topic_data=[
                    topic_cls(
                        name=missing,
                        partition_data=[
                            topic_cls.PartitionProduceData(index=0, records=builder.buffer())
                        ],
                    )
                ],
                max_version=9,
            )

            async def send() -> Any:
                node = admin._manager.least_loaded_node()  # no public raw send
                return await admin._manager.send(request, node_id=node)

            response = admin._manager.run(send)
            codes = [p.error_code for t in response.responses for p in t.partition_responses]
            admin.close()
            # The produce "records" of this operation: none were accepted.
            o.records = 0
            o.ok = codes == [3]  # 3 = UNKNOWN_TOPIC_OR_PARTITION
            o.detail["error_codes"] = codes


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__ or "", "kp", sasl=True, per_codec=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    d = Driver(args.prefix, args.plaintext, args.sasl, args.per_codec)
    try:
        d.admin()
        d.produce_codecs()
        d.consume()
        d.sasl_scram()
        d.admin_after()
        d.old_protocol()
        d.produce_missing_topic()
        d.produce_unsupported_version()
    finally:
        d.ledger.write(args.ledger)
    failed = [(o.op, o.detail.get("client_error")) for o in d.ledger.operations if not o.ok]
    if failed:
        print(f"kafka-python driver: operations not as expected: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
