"""confluent-kafka (librdkafka) traffic driver.

Runs against the test bed broker: admin, produce with every codec, idempotent and
transactional produce (commit and abort), a classic and a KIP-848 consumer group with offset
commits, SASL PLAIN and SCRAM-SHA-256, and deliberate errors. Every client gets its own
client.id so a test can find that client's request/response pairs in a capture.

    python -m scripts.testbed.confluent_driver --prefix mix --ledger out.json
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from scripts.testbed.ledger import (
    CLASSIC_CONSUMER_APIS,
    KIP848_CONSUMER_APIS,
    ExpectedError,
    Ledger,
    Operation,
    Timed,
    driver_parser,
)

CODECS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENT = "confluent-kafka"


def payload(i: int) -> bytes:
    # Repetitive text: librdkafka sends a batch uncompressed when compression would not
    # shrink it, and the test needs every codec on the wire.
    return (f"record {i:05d} " + "kafka-dissector " * 12).encode()


def base_conf(bootstrap: str, client_id: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "broker.address.family": "v4",
        "socket.connection.setup.timeout.ms": 5000,
    }


def sasl_conf(mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def wait_futures(futures: dict[Any, Any], timeout: float) -> dict[Any, str | None]:
    """Kafka error name (or None) per admin future."""
    out: dict[Any, str | None] = {}
    for key, fut in futures.items():
        try:
            fut.result(timeout=timeout)
            out[key] = None
        except KafkaException as exc:
            out[key] = exc.args[0].name()
    return out


def produce(
    conf: dict[str, Any], topic: str, count: int, timeout: float, start: int = 0
) -> tuple[int, list[str]]:
    """Produce `count` records; returns (acknowledged, delivery error names)."""
    acked = 0
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(err.name())

    producer = Producer(conf)
    for i in range(start, start + count):
        producer.produce(topic, value=payload(i), key=f"k{i % 7}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    producer.flush(timeout)
    return acked, errors


def consume(
    consumer: Consumer,
    expected: int,
    timeout: float,
    stop: Callable[[Counter[str]], bool] | None = None,
) -> tuple[Counter[str], list[str]]:
    """Poll until `expected` records arrived or `timeout` passed; records per topic."""
    counts: Counter[str] = Counter()
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sum(counts.values()) < expected:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            errors.append(msg.error().name())
            if stop is not None and stop(counts):
                break
            continue
        counts[msg.topic()] += 1
    return counts, errors


class Driver:
    def __init__(self, prefix: str, plaintext: str, sasl: str, per_codec: int) -> None:
        self.prefix = prefix
        self.plaintext = plaintext
        self.sasl = sasl
        self.plaintext_port = int(plaintext.rsplit(":", 1)[1])
        self.sasl_port = int(sasl.rsplit(":", 1)[1])
        self.per_codec = per_codec
        self.ledger = Ledger(
            driver=CLIENT,
            clients={
                "confluent-kafka": confluent_kafka.__version__,
                "librdkafka": confluent_kafka.libversion()[0],
            },
        )

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def op(self, **kw: Any) -> Operation:
        kw.setdefault("port", self.plaintext_port)
        return self.ledger.add(Operation(client=CLIENT, **kw))

    # ------------------------------------------------------------------ admin

    def admin_setup(self) -> None:
        cid = self.name("cfk-admin")
        admin = AdminClient(base_conf(self.plaintext, cid))
        topics = [self.name(f"codec-{c}") for c in CODECS]
        topics += [self.name(s) for s in ("idempotent", "txn", "sasl", "admin")]
        with Timed(self.op(op="create_topics", client_id=cid, apis=["CreateTopics"])) as o:
            res = wait_futures(admin.create_topics([NewTopic(t, 1, 1) for t in topics]), 30)
            o.ok = all(v is None for v in res.values())
            o.detail = {"topics": topics}
        # Creating one again fails on purpose: TOPIC_ALREADY_EXISTS inside CreateTopics.
        with Timed(
            self.op(
                op="create_existing_topic",
                client_id=cid,
                apis=["CreateTopics"],
                topic=topics[0],
                errors=[ExpectedError("CreateTopics", "TOPIC_ALREADY_EXISTS")],
            )
        ) as o:
            res = wait_futures(admin.create_topics([NewTopic(topics[0], 1, 1)]), 30)
            o.ok = res[topics[0]] == "TOPIC_ALREADY_EXISTS"
            o.detail = {"client_error": res[topics[0]]}
        self.admin_topics_ops(admin, cid, self.name("admin"))

    def admin_topics_ops(self, admin: AdminClient, cid: str, topic: str) -> None:
        with Timed(
            self.op(op="create_partitions", client_id=cid, apis=["CreatePartitions"], topic=topic)
        ) as o:
            res = wait_futures(admin.create_partitions([NewPartitions(topic, 3)]), 30)
            o.ok = res[topic] is None
            o.detail = {"new_total": 3}
        resource = ConfigResource(ResourceType.TOPIC, topic)
        with Timed(
            self.op(op="describe_configs", client_id=cid, apis=["DescribeConfigs"], topic=topic)
        ) as o:
            res = wait_futures(admin.describe_configs([resource]), 30)
            o.ok = all(v is None for v in res.values())
        alter = ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with Timed(
            self.op(
                op="alter_configs", client_id=cid, apis=["IncrementalAlterConfigs"], topic=topic
            )
        ) as o:
            res = wait_futures(admin.incremental_alter_configs([alter]), 30)
            o.ok = all(v is None for v in res.values())
        binding = AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        any_filter = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        with Timed(self.op(op="create_acls", client_id=cid, apis=["CreateAcls"], topic=topic)) as o:
            res = wait_futures(admin.create_acls([binding]), 30)
            o.ok = all(v is None for v in res.values())
        with Timed(self.op(op="describe_acls", client_id=cid, apis=["DescribeAcls"])) as o:
            try:
                found = admin.describe_acls(any_filter).result(timeout=30)
                o.detail = {"acls": len(found)}
            except KafkaException as exc:
                o.ok = False
                o.detail = {"client_error": exc.args[0].name()}
        topic_filter = AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        with Timed(self.op(op="delete_acls", client_id=cid, apis=["DeleteAcls"], topic=topic)) as o:
            res = wait_futures(admin.delete_acls([topic_filter]), 30)
            o.ok = all(v is None for v in res.values())
        # librdkafka answers describe_cluster from a Metadata request, not DescribeCluster.
        with Timed(self.op(op="describe_cluster", client_id=cid, apis=["Metadata"])) as o:
            try:
                desc = admin.describe_cluster(request_timeout=30).result(timeout=30)
                o.detail = {"brokers": len(desc.nodes)}
            except KafkaException as exc:
                o.ok = False
                o.detail = {"client_error": exc.args[0].name()}
        with Timed(
            self.op(op="delete_topics", client_id=cid, apis=["DeleteTopics"], topic=topic)
        ) as o:
            res = wait_futures(admin.delete_topics([topic]), 30)
            o.ok = res[topic] is None

    # ------------------------------------------------------------------ produce

    def produce_codecs(self) -> None:
        for codec in CODECS:
            cid = self.name(f"cfk-produce-{codec}")
            topic = self.name(f"codec-{codec}")
            conf = base_conf(self.plaintext, cid) | {"compression.type": codec, "linger.ms": 20}
            with Timed(
                self.op(op="produce", client_id=cid, apis=["Produce"], topic=topic, codec=codec)
            ) as o:
                acked, errors = produce(conf, topic, self.per_codec, 30)
                o.records = acked
                o.ok = acked == self.per_codec and not errors
                o.detail = {"sent": self.per_codec, "delivery_errors": errors}

    def produce_idempotent(self) -> None:
        cid = self.name("cfk-idempotent")
        topic = self.name("idempotent")
        conf = base_conf(self.plaintext, cid) | {
            "enable.idempotence": True,
            "compression.type": "zstd",
        }
        with Timed(
            self.op(
                op="produce_idempotent",
                client_id=cid,
                apis=["InitProducerId", "Produce"],
                topic=topic,
                codec="zstd",
            )
        ) as o:
            acked, errors = produce(conf, topic, 30, 30)
            o.records = acked
            o.ok = acked == 30 and not errors

    def produce_transactional(self) -> None:
        cid = self.name("cfk-txn")
        topic = self.name("txn")
        conf = base_conf(self.plaintext, cid) | {
            "transactional.id": self.name("txn-id"),
            "compression.type": "lz4",
            "linger.ms": 20,
        }
        producer = Producer(conf)
        acked = 0

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            nonlocal acked
            if err is None:
                acked += 1

        apis = ["FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "Produce", "EndTxn"]
        for outcome, count, start in (("commit", 20, 0), ("abort", 10, 20)):
            with Timed(
                self.op(
                    op=f"produce_txn_{outcome}",
                    client_id=cid,
                    apis=apis,
                    topic=topic,
                    codec="lz4",
                    detail={"outcome": outcome},
                )
            ) as o:
                acked = 0
                if outcome == "commit":
                    producer.init_transactions(30)
                producer.begin_transaction()
                for i in range(start, start + count):
                    producer.produce(topic, value=payload(i), on_delivery=on_delivery)
                producer.flush(30)
                if outcome == "commit":
                    producer.commit_transaction(30)
                else:
                    producer.abort_transaction(30)
                o.records = acked
                o.ok = acked == count

    # ------------------------------------------------------------------ consume

    def consume_group(self, protocol: str, topics: list[str], expected: int) -> None:
        cid = self.name(f"cfk-consume-{protocol}")
        group = self.name(f"group-{protocol}")
        conf = base_conf(self.plaintext, cid) | {
            "group.id": group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
        apis = list(CLASSIC_CONSUMER_APIS if protocol == "classic" else KIP848_CONSUMER_APIS)
        with Timed(
            self.op(
                op="consume",
                client_id=cid,
                apis=apis,
                group_id=group,
                group_protocol=protocol,
                detail={"topics": topics},
            )
        ) as o:
            consumer = Consumer(conf)
            consumer.subscribe(topics)
            counts, errors = consume(consumer, expected, 45)
            committed = consumer.commit(asynchronous=False)
            consumer.close()
            o.records = sum(counts.values())
            o.ok = o.records == expected
            o.detail |= {
                "per_topic": dict(counts),
                "errors": errors,
                "committed_partitions": len(committed or []),
            }

    def group_admin(self) -> None:
        cid = self.name("cfk-group-admin")
        admin = AdminClient(base_conf(self.plaintext, cid))
        groups = [self.name("group-classic"), self.name("group-consumer")]
        with Timed(self.op(op="list_groups", client_id=cid, apis=["ListGroups"])) as o:
            listed = admin.list_consumer_groups(request_timeout=30).result(timeout=30)
            names = sorted(g.group_id for g in listed.valid)
            o.ok = all(g in names for g in groups)
            o.detail = {"groups": names}
        with Timed(
            self.op(
                op="describe_groups",
                client_id=cid,
                apis=["DescribeGroups", "ConsumerGroupDescribe"],
                detail={"groups": groups},
            )
        ) as o:
            res = wait_futures(admin.describe_consumer_groups(groups, request_timeout=30), 30)
            o.ok = all(v is None for v in res.values())
        with Timed(
            self.op(
                op="list_group_offsets", client_id=cid, apis=["OffsetFetch"], group_id=groups[0]
            )
        ) as o:
            from confluent_kafka import ConsumerGroupTopicPartitions

            res = wait_futures(
                admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(groups[0])]), 30
            )
            o.ok = all(v is None for v in res.values())

    # ------------------------------------------------------------------ SASL

    def sasl_ok(self) -> None:
        topic = self.name("sasl")
        cid = self.name("cfk-sasl-plain")
        conf = base_conf(self.sasl, cid) | sasl_conf("PLAIN", "alice", "alice-secret")
        conf |= {"compression.type": "snappy"}
        with Timed(
            self.op(
                op="produce_sasl_plain",
                client_id=cid,
                port=self.sasl_port,
                apis=["ApiVersions", "SaslHandshake", "SaslAuthenticate", "Produce"],
                topic=topic,
                codec="snappy",
                detail={"mechanism": "PLAIN", "user": "alice"},
            )
        ) as o:
            acked, errors = produce(conf, topic, 10, 30)
            o.records = acked
            o.ok = acked == 10 and not errors
        cid = self.name("cfk-sasl-scram")
        group = self.name("group-scram")
        conf = base_conf(self.sasl, cid) | sasl_conf("SCRAM-SHA-256", "bob", "bob-secret")
        conf |= {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        with Timed(
            self.op(
                op="consume_sasl_scram",
                client_id=cid,
                port=self.sasl_port,
                apis=["ApiVersions", "SaslHandshake", "SaslAuthenticate", "Fetch"],
                topic=topic,
                group_id=group,
                group_protocol="classic",
                detail={"mechanism": "SCRAM-SHA-256", "user": "bob"},
            )
        ) as o:
            consumer = Consumer(conf)
            consumer.subscribe([topic])
            counts, errors = consume(consumer, 10, 30)
            consumer.close()
            o.records = counts[topic]
            o.ok = o.records == 10
            o.detail |= {"errors": errors}

    # ------------------------------------------------------------------ errors

    def errors(self) -> None:
        # Wrong password: the broker answers SaslAuthenticate with SASL_AUTHENTICATION_FAILED.
        for mechanism, user in (("PLAIN", "alice"), ("SCRAM-SHA-256", "bob")):
            cid = self.name(f"cfk-badpass-{mechanism.lower()}")
            conf = base_conf(self.sasl, cid) | sasl_conf(mechanism, user, "wrong-password")
            with Timed(
                self.op(
                    op="sasl_wrong_password",
                    client_id=cid,
                    port=self.sasl_port,
                    apis=["SaslHandshake", "SaslAuthenticate"],
                    errors=[ExpectedError("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED")],
                    detail={"mechanism": mechanism, "user": user},
                )
            ) as o:
                admin = AdminClient(conf | {"retries": 0, "reconnect.backoff.ms": 10000})
                try:
                    admin.list_topics(timeout=1.5)
                    o.ok = False
                    o.detail["client_error"] = None
                except KafkaException as exc:
                    o.detail["client_error"] = exc.args[0].name()
                    o.ok = True
                del admin
        # Missing topic with auto-create off: the Metadata response says so and librdkafka
        # fails the message without ever sending a Produce for it.
        cid = self.name("cfk-missing-topic")
        missing = self.name("no-such-topic")
        conf = base_conf(self.plaintext, cid) | {
            "message.timeout.ms": 3000,
            "topic.metadata.propagation.max.ms": 1000,
        }
        with Timed(
            self.op(
                op="produce_missing_topic",
                client_id=cid,
                apis=["Metadata"],
                topic=missing,
                errors=[ExpectedError("Metadata", "UNKNOWN_TOPIC_OR_PARTITION")],
            )
        ) as o:
            acked, errors = produce(conf, missing, 1, 10)
            o.records = 0
            o.ok = acked == 0 and bool(errors)
            o.detail = {"delivery_errors": errors}
        # Fetch past the end with auto.offset.reset=error: OFFSET_OUT_OF_RANGE.
        cid = self.name("cfk-out-of-range")
        topic = self.name("codec-none")
        conf = base_conf(self.plaintext, cid) | {
            "group.id": self.name("group-out-of-range"),
            "auto.offset.reset": "error",
            "enable.auto.commit": False,
        }
        with Timed(
            self.op(
                op="fetch_out_of_range",
                client_id=cid,
                apis=["Fetch"],
                topic=topic,
                errors=[ExpectedError("Fetch", "OFFSET_OUT_OF_RANGE")],
                detail={"offset": 100_000},
            )
        ) as o:
            consumer = Consumer(conf)
            consumer.assign([TopicPartition(topic, 0, 100_000)])
            counts, errors = consume(consumer, 1, 15, stop=lambda _c: True)
            consumer.close()
            o.records = sum(counts.values())
            o.ok = o.records == 0 and bool(errors)
            o.detail["client_errors"] = errors


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__ or "", "cfk", sasl=True, per_codec=40)
    parser.add_argument(
        "--parts",
        default="admin,produce,consume,sasl,errors",
        help="comma-separated subset of admin,produce,consume,sasl,errors",
    )
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    d = Driver(args.prefix, args.plaintext, args.sasl, args.per_codec)
    try:
        d.admin_setup()  # topics every other part needs
        if "produce" in parts:
            d.produce_codecs()
            d.produce_idempotent()
            d.produce_transactional()
        if "consume" in parts:
            codec_topics = [d.name(f"codec-{c}") for c in CODECS]
            d.consume_group(
                "classic", [*codec_topics, d.name("txn")], d.per_codec * len(CODECS) + 20
            )
            d.consume_group(
                "consumer", [d.name("codec-gzip"), d.name("codec-zstd")], 2 * d.per_codec
            )
            d.group_admin()
        if "sasl" in parts:
            d.sasl_ok()
        if "errors" in parts:
            d.errors()
    finally:
        d.ledger.write(args.ledger)
    failed = [o.op for o in d.ledger.operations if not o.ok]
    if failed:
        print(f"confluent driver: operations not as expected: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
