"""Record a large, realistic capture dominated by long-poll Fetch traffic (benchmarks).

    scripts/kafka-broker start
    python -m scripts.testbed.longpoll --out out/longpoll.pcapng --seconds 30
    scripts/kafka-broker stop

The broker port is ``KAFKA_PLAINTEXT_PORT`` (default 9092), as for ``scripts/kafka-broker``.

What runs, all with confluent-kafka (librdkafka) against the PLAINTEXT listener while
dumpcap records loopback:

* a transactional producer committing small transactions at a steady rate,
* an idempotent producer with lz4 and a plain one with zstd,
* consumers in one classic group and one KIP-848 group (read_committed), polling with
  librdkafka's default long-poll settings, so that most Fetch requests wait on the broker
  for ``fetch.wait.max.ms`` and return empty, as on an idle-ish production cluster.

Every loop is bounded by ``--seconds``. The result is tens of thousands of pairs; it is
too large to commit, so benchmarks regenerate it with this script.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from scripts.testbed.capture import Capture

# The test bed broker's plaintext port, as `scripts/kafka-broker` reads it.
PORT = int(os.environ.get("KAFKA_PLAINTEXT_PORT", "9092"))
BOOTSTRAP = f"127.0.0.1:{PORT}"


def _create_topics(names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": BOOTSTRAP, "client.id": "lp-admin"})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
    )
    for f in futures.values():
        try:
            f.result(30)
        except Exception as exc:  # an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def _transactional(topic: str, stop: threading.Event, rate: float) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "client.id": "lp-txn",
            "transactional.id": "lp-txn-1",
            "linger.ms": 2,
        }
    )
    p.init_transactions(30)
    n = 0
    while not stop.is_set():
        p.begin_transaction()
        for _ in range(5):
            p.produce(topic, key=str(n % 97).encode(), value=b"x" * 120)
            n += 1
        p.commit_transaction(30)
        time.sleep(1 / rate)
    p.flush(10)


def _plain(topic: str, codec: str, idempotent: bool, stop: threading.Event, rate: float) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "client.id": f"lp-{codec}",
            "compression.type": codec,
            "enable.idempotence": idempotent,
            "linger.ms": 0,
        }
    )
    n = 0
    while not stop.is_set():
        p.produce(topic, key=str(n % 31).encode(), value=b"y" * 200)
        p.poll(0)
        n += 1
        time.sleep(1 / rate)
    p.flush(10)


def _consumer(
    group: str, protocol: str, topics: list[str], member: int, stop: threading.Event
) -> None:
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": BOOTSTRAP,
        "client.id": f"lp-{group}-{member}",
        "group.id": group,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
    }
    if protocol == "consumer":
        conf["group.protocol"] = "consumer"
    c = Consumer(conf)
    c.subscribe(topics)
    while not stop.is_set():
        c.poll(0.2)
    c.close()


def record(
    out: Path, seconds: float, partitions: int, consumers: int = 3, rate: float = 1.0
) -> Path:
    topics = ["lp-txn", "lp-lz4", "lp-zstd"]
    _create_topics(topics, partitions)
    stop = threading.Event()
    workers = [
        threading.Thread(target=_transactional, args=("lp-txn", stop, 20.0 * rate)),
        threading.Thread(target=_plain, args=("lp-lz4", "lz4", True, stop, 200.0 * rate)),
        threading.Thread(target=_plain, args=("lp-zstd", "zstd", False, stop, 100.0 * rate)),
    ]
    workers += [
        threading.Thread(target=_consumer, args=("lp-classic", "classic", topics, i, stop))
        for i in range(consumers)
    ]
    workers += [
        threading.Thread(target=_consumer, args=("lp-848", "consumer", topics, i, stop))
        for i in range(consumers)
    ]
    with Capture(out, ports=(PORT,)):
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join(60)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument(
        "--consumers", type=int, default=3, help="consumers in each of the two groups"
    )
    parser.add_argument(
        "--rate", type=float, default=1.0, help="producer rates, as a multiple of the defaults"
    )
    args = parser.parse_args(argv)
    path = record(args.out, args.seconds, args.partitions, args.consumers, args.rate)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
