"""Real traffic for two correlation corner cases: raw SASL tokens and acks=0.

kafka-python pinned to Kafka 0.11 speaks SaslHandshake v0, after which the SASL
tokens travel as bare size-prefixed frames (no Kafka header) until authentication
ends; and a producer with acks=0 gets no Produce response at all. What the client
did (its own counts) is the oracle; tshark's request count is a second one.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import dissector
from scripts.testbed.capture import Capture

pytestmark = [pytest.mark.broker]

SASL_PORT = 9094
PLAINTEXT_PORT = 9092
USERS = {"PLAIN": ("alice", "alice-secret"), "SCRAM-SHA-256": ("bob", "bob-secret")}
# Round trips of raw tokens: PLAIN sends one token; SCRAM client-first and client-final.
RAW_ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2}
RECORDS = 20


def _produce(client_id: str, *, acks: int, mechanism: str | None) -> int:
    from kafka import KafkaProducer

    sasl = {}
    port = PLAINTEXT_PORT
    if mechanism is not None:
        user, password = USERS[mechanism]
        port = SASL_PORT
        sasl = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
        }
    producer = KafkaProducer(
        bootstrap_servers=f"127.0.0.1:{port}",
        client_id=client_id,
        api_version=(0, 11),  # SaslHandshake v0 -> raw tokens; Produce v3
        acks=acks,
        linger_ms=5,
        **sasl,
    )
    try:
        for i in range(RECORDS):
            producer.send("__sasl_acks_topic__", value=b"v%d" % i)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    return RECORDS


def _create_topic() -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{PLAINTEXT_PORT}")
    try:
        admin.create_topics([NewTopic("__sasl_acks_topic__", 1, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()


@pytest.fixture(scope="module")
def capture(kafka_broker: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    _create_topic()
    path = tmp_path_factory.mktemp("sasl-acks") / "sasl-acks.pcapng"
    with Capture(path, ports=(PLAINTEXT_PORT, SASL_PORT)):
        for mechanism in USERS:
            _produce(f"raw-sasl-{mechanism.lower()}", acks=1, mechanism=mechanism)
        _produce("acks-zero", acks=0, mechanism=None)
        time.sleep(0.5)
    return path


@pytest.mark.parametrize("mechanism", list(USERS))
def test_raw_sasl_tokens_are_paired_and_later_requests_decode(
    capture: Path, mechanism: str
) -> None:
    df = dissector.analyze(capture)
    assert not (df["status"] == "malformed").any()
    client = f"raw-sasl-{mechanism.lower()}"
    streams = set(df.loc[df["client_id"] == client, "stream"])
    assert streams, "the client's connections are in the capture"
    handshakes = df[(df["client_id"] == client) & (df["api_name"] == "SaslHandshake")]
    assert set(handshakes["api_version"]) == {0}
    assert (handshakes["status"] == "ok").all()
    tokens = df[df["stream"].isin(streams) & (df["api_name"] == "SaslToken")]
    # Each authenticated connection: its rounds of raw tokens, each answered by the broker.
    assert len(tokens) == RAW_ROUNDS[mechanism] * len(handshakes)
    assert tokens["response_time"].notna().all()
    produced = df[(df["client_id"] == client) & (df["api_name"] == "Produce")]
    assert set(produced["status"]) == {"ok"}
    assert int(produced["records"].sum()) == RECORDS


def test_acks_zero_produce_is_no_response_and_counts_its_records(capture: Path) -> None:
    df = dissector.analyze(capture)
    produced = df[(df["client_id"] == "acks-zero") & (df["api_name"] == "Produce")]
    assert len(produced) > 0
    assert set(produced["status"]) == {"no_response"}
    assert produced["response_time"].isna().all()
    assert int(produced["records"].sum()) == RECORDS
    assert not (df[df["client_id"] == "acks-zero"]["status"] == "unanswered").any()


def test_every_request_tshark_sees_is_ours_and_its_misreads_are_our_sasl_tokens(
    capture: Path, tshark: str
) -> None:
    out = subprocess.run(
        [
            tshark,
            "-r",
            str(capture),
            "-d",
            f"tcp.port=={SASL_PORT},kafka",
            "-Y",
            f"kafka && (tcp.dstport == {PLAINTEXT_PORT} || tcp.dstport == {SASL_PORT})",
            "-T",
            "fields",
            "-e",
            "kafka.api_key",
            "-e",
            "kafka.correlation_id",
            "-e",
            "tcp.stream",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    theirs = {
        (int(k), int(c), int(s))
        for k, c, s in (line.split("\t") for line in out.splitlines())
        if k and c and k.isdigit()
    }
    df = dissector.analyze(capture)
    keyed = df.dropna(subset=["api_key", "correlation_id"])
    ours = {
        (int(k), int(c), int(s))
        for k, c, s in zip(keyed["api_key"], keyed["correlation_id"], keyed["stream"], strict=True)
    }
    # tshark reads the raw SASL tokens as requests with nonsense api keys ("al" of alice
    # is key 24940): exactly the frames we pair as SaslToken instead.
    misread = {t for t in theirs if t[0] > 92}
    assert len(misread) == int((df["api_name"] == "SaslToken").sum())
    assert theirs - misread <= ours
