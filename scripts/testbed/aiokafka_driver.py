"""aiokafka traffic driver: admin, produce (gzip/snappy/lz4/zstd), a transactional commit
and abort, and a consumer group, all from asyncio.

aiokafka negotiates older API versions than librdkafka or the Java client.

    python -m scripts.testbed.aiokafka_driver --prefix mix --ledger out.json
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from scripts.testbed.ledger import CLASSIC_CONSUMER_APIS, Ledger, Operation, Timed, driver_parser

CLIENT = "aiokafka"
CODECS: tuple[str, ...] = ("gzip", "snappy", "lz4", "zstd")


def payload(i: int) -> bytes:
    return (f"aio record {i:05d} " + "asyncio all the way down " * 8).encode()


class Driver:
    def __init__(self, prefix: str, plaintext: str, per_codec: int) -> None:
        self.prefix = prefix
        self.plaintext = plaintext
        self.port = int(plaintext.rsplit(":", 1)[1])
        self.per_codec = per_codec
        self.ledger = Ledger(driver=CLIENT, clients={"aiokafka": aiokafka.__version__})

    def name(self, suffix: str) -> str:
        return f"{self.prefix}-{suffix}"

    def op(self, **kw: Any) -> Operation:
        kw.setdefault("port", self.port)
        return self.ledger.add(Operation(client=CLIENT, **kw))

    async def admin(self) -> None:
        cid = self.name("aio-admin")
        topics = [self.name(f"aio-{c}") for c in CODECS] + [self.name("aio-txn")]
        admin = AIOKafkaAdminClient(bootstrap_servers=self.plaintext, client_id=cid)
        await admin.start()
        try:
            with Timed(
                self.op(
                    op="create_topics",
                    client_id=cid,
                    apis=["CreateTopics"],
                    detail={"topics": topics},
                )
            ) as o:
                await admin.create_topics([NewTopic(t, 1, 1) for t in topics])
            with Timed(self.op(op="describe_cluster", client_id=cid, apis=["Metadata"])) as o:
                desc = await admin.describe_cluster()
                o.detail = {"brokers": len(desc.get("brokers", []))}
        finally:
            await admin.close()
        # Leader metadata must reach the broker's cache before producers ask for it.
        await asyncio.sleep(0.5)

    async def produce(self) -> None:
        for codec in CODECS:
            cid = self.name(f"aio-produce-{codec}")
            topic = self.name(f"aio-{codec}")
            with Timed(
                self.op(op="produce", client_id=cid, apis=["Produce"], topic=topic, codec=codec)
            ) as o:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.plaintext,
                    client_id=cid,
                    compression_type=codec,
                    linger_ms=20,
                )
                await producer.start()
                try:
                    futs = [
                        await producer.send(topic, value=payload(i), key=f"k{i}".encode())
                        for i in range(self.per_codec)
                    ]
                    await producer.flush()
                    results = await asyncio.gather(*futs, return_exceptions=True)
                finally:
                    await producer.stop()
                o.records = sum(1 for r in results if not isinstance(r, BaseException))
                o.ok = o.records == self.per_codec

    async def transactional(self) -> None:
        cid = self.name("aio-txn")
        topic = self.name("aio-txn")
        producer = AIOKafkaProducer(
            bootstrap_servers=self.plaintext,
            client_id=cid,
            transactional_id=self.name("aio-txn-id"),
            compression_type="gzip",
        )
        await producer.start()
        apis = ["FindCoordinator", "InitProducerId", "AddPartitionsToTxn", "Produce", "EndTxn"]
        try:
            for outcome, count, start in (("commit", 8, 0), ("abort", 4, 8)):
                with Timed(
                    self.op(
                        op=f"produce_txn_{outcome}",
                        client_id=cid,
                        apis=apis,
                        topic=topic,
                        codec="gzip",
                        detail={"outcome": outcome},
                    )
                ) as o:
                    await producer.begin_transaction()
                    futs = [
                        await producer.send(topic, value=payload(i))
                        for i in range(start, start + count)
                    ]
                    results = await asyncio.gather(*futs, return_exceptions=True)
                    if outcome == "commit":
                        await producer.commit_transaction()
                    else:
                        await producer.abort_transaction()
                    o.records = sum(1 for r in results if not isinstance(r, BaseException))
                    o.ok = o.records == count
        finally:
            await producer.stop()

    async def consume(self) -> None:
        cid = self.name("aio-consume")
        group = self.name("aio-group")
        topics = [self.name(f"aio-{c}") for c in CODECS] + [self.name("aio-txn")]
        expected = self.per_codec * len(CODECS) + 8  # the aborted 4 are never delivered
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
            consumer = AIOKafkaConsumer(
                *topics,
                bootstrap_servers=self.plaintext,
                client_id=cid,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                isolation_level="read_committed",
            )
            await consumer.start()
            counts: Counter[str] = Counter()
            try:
                deadline = time.monotonic() + 45
                while time.monotonic() < deadline and sum(counts.values()) < expected:
                    batch = await consumer.getmany(timeout_ms=500)
                    for tp, msgs in batch.items():
                        counts[tp.topic] += len(msgs)
                await consumer.commit()
            finally:
                await consumer.stop()
            o.records = sum(counts.values())
            o.ok = o.records == expected
            o.detail["per_topic"] = dict(counts)


async def run(d: Driver) -> None:
    await d.admin()
    await d.produce()
    await d.transactional()
    await d.consume()


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__ or "", "aio", per_codec=20)
    args = parser.parse_args(argv)
    d = Driver(args.prefix, args.plaintext, args.per_codec)
    try:
        asyncio.run(asyncio.wait_for(run(d), timeout=150))
    finally:
        d.ledger.write(args.ledger)
    failed = [o.op for o in d.ledger.operations if not o.ok]
    if failed:
        print(f"aiokafka driver: operations not as expected: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
