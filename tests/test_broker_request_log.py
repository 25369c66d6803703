"""The broker's request log as the oracle: every request Kafka says it served is a row.

A private broker (own temp dir, own free ports, SASL listener on) runs with
kafka.request.logger at DEBUG (`KAFKA_REQUEST_LOG=1`, see scripts/kafka-broker): one
"Completed request" line per request, written by the broker from its own request header
and response object (parsed by scripts/testbed/request_log.py). dumpcap records loopback
while real clients run a short mixed workload: confluent-kafka (librdkafka) and
kafka-python, on PLAINTEXT and SASL (PLAIN and SCRAM-SHA-256), with a consumer group,
acks=0, a missing topic, an out-of-range fetch and a producer held by a byte-rate quota.

Joined on (broker port, client port, correlation id), the test asserts:
- every request logged on a client listener inside the capture window has a row;
- every row has a logged request, except the known ones, counted by name: the SASL
  exchange and the ApiVersions before it on the SASL port (the broker's authenticator
  answers them, not its request handlers), Envelope, requests cut by a client close;
- api_key, api_version and client_id equal; for answered pairs error_code, error_count
  and throttle_ms equal the broker's response object, and latency_ms is at least the
  broker's totalTimeMs - sendTimeMs (the time from reading the request to starting the
  response is inside the wire time between the two).
A last test breaks the DataFrame on purpose (a row dropped, a version, client, error or
throttle changed) and requires the comparison to name each break.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import dissector
from scripts.testbed.capture import Capture
from scripts.testbed.request_log import LoggedRequest, read_request_log
from tests.conftest import BROKER_START_TIMEOUT_S, BROKER_STOP_TIMEOUT_S, KAFKA_BROKER

pytestmark = [pytest.mark.broker]

CLIENT_LISTENERS = frozenset({"PLAINTEXT", "SASL_PLAINTEXT"})
SASL_APIS = frozenset({"SaslHandshake", "SaslAuthenticate", "SaslToken"})
ANSWERED = frozenset({"ok", "error"})
TOPIC = "oracle-topic"
MISSING_TOPIC = "oracle-missing-topic"
GROUP = "oracle-group"
RECORDS = 40
THROTTLED_CLIENT = "oracle-ck-throttled"
QUOTA_BYTES_PER_S = 1000.0
OP_TIMEOUT_S = 15.0  # any single client step
# The log has microsecond resolution (3 decimals of ms); the capture, microseconds too.
LATENCY_ROUNDING_MS = 0.002


# ---------------------------------------------------------------- the broker


@dataclass(frozen=True)
class Broker:
    dir: Path
    plaintext: int
    sasl: int
    controller: int
    # The SSL and SASL_SSL listeners are not used here, but the script opens them: on
    # free ports too, so that this broker starts beside the session's test-bed broker.
    ssl: int
    sasl_ssl: int

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KAFKA_BROKER_DIR": str(self.dir),
            "KAFKA_PLAINTEXT_PORT": str(self.plaintext),
            "KAFKA_SASL_PORT": str(self.sasl),
            "KAFKA_CONTROLLER_PORT": str(self.controller),
            "KAFKA_SSL_PORT": str(self.ssl),
            "KAFKA_SASL_SSL_PORT": str(self.sasl_ssl),
            "KAFKA_REQUEST_LOG": "1",
        }

    def run(self, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KAFKA_BROKER), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def free_ports(count: int) -> list[int]:
    """Ports the kernel hands out now; held together so they differ."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    missing = [tool for tool in ("java", "mvn", "dumpcap") if shutil.which(tool) is None]
    if missing:
        message = f"the request-log oracle needs {missing}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    plaintext, sasl, controller, ssl, sasl_ssl = free_ports(5)
    b = Broker(tmp_path_factory.mktemp("oracle-broker"), plaintext, sasl, controller, ssl, sasl_ssl)
    try:
        started = b.run("start", timeout=BROKER_START_TIMEOUT_S)
        assert started.returncode == 0, f"broker did not start:\n{started.stderr[-4000:]}"
        yield b
    finally:
        # `stop` signals only the PID its `start` wrote, after checking it is this broker.
        b.run("stop", timeout=BROKER_STOP_TIMEOUT_S)


# ---------------------------------------------------------------- the workload


def ck_conf(broker: Broker, client_id: str, sasl: tuple[str, str, str] | None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": f"127.0.0.1:{broker.sasl if sasl else broker.plaintext}",
        "client.id": client_id,
        "broker.address.family": "v4",
        "socket.connection.setup.timeout.ms": 5000,
    }
    if sasl is not None:
        mechanism, user, password = sasl
        conf |= {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
    return conf


def kp_conf(broker: Broker, client_id: str, sasl: tuple[str, str, str] | None) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap_servers": f"127.0.0.1:{broker.sasl if sasl else broker.plaintext}",
        "client_id": client_id,
        "request_timeout_ms": 10000,
    }
    if sasl is not None:
        mechanism, user, password = sasl
        conf |= {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
    return conf


def kp_admin_setup(broker: Broker) -> None:
    """kafka-python: the topic, and a producer byte-rate quota for one client id."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.protocol.admin import AlterClientQuotasRequest

    admin = KafkaAdminClient(**kp_conf(broker, "oracle-kp-admin", None))
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
        entry = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(
            entries=[
                entry(
                    entity=[
                        entry.EntityData(entity_type="client-id", entity_name=THROTTLED_CLIENT)
                    ],
                    ops=[
                        entry.OpData(
                            key="producer_byte_rate", value=QUOTA_BYTES_PER_S, remove=False
                        )
                    ],
                )
            ],
            validate_only=False,
        )

        async def send() -> Any:
            node = admin._manager.least_loaded_node()  # kafka-python has no public quota call
            return await admin._manager.send(request, node_id=node)

        response = admin._manager.run(send)
        assert [e.error_code for e in response.entries] == [0]
    finally:
        admin.close()


def ck_produce(broker: Broker, client_id: str, size: int, *, probe_missing: bool) -> None:
    from confluent_kafka import Producer

    # linger.ms: the records leave in one Produce request, the burst a quota measures.
    producer = Producer(ck_conf(broker, client_id, None) | {"linger.ms": 100})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=(b"%05d" % i).ljust(size, b"x"))
    assert producer.flush(OP_TIMEOUT_S) == 0
    if probe_missing:
        # A Metadata request naming a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION.
        # Not on the throttled client: the broker mutes a throttled connection, so a
        # request after the burst would wait out the throttle.
        meta = producer.list_topics(MISSING_TOPIC, timeout=5)
        assert meta.topics[MISSING_TOPIC].error is not None


def ck_consume_sasl_plain(broker: Broker) -> None:
    """librdkafka over SASL PLAIN: read the topic, then fetch past its end (an error)."""
    from confluent_kafka import Consumer, TopicPartition

    conf = ck_conf(broker, "oracle-ck-sasl", ("PLAIN", "alice", "alice-secret"))
    consumer = Consumer(
        conf
        | {
            "group.id": "oracle-ck-assign",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = 0
        deadline = time.monotonic() + OP_TIMEOUT_S
        while got < RECORDS and time.monotonic() < deadline:
            got += sum(m.error() is None for m in consumer.consume(RECORDS, timeout=1))
        assert got >= RECORDS
        consumer.assign([TopicPartition(TOPIC, 0, 1_000_000)])
        errors: list[Any] = []
        deadline = time.monotonic() + OP_TIMEOUT_S
        while not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
        assert errors, "an out-of-range fetch must surface as an error"
    finally:
        consumer.close()


def kp_group_scram(broker: Broker) -> None:
    """kafka-python over SASL SCRAM-SHA-256: a classic group reads the topic and commits."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        TOPIC,
        group_id=GROUP,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **kp_conf(broker, "oracle-kp-scram", ("SCRAM-SHA-256", "bob", "bob-secret")),
    )
    try:
        got = 0
        deadline = time.monotonic() + OP_TIMEOUT_S
        while got < RECORDS and time.monotonic() < deadline:
            got += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        assert got >= RECORDS
        consumer.commit()
    finally:
        consumer.close()


def kp_produce_acks0(broker: Broker) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(acks=0, linger_ms=5, **kp_conf(broker, "oracle-kp-acks0", None))
    try:
        for i in range(10):
            producer.send(TOPIC, value=b"acks0-%d" % i)
        producer.flush(timeout=OP_TIMEOUT_S)
    finally:
        producer.close(timeout=10)


def workload(broker: Broker) -> None:
    kp_admin_setup(broker)
    ck_produce(broker, "oracle-ck-producer", size=100, probe_missing=True)
    # The broker's byte rate spans ~10 one-second samples: a burst of 40 times the quota
    # per second is over it, and the Produce response carries throttle_time_ms > 0.
    ck_produce(broker, THROTTLED_CLIENT, size=1000, probe_missing=False)
    ck_consume_sasl_plain(broker)
    kp_group_scram(broker)
    kp_produce_acks0(broker)


# ---------------------------------------------------------------- the join


@dataclass(frozen=True)
class Row:
    """What the comparison needs of one DataFrame row."""

    key: tuple[int, int, int]
    stream: int
    api_key: int | None
    api_name: str
    api_version: int | None
    client_id: str | None
    status: str
    error_code: int | None
    error_count: int | None
    throttle_ms: int | None
    latency_ms: float | None
    request_time: pd.Timestamp


def _opt_int(value: Any) -> int | None:
    return None if pd.isna(value) else int(value)


def rows_of(df: pd.DataFrame) -> list[Row]:
    return [
        Row(
            key=(int(r.broker_port), int(r.client_port), int(r.correlation_id)),
            stream=int(r.stream),
            api_key=_opt_int(r.api_key),
            api_name=str(r.api_name),
            api_version=_opt_int(r.api_version),
            client_id=None if pd.isna(r.client_id) else str(r.client_id),
            status=str(r.status),
            error_code=_opt_int(r.error_code),
            error_count=_opt_int(r.error_count),
            throttle_ms=_opt_int(r.throttle_ms),
            latency_ms=None if pd.isna(r.latency_ms) else float(r.latency_ms),
            request_time=r.request_time,
        )
        for r in df.dropna(subset=["correlation_id"]).itertuples(index=False)
    ]


def mismatches(logged: LoggedRequest, row: Row) -> list[str]:
    """How a row differs from the broker's record of the same request."""
    out: list[str] = []

    def differ(name: str, ours: Any, theirs: Any) -> None:
        if ours != theirs:
            out.append(f"{name}: row {ours!r} != broker {theirs!r}")

    differ("api_key", row.api_key, logged.api_key)
    differ("api_version", row.api_version, logged.api_version)
    differ("client_id", row.client_id, logged.client_id)
    if row.status in ANSWERED:
        differ("error_code", row.error_code, logged.error_code)
        differ("error_count", row.error_count, logged.error_count)
        differ("throttle_ms", row.throttle_ms, logged.response_throttle_ms)
        if row.latency_ms is None or row.latency_ms + LATENCY_ROUNDING_MS < logged.in_broker_ms:
            out.append(
                f"latency_ms {row.latency_ms} < broker totalTimeMs - sendTimeMs "
                f"{logged.in_broker_ms:.3f}"
            )
    return out


def exception_of(row: Row, rows: list[Row], sasl_port: int) -> str | None:
    """Why a row may have no line in the broker's request log, None if it should have one."""
    if row.api_name in SASL_APIS and row.key[0] == sasl_port:
        return "sasl_exchange"
    if row.api_name == "ApiVersions" and row.key[0] == sasl_port:
        sasl_done = [
            r.request_time for r in rows if r.stream == row.stream and r.api_name in SASL_APIS
        ]
        if sasl_done and row.request_time <= max(sasl_done):
            return "pre_auth_api_versions"
    if row.api_name == "Envelope":
        return "envelope"
    if row.status == "unanswered":
        return "cut_by_client_close"
    return None


@dataclass
class Join:
    matched: list[tuple[LoggedRequest, Row]] = field(default_factory=list)
    # Logged inside the capture window on a client listener, without a row.
    rows_missing: list[LoggedRequest] = field(default_factory=list)
    # Rows with no logged request, by known reason, and those no reason explains.
    exceptions: Counter[str] = field(default_factory=Counter)
    unexplained: list[Row] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [
            *(
                f"no row for logged {r.api_name} v{r.api_version} key={r.key}"
                for r in self.rows_missing
            ),
            *(f"row without a logged request: {r}" for r in self.unexplained),
            *self.differences,
        ]


def join(
    logged: list[LoggedRequest],
    rows: list[Row],
    *,
    window: tuple[datetime, datetime],
    sasl_port: int,
) -> Join:
    result = Join()
    by_key = {r.key: r for r in logged if r.listener in CLIENT_LISTENERS}
    start, end = window
    row_keys = {row.key for row in rows}
    for r in by_key.values():
        if start <= r.time <= end and r.key not in row_keys:
            result.rows_missing.append(r)
    for row in rows:
        found = by_key.get(row.key)
        if found is None:
            reason = exception_of(row, rows, sasl_port)
            if reason is None:
                result.unexplained.append(row)
            else:
                result.exceptions[reason] += 1
            continue
        result.matched.append((found, row))
        result.differences.extend(
            f"{found.api_name} v{found.api_version} key={row.key}: {d}"
            for d in mismatches(found, row)
        )
    return result


# ---------------------------------------------------------------- the run


@dataclass(frozen=True)
class Recorded:
    broker: Broker
    capture: Path
    window: tuple[datetime, datetime]
    df: pd.DataFrame
    logged: list[LoggedRequest]

    def join(self, df: pd.DataFrame | None = None) -> Join:
        frame = self.df if df is None else df
        return join(self.logged, rows_of(frame), window=self.window, sasl_port=self.broker.sasl)


def broker_specs(broker: Broker) -> list[Path]:
    """The broker's own kafka-clients jar: every version it speaks decodes."""
    env = dict(
        line.split("=", 1)
        for line in broker.run("env", timeout=30).stdout.splitlines()
        if "=" in line
    )
    return sorted(Path(env["KAFKA_BROKER_LIBS"]).glob("kafka-clients-*.jar"))


@pytest.fixture(scope="module")
def recorded(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    capture = tmp_path_factory.mktemp("oracle-capture") / "request-log.pcapng"
    start = datetime.now(UTC)
    with Capture(capture, ports=(broker.plaintext, broker.sasl), prefer="dumpcap"):
        workload(broker)
    end = datetime.now(UTC)
    df = dissector.analyze(
        capture, ports=[broker.plaintext, broker.sasl], specs=broker_specs(broker)
    )
    return Recorded(broker, capture, (start, end), df, read_request_log(broker.dir))


# ---------------------------------------------------------------- checks


def test_the_workload_covers_what_the_oracle_is_for(recorded: Recorded) -> None:
    """The broker's own log shows SASL traffic, errors, a throttle, two client libraries."""
    start, end = recorded.window
    mine = [r for r in recorded.logged if r.listener in CLIENT_LISTENERS and start <= r.time <= end]
    assert {r.listener for r in mine} == CLIENT_LISTENERS
    assert {r.principal for r in mine if r.listener == "SASL_PLAINTEXT"} >= {
        "User:alice",
        "User:bob",
    }
    codes = {r.error_code for r in mine}
    assert {1, 3} <= codes  # OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION
    assert any((r.response_throttle_ms or 0) > 0 for r in mine if r.client_id == THROTTLED_CLIENT)
    assert {r.software_name for r in mine} >= {"confluent-kafka-python", "kafka-python"}


def test_every_logged_request_is_a_row_and_agrees(recorded: Recorded) -> None:
    result = recorded.join()
    problems = result.problems()
    assert not problems, "\n".join(problems[:40])
    assert len(result.matched) >= 30  # the workload makes about 40
    # The known exceptions, named and counted: two SASL connections at least (PLAIN from
    # librdkafka, SCRAM from kafka-python), each with its handshake and authenticate.
    assert result.exceptions["sasl_exchange"] >= 4
    assert set(result.exceptions) <= {
        "sasl_exchange",
        "pre_auth_api_versions",
        "envelope",
        "cut_by_client_close",
    }


Break = Callable[[pd.DataFrame, int], pd.DataFrame]


def _drop(df: pd.DataFrame, i: int) -> pd.DataFrame:
    return df.drop(index=i)


def _bump(column: str) -> Break:
    def bump(df: pd.DataFrame, i: int) -> pd.DataFrame:
        out = df.copy()
        value = out.at[i, column]
        out.at[i, column] = (0 if pd.isna(value) else value) + 1
        return out

    return bump


def _rename(df: pd.DataFrame, i: int) -> pd.DataFrame:
    out = df.copy()
    out["client_id"] = out["client_id"].astype(object)
    out.at[i, "client_id"] = f"{out.at[i, 'client_id']}-not"
    return out


def _instant(df: pd.DataFrame, i: int) -> pd.DataFrame:
    out = df.copy()
    out.at[i, "latency_ms"] = 0.0
    return out


BREAKS: dict[str, Break] = {
    "dropped_row": _drop,
    "api_version": _bump("api_version"),
    "client_id": _rename,
    "error_code": _bump("error_code"),
    "throttle_ms": _bump("throttle_ms"),
    "latency_ms": _instant,
}


@pytest.mark.parametrize("kind", list(BREAKS))
def test_the_comparison_catches_a_broken_frame(recorded: Recorded, kind: str) -> None:
    """A dissector that dropped a row or misread a field must fail the check above."""
    clean = recorded.join()
    # An answered Fetch: every field under test (error code and throttle too) applies.
    fetch = next(
        row
        for logged, row in clean.matched
        if logged.api_name == "FETCH" and row.status in ANSWERED
    )
    df = recorded.df.reset_index(drop=True)
    keys = list(zip(df["broker_port"], df["client_port"], df["correlation_id"], strict=True))
    broken = BREAKS[kind](df, keys.index(fetch.key))
    assert recorded.join(broken).problems(), f"a broken {kind} went unnoticed"
