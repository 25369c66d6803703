"""Kafka over TLS decrypted from key logs, against independent oracles.

The captures of ``captures/tls`` were recorded from the real test bed broker with real
clients (``scripts/testbed/record_tls.sh``; see ``captures/README.md``). Oracles: tshark
decrypting the same capture with the same key log (its Kafka dissector decodes the
request headers of every version: api key, version, correlation id per connection, and
which requests were answered), the clients' own ledgers (records acknowledged and
delivered, errors provoked on purpose), the plaintext capture of the same workload (the
API versions a client uses do not depend on TLS), and editcap (secrets injected into the
capture, a capture cut after the handshakes).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dissector
from dissector.tls import KeyLogError

REPO = Path(__file__).resolve().parents[1]
TLS = REPO / "captures" / "tls"

# name, key log suffix, TLS version, cipher suite (what the ServerHello chose; the
# broker runs of record_tls.sh restrict the suites for AES-128 and ChaCha20)
CASES = [
    ("tls13-kafka-python", "keys", "TLS 1.3", "TLS_AES_256_GCM_SHA384"),
    ("tls13-kafka-python", "broker.keys", "TLS 1.3", "TLS_AES_256_GCM_SHA384"),
    ("tls12-kafka-python", "keys", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    # the Java agent's TLS 1.2 lines: RSA Session-ID:... Master-Key:...
    ("tls12-kafka-python", "broker.keys", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("sasl-ssl-aiokafka", "keys", "TLS 1.3", "TLS_AES_256_GCM_SHA384"),
    ("tls13-confluent", "broker.keys", "TLS 1.3", "TLS_AES_256_GCM_SHA384"),
    # the Java client's own key log (the same agent, client side: RSA Session-ID lines)
    ("tls12-java", "keys", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("tls12-java", "broker.keys", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("tls13-aes128-aiokafka", "keys", "TLS 1.3", "TLS_AES_128_GCM_SHA256"),
    ("tls13-chacha-kafka-python", "keys", "TLS 1.3", "TLS_CHACHA20_POLY1305_SHA256"),
    (
        "tls12-chacha-kafka-python",
        "keys",
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "tls12-chacha-kafka-python",
        "broker.keys",
        "TLS 1.2",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    # RSA key exchange, with and without the extended master secret: the pre-master forms
    # (PMS_CLIENT_RANDOM; RSA <encrypted pre-master> <pre-master>), made from the capture
    # with the broker's key by scripts/testbed/pms_keylog.py, and the broker's master
    # secrets by session id.
    *(
        (name, suffix, "TLS 1.2", "TLS_RSA_WITH_AES_128_GCM_SHA256")
        for name in ("tls12-rsa-kafka-python", "tls12-rsa-noems-kafka-python")
        for suffix in ("pms.keys", "rsa.keys", "broker.keys")
    ),
    # TLS 1.3 KeyUpdates: a broker whose keys last 8 KiB (KAFKA_TLS_KEY_LIMIT), bulk
    # records. The broker's key log holds only the first traffic secrets: every later key
    # is derived.
    *(
        (name, suffix, "TLS 1.3", "TLS_AES_256_GCM_SHA384")
        for name in ("tls13-keyupdate-kafka-python", "tls13-keyupdate-java")
        for suffix in ("keys", "broker.keys")
    ),
]
KEYUPDATE = ["tls13-keyupdate-kafka-python", "tls13-keyupdate-java"]
# Records produced and consumed by each workload, where not 10.
RECORDS = {name: 100 for name in KEYUPDATE}


def _ledger(name: str) -> dict[str, Any]:
    return json.loads((TLS / f"{name}.drivers.json").read_text())


def _port(name: str) -> int:
    return int(_ledger(name)["operations"][0]["port"])


def _tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (scripts/run-tests installs it)")
    return path


def _run(args: list[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout


@functools.cache
def tshark_kafka(name: str, keys: Path) -> list[tuple[int, int, list[tuple[int, int, int]]]]:
    """tshark's Kafka over TLS, one entry a frame with Kafka in it: frame number, stream,
    and (api key, version, correlation id) of each request in it, or (-1, -1, correlation
    id) of each response."""
    fields = [
        *("frame.number", "tcp.stream"),
        *("kafka.request_key", "kafka.api_version", "kafka.correlation_id"),
    ]
    out = _run(
        [
            *(_tshark(), "-r", str(TLS / f"{name}.pcapng"), "-o", f"tls.keylog_file:{keys}"),
            *("-d", f"tls.port=={_port(name)},kafka", "-Y", "kafka", "-T", "fields"),
            *("-E", "aggregator=|", *(a for f in fields for a in ("-e", f))),
        ]
    )
    frames = []
    for line in out.splitlines():
        frame, stream, keys_, versions, corrs = [*line.split("\t"), "", "", ""][:5]
        if keys_:
            msgs = [
                (int(k), int(v), int(c))
                for k, v, c in zip(
                    keys_.split("|"), versions.split("|"), corrs.split("|"), strict=True
                )
            ]
        else:
            msgs = [(-1, -1, int(c)) for c in corrs.split("|") if c]
        frames.append((int(frame), int(stream), msgs))
    return frames


@functools.cache
def tshark_pairs(
    name: str, keys: Path
) -> tuple[Counter[tuple[int, int, int, int]], set[tuple[int, int]], int]:
    """tshark's Kafka over TLS: (stream, api key, version, correlation id) of every
    request, the (stream, correlation id) answered, and the connections."""
    requests: Counter[tuple[int, int, int, int]] = Counter()
    answered: set[tuple[int, int]] = set()
    for _, stream, msgs in tshark_kafka(name, keys):
        for k, v, c in msgs:
            if k >= 0:
                requests[(stream, k, v, c)] += 1
            else:
                answered.add((stream, c))
    # Every connection of these captures carries Kafka: tshark's Kafka streams are all.
    return requests, answered, len({key[0] for key in requests})


@functools.cache
def decrypted(name: str, suffix: str) -> Any:
    """The capture analysed with one of its key logs (once per test session)."""
    return dissector.analyze(TLS / f"{name}.pcapng", tls_keylog=TLS / f"{name}.{suffix}")


@pytest.mark.parametrize("name,suffix,version,suite", CASES, ids=lambda v: str(v))
def test_decrypted_pairs_equal_tsharks(name: str, suffix: str, version: str, suite: str) -> None:
    keys = TLS / f"{name}.{suffix}"
    df = decrypted(name, suffix)
    requests, answered, connections = tshark_pairs(name, keys)
    assert len(requests) > 20  # the comparison is not vacuous
    mine = Counter(
        (int(r.stream), int(r.api_key), int(r.api_version), int(r.correlation_id))
        for r in df.itertuples()
        if r.api_key is not None and r.correlation_id is not None
    )
    assert mine == requests
    mine_answered = {
        (int(r.stream), int(r.correlation_id))
        for r in df.itertuples()
        if r.status in ("ok", "error")
    }
    assert mine_answered == answered
    assert all("tls" in flags for flags in df["flags"])
    assert df.attrs["tls"] == [
        {
            "capture": str(TLS / f"{name}.pcapng"),
            "version": version,
            "cipher_suite": suite,
            "outcome": "decrypted",
            "connections": connections,
        }
    ]
    c = df.attrs["counters"]
    assert c["tls_decrypted_connections"] == c["tls_connections"] == connections
    assert df.attrs["tls_streams"] == []


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
def test_decrypted_rows_match_the_clients_ledger(name: str) -> None:
    df = decrypted(name, "broker.keys" if name == "tls13-confluent" else "keys")
    for op in _ledger(name)["operations"]:
        rows = df[df["client_id"] == op["client_id"]]
        for api in op["apis"]:
            assert api in set(rows["api_name"]), (op["op"], api)
        if op["op"] == "produce":
            produced = rows[(rows["api_name"] == "Produce") & (rows["status"] == "ok")]
            assert produced["records"].sum() == op["records"] == RECORDS.get(name, 10)
        if op["op"] == "consume":
            fetched = rows[rows["api_name"] == "Fetch"]["records"].sum()
            assert fetched >= op["records"] == RECORDS.get(name, 10)
        for err in op["errors"]:
            hit = rows[(rows["api_name"] == err["api"]) & (rows["error_name"] == err["error"])]
            assert len(hit) >= 1, err


def test_api_versions_are_those_of_the_plaintext_run() -> None:
    """The same kafka-python workload over PLAINTEXT (no decryption involved) uses the
    same APIs at the same versions per client role."""

    def used(df: Any) -> set[tuple[str, str, int]]:
        role = df["client_id"].astype(str).str.rsplit("-", n=1).str[-1]
        return set(
            zip(role, df["api_name"].astype(str), df["api_version"].astype(int), strict=True)
        )

    plain = dissector.analyze(TLS / "plaintext-kafka-python.pcapng")
    assert plain.attrs["counters"].get("tls_connections", 0) == 0
    for name in ("tls13-kafka-python", "tls12-kafka-python", "tls13-chacha-kafka-python"):
        assert used(decrypted(name, "keys")) == used(plain), name


def test_without_a_key_log_connections_are_counted_not_decoded() -> None:
    name = "tls13-kafka-python"
    df = dissector.analyze(TLS / f"{name}.pcapng")
    c = df.attrs["counters"]
    _, _, connections = tshark_pairs(name, TLS / f"{name}.keys")
    assert len(df) == 0
    assert c["tls_no_secret"] == c["tls_connections"] == connections
    # Each byte once: tshark's retransmissions (this capture has two) are not new bytes.
    payload = _run(
        [
            *(_tshark(), "-r", str(TLS / f"{name}.pcapng"), "-Y", "!tcp.analysis.retransmission"),
            *("-T", "fields", "-e", "tcp.len"),
        ]
    )
    assert c["tls_bytes"] == sum(int(n) for n in payload.split())
    assert "tls_record_bytes" not in c
    assert sorted(df.attrs["tls_streams"]) == list(range(connections))


def test_a_partial_key_log_decodes_the_connections_it_covers() -> None:
    """confluent-kafka writes no key log: the client key log of this capture covers only
    the kafka-python admin that made the topic; the broker's covers every connection."""
    cap = TLS / "tls13-confluent.pcapng"
    full = decrypted("tls13-confluent", "broker.keys")
    part = dissector.analyze(cap, tls_keylog=TLS / "tls13-confluent.keys")
    covered = set(part["stream"])
    c = part.attrs["counters"]
    assert c["tls_decrypted_connections"] == len(covered) >= 1
    assert c["tls_no_secret"] == full.attrs["counters"]["tls_connections"] - len(covered) >= 1
    assert sorted(part.attrs["tls_streams"]) == sorted(set(full["stream"]) - covered)
    cols = ["stream", "api_key", "api_version", "correlation_id", "status", "error_code"]
    expect = full[full["stream"].isin(covered)][cols].astype(str).values.tolist()
    assert part[cols].astype(str).values.tolist() == expect


def test_key_log_lines_from_several_files_combine(tmp_path: Path) -> None:
    name = "tls13-confluent"
    lines = (TLS / f"{name}.broker.keys").read_text().splitlines()
    half = len(lines) // 2
    (tmp_path / "a.keys").write_text("\n".join(lines[:half]) + "\n")
    (tmp_path / "b.keys").write_text("\n".join(lines[half:]) + "\n")
    full = decrypted(name, "broker.keys")
    both = dissector.analyze(
        TLS / f"{name}.pcapng", tls_keylog=[tmp_path / "a.keys", tmp_path / "b.keys"]
    )
    assert len(both) == len(full) > 0


def test_secrets_injected_into_the_capture_are_used(tmp_path: Path) -> None:
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap is not installed (scripts/run-tests installs it)")
    name = "tls13-chacha-kafka-python"
    out = tmp_path / "with-secrets.pcapng"
    _run(
        [
            editcap,
            "--inject-secrets",
            f"tls,{TLS / f'{name}.keys'}",
            str(TLS / f"{name}.pcapng"),
            str(out),
        ]
    )
    df = dissector.analyze(out)
    ref = decrypted(name, "keys")
    assert len(df) == len(ref) > 0
    assert (
        df.attrs["counters"]["tls_decrypted_connections"]
        == ref.attrs["counters"]["tls_connections"]
    )


def test_sslkeylogfile_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "tls13-aes128-aiokafka"
    monkeypatch.setenv("SSLKEYLOGFILE", str(TLS / f"{name}.keys"))
    df = dissector.analyze(TLS / f"{name}.pcapng")
    c = df.attrs["counters"]
    assert len(df) > 0
    assert c["tls_decrypted_connections"] == c["tls_connections"] > 0


def test_a_wrong_key_is_a_decryption_failure(tmp_path: Path) -> None:
    """Every secret changed in its last hex digit: each connection fails to decrypt."""
    name = "tls12-kafka-python"
    bad = []
    for line in (TLS / f"{name}.keys").read_text().splitlines():
        if line.startswith("CLIENT_RANDOM"):
            last = line[-1]
            line = line[:-1] + ("0" if last != "0" else "1")
        bad.append(line)
    (tmp_path / "bad.keys").write_text("\n".join(bad) + "\n")
    df = dissector.analyze(TLS / f"{name}.pcapng", tls_keylog=tmp_path / "bad.keys")
    c = df.attrs["counters"]
    assert len(df) == 0
    assert c["tls_decrypt_failed"] == c["tls_connections"] > 0


def test_a_capture_starting_after_the_handshakes(tmp_path: Path) -> None:
    """The capture cut where the fourth connection starts: the first three are counted
    as without handshake (no crash, no rows from them), the later ones decrypted."""
    name = "tls13-kafka-python"
    cap = TLS / f"{name}.pcapng"
    first = _run(
        [
            _tshark(),
            "-r",
            str(cap),
            "-Y",
            "tcp.stream == 3 && tcp.flags.syn == 1",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ]
    )
    cut_at = int(first.split()[0])
    # Keep the packets from the middle of connection 2's life (after its handshake) on.
    mid = _run(
        [
            _tshark(),
            "-r",
            str(cap),
            "-Y",
            "tcp.stream == 2 && tls.app_data",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ]
    )
    start = int(mid.split()[1])
    out = tmp_path / "late.pcapng"
    _run([_tshark(), "-r", str(cap), "-Y", f"frame.number >= {start}", "-w", str(out)])
    df = dissector.analyze(out, tls_keylog=TLS / f"{name}.keys")
    full = decrypted(name, "keys")
    c = df.attrs["counters"]
    assert start < cut_at
    assert c["tls_no_handshake"] >= 1
    assert c["tls_decrypted_connections"] == full.attrs["counters"]["tls_connections"] - 3
    assert c["tls_no_handshake"] + c["tls_decrypted_connections"] == c["tls_connections"]
    later = full[full["stream"] >= 3]
    assert len(df) == len(later) > 0


def test_a_missing_key_log_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KeyLogError, match="no such file"):
        dissector.analyze(TLS / "tls13-kafka-python.pcapng", tls_keylog=tmp_path / "nope.keys")


# ------------------------------------------------------------------ the commands


def test_every_command_takes_tls_keylog(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from dissector.cli import main

    name = "tls13-aes128-aiokafka"
    cap, keys = str(TLS / f"{name}.pcapng"), str(TLS / f"{name}.keys")
    runner = CliRunner()
    analyzed = runner.invoke(
        main, ["analyze", cap, "--tls-keylog", keys, "-o", str(tmp_path / "p.csv")]
    )
    assert analyzed.exit_code == 0, analyzed.output
    assert "TLS 1.3 TLS_AES_128_GCM_SHA256: decrypted 7" in analyzed.output
    decoded = runner.invoke(main, ["decode", cap, "--tls-keylog", keys, "--api", "Produce"])
    assert decoded.exit_code == 0, decoded.output
    lines = [json.loads(line) for line in decoded.output.splitlines()]
    assert len(lines) == 1 and lines[0]["request"]["header"]["client_id"] == f"{name}-producer"
    report = tmp_path / "r.html"
    reported = runner.invoke(main, ["report", cap, "--tls-keylog", keys, "-o", str(report)])
    assert reported.exit_code == 0, reported.output
    assert "TLS 1.3 TLS_AES_128_GCM_SHA256: decrypted 7" in report.read_text()
    missing = runner.invoke(main, ["analyze", cap, "--tls-keylog", str(tmp_path / "nope.keys")])
    assert missing.exit_code == 1
    assert missing.output.strip().splitlines() == [
        f"Error: TLS key log {tmp_path / 'nope.keys'}: no such file"
    ]


def test_spark_tasks_decrypt_with_the_key_log_content(tmp_path: Path) -> None:
    """``spark --tls-keylog FOLDER`` ships the contents of the key logs in it, in the
    options, to the tasks, which read the capture from memory: no file of the driver is
    opened there."""
    import pickle

    from dissector.cli.common import tls_key_logs
    from dissector.options import Options
    from dissector.spark.tasks import capture_source
    from dissector.wire.core import iter_tables

    name = "tls13-confluent"  # the client's and the broker's key logs, in one folder
    folder = tmp_path / "keys"
    folder.mkdir()
    for suffix in ("keys", "broker.keys"):
        (folder / suffix).write_text((TLS / f"{name}.{suffix}").read_text())
    shipped = Options(tls=tls_key_logs([str(folder)], ship=True))
    options = pickle.loads(pickle.dumps(shipped))
    shutil.rmtree(folder)  # a task on another machine does not have the files
    assert options.tls is not None and options.tls.paths == ()
    data = (TLS / f"{name}.pcapng").read_bytes()
    source, _, _ = capture_source(["mem.pcapng"], data)  # the bytes Spark read
    flags = [f for t in iter_tables([source], options) for f in t.column("flags").to_pylist()]
    offline = decrypted(name, "broker.keys")
    assert len(flags) == len(offline) > 0
    assert all("tls" in f for f in flags)


@pytest.mark.parametrize("name", sorted({c[0] for c in CASES}))
def test_pairs_equal_the_brokers_request_log(name: str) -> None:
    """The broker's own account of the same run (its request logger, recorded with the
    capture: ``NAME.requests.jsonl``): every request it completed on the TLS listener,
    by client port and correlation id, with api key, version, client id and the error
    codes of its response, is a row of ours with the same values; and every answered row
    of ours is in the log, but for what a SASL listener answers before authentication."""
    import pandas as pd

    suffix = "broker.keys" if name == "tls13-confluent" else "keys"
    df = decrypted(name, suffix)
    logged = [
        json.loads(line) for line in (TLS / f"{name}.requests.jsonl").read_text().splitlines()
    ]
    assert len(logged) > 15

    def key(client_port: Any, correlation_id: Any) -> tuple[int, int]:
        return int(client_port), int(correlation_id)

    mine = {
        key(r.client_port, r.correlation_id): r
        for r in df.itertuples()
        if r.correlation_id is not None
    }
    for entry in logged:
        row = mine.get(key(entry["client_port"], entry["correlation_id"]))
        assert row is not None, entry
        fields = ["api_key", "api_version", "client_id", "error_code", "error_count"]
        if row.status == "unanswered":
            # The broker logs a request whose connection closed before the response
            # went out too (a consumer's last long poll); tshark sees no response either
            # (test_decrypted_pairs_equal_tsharks).
            fields = fields[:3]
        got = tuple(None if pd.isna(v := getattr(row, f)) else v for f in fields)
        assert got == tuple(entry[f] for f in fields), entry
    extra = {
        r.api_name
        for k, r in mine.items()
        if k not in {key(e["client_port"], e["correlation_id"]) for e in logged}
    }
    # A SASL listener answers ApiVersions and the SASL exchanges of a connection before
    # it is authenticated itself, outside the request channel the logger sees.
    sasl = {e["listener"] for e in logged} == {"SASL_SSL"}
    assert extra <= ({"ApiVersions", "SaslHandshake", "SaslAuthenticate"} if sasl else set())


@functools.cache
def tshark_key_updates(name: str) -> list[tuple[int, int, bool, bool]]:
    """tshark's TLS 1.3 KeyUpdates, decrypted with the broker's key log: (frame, stream,
    sent by the broker, update_requested) of each."""
    keys = TLS / f"{name}.broker.keys"
    fields = [
        "frame.number",
        "tcp.stream",
        "tcp.srcport",
        "tls.handshake.key_update.request_update",
    ]
    out = _run(
        [
            *(_tshark(), "-r", str(TLS / f"{name}.pcapng"), "-o", f"tls.keylog_file:{keys}"),
            *("-Y", "tls.handshake.type == 24", "-T", "fields", "-E", "aggregator=|"),
            *(a for f in fields for a in ("-e", f)),
        ]
    )
    updates = []
    for line in out.splitlines():
        frame, stream, port, requested = line.split("\t")
        for r in requested.split("|"):  # a segment can carry more than one
            updates.append((int(frame), int(stream), int(port) == _port(name), r == "1"))
    return updates


@pytest.mark.parametrize("suffix", ["keys", "broker.keys"])
@pytest.mark.parametrize("name", KEYUPDATE)
def test_requests_after_key_updates_are_decoded(name: str, suffix: str) -> None:
    """Each connection that moved its keys on (tshark sees the KeyUpdates: several each
    way, the broker asking the client for its own, the Java client asking too) decodes
    every request and response tshark finds under a later key, as tshark decodes them."""
    updates = tshark_key_updates(name)
    sides = Counter((broker, requested) for _, _, broker, requested in updates)
    assert sides[(True, True)] >= 5  # the broker's, update_requested
    assert sides[(False, False)] >= 5  # the client's answers
    if name == "tls13-keyupdate-java":
        assert sides[(False, True)] >= 5 and sides[(True, False)] >= 5
    first: dict[tuple[int, bool], int] = {}
    for frame, stream, broker, _ in updates:
        first.setdefault((stream, broker), frame)
    later_requests: dict[tuple[int, int], tuple[int, int]] = {}
    later_responses: set[tuple[int, int]] = set()
    for frame, stream, msgs in tshark_kafka(name, TLS / f"{name}.broker.keys"):
        for k, v, c in msgs:
            if k >= 0 and frame > first.get((stream, False), 1 << 62):
                later_requests[(stream, c)] = (k, v)
            if k < 0 and frame > first.get((stream, True), 1 << 62):
                later_responses.add((stream, c))
    # Both bulk connections (Produce, Fetch) go on after their first KeyUpdates.
    streams = {s for s, _ in first}
    assert {s for s, _ in later_requests} == {s for s, _ in later_responses} == streams
    assert len(streams) == 2 and len(later_requests) >= 10
    df = decrypted(name, suffix)
    mine = {(int(r.stream), int(r.correlation_id)): r for r in df.itertuples()}
    for pair, (k, v) in later_requests.items():
        row = mine[pair]
        assert (int(row.api_key), int(row.api_version)) == (k, v), pair
    for pair in later_responses:
        assert mine[pair].status in ("ok", "error"), pair
    c = df.attrs["counters"]
    assert c["tls_decrypted_connections"] == c["tls_connections"]
    assert not {k for k in c if k.startswith("tls_") and k not in TLS_FINE}


# The counters of a capture whose every connection decrypted.
TLS_FINE = {
    "tls_connections",
    "tls_connections_directions",
    "tls_decrypted_connections",
    "tls_plaintext_bytes",
    "tls_record_bytes",
}


def test_the_broker_key_log_has_no_updated_secrets() -> None:
    """The javaagent logs the first traffic secrets only; OpenSSL (the Python client) also
    logs each updated one (CLIENT/SERVER_TRAFFIC_SECRET_N, with no generation: nothing to
    decrypt with), one a KeyUpdate sent or received."""
    for name in KEYUPDATE:
        assert "TRAFFIC_SECRET_N " not in (TLS / f"{name}.broker.keys").read_text()
    name = "tls13-keyupdate-kafka-python"
    logged = [
        ln for ln in (TLS / f"{name}.keys").read_text().splitlines() if "TRAFFIC_SECRET_N " in ln
    ]
    assert len(logged) == len(tshark_key_updates(name)) > 10


def test_updated_secrets_in_the_capture_are_no_bad_lines(tmp_path: Path) -> None:
    """OpenSSL's key log injected into the capture (a Decryption Secrets Block), its
    TRAFFIC_SECRET_N lines with it: known lines, not counted as lines that fit no form,
    and the capture decrypts as with the file."""
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap is not installed (scripts/run-tests installs it)")
    name = "tls13-keyupdate-kafka-python"
    out = tmp_path / "with-secrets.pcapng"
    keys = TLS / f"{name}.keys"
    _run([editcap, "--inject-secrets", f"tls,{keys}", str(TLS / f"{name}.pcapng"), str(out)])
    df = dissector.analyze(out)
    c = df.attrs["counters"]
    assert "tls_keylog_bad_lines" not in c
    assert c["tls_decrypted_connections"] == c["tls_connections"] == 7
    cols = ["stream", "api_key", "api_version", "correlation_id", "status", "records"]
    ref = decrypted(name, "keys")
    assert df[cols].astype(str).values.tolist() == ref[cols].astype(str).values.tolist()


@pytest.mark.parametrize("name", ["tls12-rsa-kafka-python", "tls12-rsa-noems-kafka-python"])
def test_every_key_log_form_of_a_connection_decodes_the_same(name: str, tmp_path: Path) -> None:
    """One capture, its secrets in each line form Wireshark reads for TLS 1.2: the
    client's master secrets (CLIENT_RANDOM alone), the broker's (RSA Session-ID), the
    pre-master secrets by client random and by encrypted pre-master: the same rows."""
    lines = (TLS / f"{name}.keys").read_text().splitlines()
    master_only = tmp_path / "client-random.keys"
    master_only.write_text("".join(f"{ln}\n" for ln in lines if ln.startswith("CLIENT_RANDOM ")))
    assert master_only.read_text().count("\n") == 7
    # OpenSSL writes the RSA form too for an RSA key exchange: the same lines as the
    # ones opened with the broker's key (an independent derivation of the pre-master).
    assert {ln for ln in lines if ln.startswith("RSA ")} == set(
        (TLS / f"{name}.rsa.keys").read_text().splitlines()
    )

    def rows(keys: Path) -> list[tuple[object, ...]]:
        df = dissector.analyze(TLS / f"{name}.pcapng", tls_keylog=keys)
        c = df.attrs["counters"]
        assert c["tls_decrypted_connections"] == c["tls_connections"] == 7, keys.name
        cols = ["stream", "api_key", "api_version", "correlation_id", "status", "records"]
        return sorted(df[cols].astype(str).itertuples(index=False, name=None))

    original = rows(master_only)
    assert len(original) > 20
    for suffix in ("pms.keys", "rsa.keys", "broker.keys"):
        assert rows(TLS / f"{name}.{suffix}") == original, suffix
