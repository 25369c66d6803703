"""Kafka over TLS: a small workload through the test bed's SSL and SASL_SSL listeners,
recorded with the clients' TLS key log, for the TLS decryption tests.

    scripts/kafka-broker start      # SSL 9095, SASL_SSL 9096 (KAFKA_TLS_KEYLOG=F: broker keys)
    python -m scripts.testbed.tls_driver --name tls13-kafka-python --client kafka-python \\
        --out-dir captures/tls [--tls 1.2] [--sasl]

Writes NAME.pcapng (dumpcap on lo, the TLS ports only), NAME.keys (the client's NSS key
log: Python's ``ssl.SSLContext.keylog_filename``) and NAME.drivers.json (the ledger:
what the client did and saw, errors provoked on purpose). ``--tls 1.2`` caps the client
at TLS 1.2 with AES-GCM suites; the suite of TLS 1.3 is the broker's choice
(``KAFKA_SSL_CIPHER_SUITES``). The Java client takes the broker's TLS key usage limit
(``KAFKA_TLS_KEY_LIMIT``, the ``KAFKA_TLS_SECURITY_FILE`` of ``kafka-broker env``) when it
has one, so that both ends send KeyUpdates. ``--plaintext-port`` runs the same workload on a
PLAINTEXT listener instead (no TLS: the plaintext oracle capture).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import time
from pathlib import Path
from typing import Any

from scripts.testbed.capture import Capture
from scripts.testbed.ledger import ExpectedError, Ledger, Operation, Timed

RECORDS = 10
# OpenSSL's SSL_OP_NO_EXTENDED_MASTER_SECRET (3.0+; Python names no constant for it).
OP_NO_EXTENDED_MASTER_SECRET = 0x1


def tls_context(
    cafile: str, keylog: Path, version: str, ciphers: str, ems: bool = True
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False  # the test CA signs for localhost / 127.0.0.1 only
    ctx.keylog_filename = str(keylog)
    if version == "1.2":
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_ciphers(ciphers)
        if not ems:
            ctx.options |= OP_NO_EXTENDED_MASTER_SECRET
    return ctx


class Workload:
    """Admin, produce, consume, and one error on purpose, with one client library."""

    def __init__(self, args: argparse.Namespace, ctx: ssl.SSLContext | None) -> None:
        self.args = args
        self.ctx = ctx
        self.client = args.client
        self.topic = f"{args.name}-topic"
        self.ledger = Ledger(driver="tls_driver", clients={})
        if ctx is None:
            self.protocol = "PLAINTEXT"
        else:
            self.protocol = "SASL_SSL" if args.sasl else "SSL"

    def settings(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "bootstrap_servers": f"127.0.0.1:{self.args.port}",
            "security_protocol": self.protocol,
        }
        if self.ctx is not None:
            kw["ssl_context"] = self.ctx
        if self.args.sasl:
            kw.update(
                sasl_mechanism="SCRAM-SHA-256",
                sasl_plain_username="bob",
                sasl_plain_password="bob-secret",
            )
        return kw

    @property
    def records(self) -> int:
        return int(self.args.records)

    def value(self, i: int) -> bytes:
        """Record i: its number, padded to --record-size (random bytes: gzip cannot shrink
        the bulk capture of the benchmark)."""
        head = b"record-%d" % i
        size = int(self.args.record_size)
        return head + os.urandom(max(size - len(head), 0))

    def line(self, i: int) -> str:
        """Record i as a console producer's line: its number, padded to --record-size with
        random hex digits."""
        head = f"record-{i}"
        pad = max(int(self.args.record_size) - len(head) - 1, 0)
        return head if pad == 0 else f"{head}-{os.urandom(pad // 2 + 1).hex()[:pad]}"

    def op(self, op: str, client_id: str, apis: list[str], **kw: Any) -> Operation:
        return self.ledger.add(
            Operation(
                op=op, client=self.client, client_id=client_id, port=self.args.port, apis=apis, **kw
            )
        )

    def run(self) -> Ledger:
        if self.client == "kafka-python":
            self.kafka_python()
        elif self.client == "aiokafka":
            asyncio.run(self.aiokafka())
        elif self.client == "java":
            self.java()
        else:
            self.confluent()
        return self.ledger

    def java(self) -> None:
        """Kafka's console producer and consumer (the Java client), their TLS secrets
        written by the extract-tls-secrets javaagent (JAVA_TOOL_OPTIONS) into the key log."""
        from scripts.testbed.java_driver import run_tool

        env = broker_env()
        props = Path(self.args.out_dir) / f"{self.args.name}.client.properties"
        lines = [
            f"security.protocol={self.protocol}",
            f"ssl.truststore.location={env['KAFKA_TLS_TRUSTSTORE']}",
            f"ssl.truststore.password={env['KAFKA_TLS_PASSWORD']}",
            "ssl.truststore.type=PKCS12",
            "ssl.endpoint.identification.algorithm=",
        ]
        if self.args.tls == "1.2":
            lines += ["ssl.protocol=TLSv1.2", "ssl.enabled.protocols=TLSv1.2"]
        props.write_text("\n".join(lines) + "\n")
        server = ["--bootstrap-server", f"127.0.0.1:{self.args.port}"]
        try:
            prod_id = f"{self.args.name}-producer"
            op = self.op("produce", prod_id, ["Produce"], topic=self.topic, codec="none")
            with Timed(op):
                lines_in = "".join(f"{self.line(i)}\n" for i in range(self.records))
                done = run_tool(
                    "org.apache.kafka.tools.ConsoleProducer",
                    [
                        *server,
                        "--topic",
                        self.topic,
                        "--command-config",
                        str(props),
                        "--producer-property",
                        f"client.id={prod_id}",
                    ],
                    stdin=lines_in,
                    timeout=120,
                )
                op.ok = done.returncode == 0
                op.records = self.records if op.ok else 0
            cons_id = f"{self.args.name}-consumer"
            group = f"{self.args.name}-group"
            fetch: list[str] = []
            if self.args.fetch_bytes:
                fetch = [
                    *("--consumer-property", f"max.partition.fetch.bytes={self.args.fetch_bytes}"),
                    *("--consumer-property", f"fetch.max.bytes={self.args.fetch_bytes}"),
                ]
            op = self.op("consume", cons_id, ["Fetch"], topic=self.topic, group_id=group)
            with Timed(op):
                done = run_tool(
                    "org.apache.kafka.tools.consumer.ConsoleConsumer",
                    [
                        *server,
                        "--topic",
                        self.topic,
                        "--from-beginning",
                        "--group",
                        group,
                        "--max-messages",
                        str(self.records),
                        "--command-config",
                        str(props),
                        "--consumer-property",
                        f"client.id={cons_id}",
                        *fetch,
                    ],
                    timeout=120,
                )
                op.records = sum(1 for ln in done.stdout.splitlines() if ln.startswith("record-"))
        finally:
            props.unlink()

    def confluent(self) -> None:
        """librdkafka has no key log of its own: decoded with the broker-side key log."""
        from confluent_kafka import Consumer, Producer

        conf: dict[str, Any] = {
            "bootstrap.servers": f"127.0.0.1:{self.args.port}",
            "security.protocol": self.protocol,
        }
        if self.protocol != "PLAINTEXT":
            conf.update(
                {
                    "ssl.ca.location": self.args.cafile_path,
                    "ssl.endpoint.identification.algorithm": "none",
                }
            )
        if self.args.sasl:
            conf.update(
                {
                    "sasl.mechanism": "SCRAM-SHA-256",
                    "sasl.username": "bob",
                    "sasl.password": "bob-secret",
                }
            )
        prod_id = f"{self.args.name}-producer"
        op = self.op("produce", prod_id, ["Produce"], topic=self.topic, codec="lz4")
        with Timed(op):
            producer = Producer({**conf, "client.id": prod_id, "compression.type": "lz4"})
            acked: list[int] = []
            for i in range(RECORDS):
                producer.produce(
                    self.topic,
                    b"record-%d" % i,
                    on_delivery=lambda err, _m: acked.append(err is None),
                )
            producer.flush(30)
            op.records = sum(acked)
        cons_id = f"{self.args.name}-consumer"
        group = f"{self.args.name}-group"
        op = self.op("consume", cons_id, ["Fetch"], topic=self.topic, group_id=group)
        with Timed(op):
            consumer = Consumer(
                {**conf, "client.id": cons_id, "group.id": group, "auto.offset.reset": "earliest"}
            )
            consumer.subscribe([self.topic])
            got = 0
            deadline = time.monotonic() + 20
            while got < RECORDS and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and m.error() is None:
                    got += 1
            consumer.close()
            op.records = got

    def create_topic(self) -> None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin_id = f"{self.args.name}-admin"
        with Timed(self.op("create_topic", admin_id, ["CreateTopics"], topic=self.topic)):
            admin = KafkaAdminClient(client_id=admin_id, **self.settings())
            admin.create_topics([NewTopic(self.topic, 1, 1)])
            admin.close()

    def kafka_python(self) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
        from kafka.admin import NewTopic
        from kafka.errors import KafkaError

        admin_id = f"{self.args.name}-admin"
        with Timed(self.op("create_topic", admin_id, ["CreateTopics"], topic=self.topic)):
            admin = KafkaAdminClient(client_id=admin_id, **self.settings())
            admin.create_topics([NewTopic(self.topic, 1, 1)])
        op = self.op(
            "create_existing_topic",
            admin_id,
            ["CreateTopics"],
            topic=self.topic,
            errors=[ExpectedError("CreateTopics", "TOPIC_ALREADY_EXISTS")],
        )
        with Timed(op):
            try:
                admin.create_topics([NewTopic(self.topic, 1, 1)])
                op.ok = False
            except KafkaError as exc:
                op.detail["error"] = type(exc).__name__
        admin.close()
        prod_id = f"{self.args.name}-producer"
        codec = self.args.codec
        op = self.op("produce", prod_id, ["Produce"], topic=self.topic, codec=codec)
        with Timed(op):
            producer = KafkaProducer(
                client_id=prod_id,
                compression_type=None if codec == "none" else codec,
                **self.settings(),
            )
            acked = [producer.send(self.topic, self.value(i)) for i in range(self.records)]
            producer.flush(120)
            op.records = sum(1 for f in acked if f.succeeded())
            producer.close(10)
        cons_id = f"{self.args.name}-consumer"
        op = self.op(
            "consume", cons_id, ["Fetch"], topic=self.topic, group_id=f"{self.args.name}-group"
        )
        with Timed(op):
            fetch: dict[str, int] = {}
            if self.args.fetch_bytes:
                # Many Fetch requests instead of one that takes every record.
                fetch = {
                    "max_partition_fetch_bytes": self.args.fetch_bytes,
                    "fetch_max_bytes": self.args.fetch_bytes,
                }
            consumer = KafkaConsumer(
                self.topic,
                client_id=cons_id,
                group_id=f"{self.args.name}-group",
                auto_offset_reset="earliest",
                consumer_timeout_ms=8000,
                **fetch,
                **self.settings(),
            )
            got = 0
            for _ in consumer:
                got += 1
                if got >= self.records:
                    break
            consumer.commit()
            consumer.close()
            op.records = got

    async def aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        kw = self.settings()
        admin_id = f"{self.args.name}-admin"
        with Timed(self.op("create_topic", admin_id, ["CreateTopics"], topic=self.topic)):
            admin = AIOKafkaAdminClient(client_id=admin_id, **kw)
            await admin.start()
            await admin.create_topics([NewTopic(self.topic, 1, 1)])
            await admin.close()
        prod_id = f"{self.args.name}-producer"
        op = self.op("produce", prod_id, ["Produce"], topic=self.topic, codec="gzip")
        with Timed(op):
            producer = AIOKafkaProducer(client_id=prod_id, compression_type="gzip", **kw)
            await producer.start()
            sent = [await producer.send(self.topic, b"record-%d" % i) for i in range(RECORDS)]
            done = [await f for f in sent]
            await producer.stop()
            op.records = len(done)
        cons_id = f"{self.args.name}-consumer"
        op = self.op(
            "consume", cons_id, ["Fetch"], topic=self.topic, group_id=f"{self.args.name}-group"
        )
        with Timed(op):
            consumer = AIOKafkaConsumer(
                self.topic,
                client_id=cons_id,
                group_id=f"{self.args.name}-group",
                auto_offset_reset="earliest",
                **kw,
            )
            await consumer.start()
            got = 0
            deadline = time.monotonic() + 15
            while got < RECORDS and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=1000)
                got += sum(len(v) for v in batch.values())
            await consumer.commit()
            await consumer.stop()
            op.records = got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument(
        "--client",
        choices=("kafka-python", "aiokafka", "confluent-kafka", "java"),
        default="kafka-python",
    )
    parser.add_argument(
        "--ciphers", default="ECDHE+AESGCM", help="OpenSSL cipher list for --tls 1.2"
    )
    parser.add_argument("--out-dir", type=Path, default=Path("captures/tls"))
    parser.add_argument("--tls", choices=("1.2", "1.3"), default="1.3")
    parser.add_argument("--sasl", action="store_true", help="SASL_SSL with SCRAM-SHA-256 (bob)")
    parser.add_argument("--cafile", help="the test bed's CA (default: from kafka-broker env)")
    parser.add_argument("--port", type=int, help="broker port (default: SSL 9095, SASL_SSL 9096)")
    parser.add_argument("--plaintext", action="store_true", help="no TLS: the plaintext oracle")
    parser.add_argument("--records", type=int, default=RECORDS, help="records (kafka-python, java)")
    parser.add_argument("--record-size", type=int, default=0, help="pad records to this many bytes")
    parser.add_argument("--codec", default="gzip", help="kafka-python's producer compression")
    parser.add_argument(
        "--fetch-bytes",
        type=int,
        default=0,
        help="the consumer's bytes per Fetch (kafka-python, java)",
    )
    parser.add_argument(
        "--no-ems", action="store_true", help="TLS 1.2 without the extended master secret"
    )
    args = parser.parse_args(argv)
    env = broker_env()
    if args.port is None:
        key = (
            "KAFKA_PLAINTEXT_PORT"
            if args.plaintext
            else ("KAFKA_SASL_SSL_PORT" if args.sasl else "KAFKA_SSL_PORT")
        )
        args.port = int(env[key])
    cafile = args.cafile or env["KAFKA_TLS_CA"]
    args.cafile_path = cafile
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    keylog = out / f"{args.name}.keys"
    keylog.unlink(missing_ok=True)
    ctx = (
        None
        if args.plaintext
        else tls_context(cafile, keylog, args.tls, args.ciphers, ems=not args.no_ems)
    )
    work = Workload(args, ctx)
    own_admin = args.client in ("confluent-kafka", "java") and not args.plaintext
    if own_admin:
        # The topic is made first by kafka-python over the same listener (its own
        # connections are in the capture too, with their key log lines).
        admin = Workload(argparse.Namespace(**{**vars(args), "client": "kafka-python"}), ctx)
        work.ledger = admin.ledger
    if args.client == "java":
        # The agent appends the Java client's secrets to the same key log.
        agent = next(Path(env["KAFKA_TLS_AGENT_DIR"]).glob("extract-tls-secrets-*.jar"))
        os.environ["JAVA_TOOL_OPTIONS"] = f"-javaagent:{agent}={keylog.resolve()}"
        if env.get("KAFKA_TLS_SECURITY_FILE"):
            # The broker's TLS key usage limit (KAFKA_TLS_KEY_LIMIT) for the Java client
            # too: it sends KeyUpdates of its own.
            os.environ["JAVA_TOOL_OPTIONS"] += (
                f" -Djava.security.properties={env['KAFKA_TLS_SECURITY_FILE']}"
            )
    with Capture(out / f"{args.name}.pcapng", ports=(args.port,)):
        if own_admin:
            admin.create_topic()
        ledger = work.run()
    ledger.clients = client_versions(args.client)
    ledger.write(out / f"{args.name}.drivers.json")
    return 0


def broker_env() -> dict[str, str]:
    import subprocess

    text = subprocess.run(
        ["scripts/kafka-broker", "env"], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def client_versions(client: str) -> dict[str, str]:
    from importlib.metadata import version

    if client == "java":
        return {"kafka-tools": broker_env()["KAFKA_TOOLS_VERSION"]}
    dist = {
        "kafka-python": "kafka-python",
        "aiokafka": "aiokafka",
        "confluent-kafka": "confluent-kafka",
    }[client]
    return {client: version(dist), "openssl": ssl.OPENSSL_VERSION}


if __name__ == "__main__":
    raise SystemExit(main())
