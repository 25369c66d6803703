"""The native core's analytics tables (``native/src/rows/tables.rs``) against the Python full
decoder (``tests/oracle/tables.py``: every exchange decoded whole by
``dissector.protocol``, read by ``protocol.tables``' per-pair functions).

Equal tables, row for row and column for column, counters included: on every bundled
and shared capture, and on captures of damaged pairs (bytes overwritten, tails cut) made
from their exchanges, where the core reads what it can and leaves the rest to the
Python decoder.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dissector.options import Options
from dissector.protocol import api_name
from dissector.protocol.tables import GROUP_APIS, NEGOTIATION_API, PARTITION_APIS
from dissector.tls import KeyLogs, key_logs
from dissector.wire.core import capture_tables, iter_exchanges
from dissector.wire.tables import TABLE_NAMES, CaptureTables
from tests.hostile.build import ACK, PSH, tcp_frame, write_pcap
from tests.oracle.tables import python_groups, python_partitions, python_versions

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "captures").glob("*.pcap*"))
SHARED_DIR = ROOT.parent / "shared" / "captures"
SHARED = sorted(SHARED_DIR.glob("*.pcap*")) if SHARED_DIR.is_dir() else []
ORACLES = {"partitions": python_partitions, "groups": python_groups, "versions": python_versions}
TABLE_APIS = {*PARTITION_APIS, *GROUP_APIS, NEGOTIATION_API}


def assert_same_tables(native: CaptureTables, source: object, tls: KeyLogs | None = None) -> None:
    for name, oracle in ORACLES.items():
        expected = oracle(source, tls=tls)
        got = native.frame(name)
        pd.testing.assert_frame_equal(got, expected, check_dtype=True, obj=name)
        assert got.attrs == expected.attrs, name


@pytest.mark.parametrize("capture", BUNDLED, ids=lambda p: p.name)
def test_bundled_capture_tables_equal_the_python_decoders(capture: Path) -> None:
    native = capture_tables(str(capture))
    assert_same_tables(native, str(capture))
    # every pair of these real captures is read natively: the comparison is not of the
    # Python decoder with itself
    assert native.deferred_pairs == 0


@pytest.mark.skipif(not SHARED, reason="../shared/captures is absent (shared test material)")
@pytest.mark.parametrize("capture", SHARED, ids=lambda p: p.name)
def test_shared_capture_tables_equal_the_python_decoders(capture: Path) -> None:
    native = capture_tables(str(capture))
    assert_same_tables(native, str(capture))
    assert native.deferred_pairs == 0


TLS_DIR = ROOT / "captures" / "tls"
TLS = sorted(p for p in TLS_DIR.glob("*.pcapng") if p.with_suffix(".keys").exists())


@pytest.mark.parametrize("capture", TLS, ids=lambda p: p.name)
def test_decrypted_capture_tables_equal_the_python_decoders(capture: Path) -> None:
    """Kafka over TLS, decrypted with the client's key log: the same one pass."""
    keys = key_logs([str(capture.with_suffix(".keys"))])
    native = capture_tables(str(capture), Options(tls=keys))
    assert_same_tables(native, str(capture), keys)
    assert native.deferred_pairs == 0
    assert native.versions.num_rows > 0  # decrypted: Kafka requests were read


def test_several_captures_in_a_row_equal_the_python_decoders() -> None:
    """Topic names and connections start afresh with each capture of a run."""
    sources = [str(p) for p in BUNDLED + SHARED]
    native = capture_tables(sources)
    assert_same_tables(native, sources)
    assert set(native.versions["capture"].to_pylist()) >= {str(BUNDLED[0]), str(BUNDLED[1])}


# ----------------------------------------------------------------- damaged pairs


@dataclass(frozen=True)
class Pair:
    request: bytes
    response: bytes


def _table_pairs(captures: list[Path]) -> list[Pair]:
    """Request and response payloads of every answered exchange a table reads."""
    out = []
    for _, ex in iter_exchanges([str(c) for c in captures], Options()):
        if ex.request is None or ex.response is None or ex.api_key is None:
            continue
        if api_name(ex.api_key) in TABLE_APIS:
            out.append(Pair(bytes(ex.request.payload), bytes(ex.response.payload)))
    return out


def _mutants(pairs: list[Pair], per_pair: int, seed: int) -> list[Pair]:
    """Each pair with one side's bytes overwritten or its tail cut, reproducibly; the
    headers (api key, version, correlation id) are kept, so that most still pair."""
    rng = random.Random(seed)
    out = []
    for p in pairs:
        for _ in range(per_pair):
            side = "request" if rng.random() < 0.5 else "response"
            data = bytearray(getattr(p, side))
            keep = 8 if side == "request" else 4  # the fixed header bytes
            if len(data) <= keep:
                continue
            if rng.random() < 0.2:
                data = data[: rng.randrange(keep, len(data))]
            else:
                for _ in range(rng.randint(1, 3)):
                    value = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
                    data[rng.randrange(keep, len(data))] = value
            request = bytes(data) if side == "request" else p.request
            response = bytes(data) if side == "response" else p.response
            out.append(Pair(request, response))
    return out


def _segments(payload: bytes, size: int = 60_000) -> list[bytes]:
    return [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]


def _write(path: Path, pairs: list[Pair]) -> Path:
    """One TCP connection per pair (client port from 20000 on, broker 9092)."""
    frames = []
    ts = 1_700_000_000 * 10**9
    for i, p in enumerate(pairs):
        client = f"10.{1 + i // 40000}.0.1"
        port = 20000 + i % 40000
        seq, ack = 1000, 5000
        for side, payload in (("request", p.request), ("response", p.response)):
            framed = struct.pack(">i", len(payload)) + payload
            for chunk in _segments(framed):
                ts += 1000
                if side == "request":
                    frame = tcp_frame(client, "10.0.0.2", port, 9092, seq, ack, PSH | ACK, chunk)
                    seq += len(chunk)
                else:
                    frame = tcp_frame("10.0.0.2", client, 9092, port, ack, seq, PSH | ACK, chunk)
                    ack += len(chunk)
                frames.append((ts, frame))
    return write_pcap(path, frames)


def test_damaged_pairs_give_the_python_decoders_tables(tmp_path: Path) -> None:
    """Broken bytes: where the core reads a pair it agrees with the Python decoder, and
    where it cannot it asks it: either way the tables are the Python decoder's."""
    pairs = _table_pairs(BUNDLED + SHARED)
    assert len(pairs) > 150
    mutants = _mutants(pairs, per_pair=8, seed=19)
    capture = str(_write(tmp_path / "mutants.pcap", mutants))
    native = capture_tables(capture)
    assert_same_tables(native, capture)
    read = native.counters["partitions"]["pairs"] + native.counters["groups"]["pairs"]
    # both roads are taken, many times: the native reading and the Python fallback
    assert native.deferred_pairs > 200, native.deferred_pairs
    assert read - native.deferred_pairs > 200, (read, native.deferred_pairs)


def _zigzag(n: int) -> bytes:
    """A signed varint as Kafka's records write it (zigzag, then base-128)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    return bytes([*out, z])


def _fat_records(n: int, size: int) -> bytes:
    """n v2 records of ``size`` zero bytes each (null key, no headers)."""
    records = []
    for i in range(n):
        body = b"\x00" + _zigzag(0) + _zigzag(i) + _zigzag(-1) + _zigzag(size) + bytes(size)
        body += _zigzag(0)
        records.append(_zigzag(len(body)) + body)
    return b"".join(records)


def test_batches_past_the_decompression_budget_are_read_natively(tmp_path: Path) -> None:
    """A Produce frame whose compressed batches inflate past the frame's budget (64 MiB):
    the core counts the ones past it by their headers, as the Python decoder does, and
    no longer leaves such a pair to it (that took 42 s on a 32 MB frame of bombs). A
    small compressed batch read first, a plain one and several past the budget; the
    real mixed capture around them."""
    import zstandard

    from tests.hostile.build import Conversation, produce_v3, sandwich, v2_batch

    compress = zstandard.ZstdCompressor(level=1).compress
    small = v2_batch(compress(_fat_records(3, 100)), 3, codec=4)
    plain = v2_batch(_fat_records(2, 10), 2)
    bomb = v2_batch(compress(_fat_records(70, 1 << 20)), 70, codec=4)  # 70 MiB inflated
    req, resp = produce_v3(1, "bombs", [small, plain, bomb, bomb, bomb])
    conv = Conversation().handshake().pair(req, resp).close()
    capture = str(write_pcap(tmp_path / "bombs.pcap", sandwich(conv.frames)))
    native = capture_tables(capture)
    assert native.deferred_pairs == 0
    assert_same_tables(native, capture)
    rows = native.frame("partitions")
    bombs = rows[rows["topic"] == "bombs"].set_index("partition")
    assert bombs["records"].tolist() == [3, 2, 70, 70, 70]


# ----------------------------------------------------------------- consumer lag

LAG_CAPTURES = [p for p in BUNDLED if p.name in {"kafka-4-lag.pcapng", "kafka-4-mixed.pcapng"}]


@pytest.mark.parametrize("capture", LAG_CAPTURES, ids=lambda p: p.name)
def test_lag_tables_from_the_native_pass_equal_the_python_decoders(capture: Path) -> None:
    """The lag tables (``analytics.lag``) read the partitions table of the native pass
    (``dissector.partitions``, as the report and ``analyze`` give it): equal to those
    computed from the Python full decoder's partitions table."""
    from dissector.analytics.lag import committed_lag, lag_at_end, position_lag
    from dissector.analytics.partitions import partitions

    native = partitions(str(capture))
    python = python_partitions(str(capture))
    assert len(native) > 100 and native.attrs == python.attrs
    for measure in (lag_at_end, committed_lag, position_lag):
        got, expected = measure(native), measure(python)
        assert len(got) > 0, measure.__name__
        pd.testing.assert_frame_equal(got, expected, check_dtype=True, obj=measure.__name__)


# ----------------------------------------------------------------- the report's notes


def _python_notes(sources: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The report's group notes and client software as the Python full decoder reads
    them (``protocol.notes.NotingDecoder``) from every exchange of ``sources``."""
    from dissector import protocol
    from dissector.analytics.stats import MISSING_LABEL
    from dissector.protocol.families import GROUP_MEMBERSHIP
    from dissector.protocol.notes import NotingDecoder, note_group_call

    decoder = NotingDecoder(protocol, missing_client=MISSING_LABEL)
    for _, ex in iter_exchanges(sources, Options()):
        if ex.api_key is None or ex.api_version is None:
            continue
        request = decoder.decode_request(ex.request.payload) if ex.request else None
        response = (
            decoder.decode_response(ex.response.payload, ex.api_key, ex.api_version)
            if ex.response is not None
            else None
        )
        if ex.api_key in GROUP_MEMBERSHIP:
            name = protocol.api_name(ex.api_key)
            note_group_call(decoder.groups, ex.api_key, name, request, response)
    return decoder.group_notes(), decoder.software()


def test_report_notes_from_the_native_tables_equal_the_python_decoders() -> None:
    """The report's groups table and client software (``df.attrs``) come from the
    native pass's groups and versions tables and the pairs: equal to what the Python
    decoder reads from every membership call and ApiVersions request."""
    from dissector.analytics import report

    sources = [str(p) for p in BUNDLED + SHARED]
    df = report.analyze(sources)
    groups, software = _python_notes(sources)
    assert df.attrs[report.GROUPS_ATTR] == groups
    assert df.attrs[report.CLIENT_SOFTWARE_ATTR] == software
    # not vacuous: the bundled captures have classic, consumer and share groups, and
    # a Java client whose SASL handshake's ApiVersions has an empty client id
    assert {n["protocol"] for n in groups.values()} >= {"classic", "consumer", "share"}
    assert "adminclient-1" in software["apache-kafka-java 4.3.1"]


def test_take_tables_hands_a_typed_record_per_batch() -> None:
    """The boundary (``Analyzer.take_tables``): each batch's tables come as a
    ``TablesBatch`` record, one ``TableBuffers`` per table with its rows, its column
    buffers in the contract's order and its counters; added up over the batches they
    are the tables of the whole pass. An analyzer not asked for tables hands None."""
    from collections import Counter

    from dissector.tables_schema import CONTRACTS
    from dissector.wire.core import new_analyzer, open_capture

    capture = str(ROOT / "captures" / "kafka-4-mixed.pcapng")
    whole = capture_tables(capture)
    analyzer = new_analyzer(Options(), tables=TABLE_NAMES)
    open_capture(analyzer, capture)
    rows: Counter[str] = Counter()
    counters: dict[str, Counter[str]] = {name: Counter() for name in CONTRACTS}
    batches = 0
    more = True
    while more:
        more = analyzer.run(50)  # small batches: the tables come in several
        taken = analyzer.take_tables()
        assert taken is not None
        batches += 1
        for name, contract in CONTRACTS.items():
            buffers = getattr(taken, name)
            if buffers.rows:
                assert list(buffers.columns) == [c[0] for c in contract], name
            rows[name] += buffers.rows
            counters[name].update(buffers.counters)
        assert taken.deferred_pairs == 0
    assert batches > 1
    for name in CONTRACTS:
        assert rows[name] == whole.table(name).num_rows, name
        assert dict(counters[name]) == whole.counters[name], name
    assert rows["partitions"] > 0 and rows["versions"] > 0

    plain = new_analyzer(Options())
    open_capture(plain, capture)
    plain.run(1 << 20)
    assert plain.take_tables() is None


@pytest.mark.parametrize("wanted", [("groups", "versions"), ("versions",), ("partitions",)])
def test_a_pass_builds_only_the_tables_wanted(wanted: tuple[str, ...]) -> None:
    """A pass told which tables to build (``TableCollector.wanted``: ``analyze --groups``
    alone, ``spark --analytics versions``) gives those tables as the Python decoder
    does, with the counters of the pass of every table, on every bundled and shared
    capture, and leaves the others empty without reading their APIs' bodies (no
    counter of theirs moves; the versions table is always built)."""
    from dissector.wire.core import iter_tables
    from dissector.wire.tables import TableCollector

    built = {*wanted, "versions"}
    compared = 0
    for capture in [*BUNDLED, *SHARED]:
        everything = capture_tables(str(capture))
        collector = TableCollector(wanted=frozenset(wanted))
        for _ in iter_tables([str(capture)], Options(), tables=collector, pairs=False):
            pass
        some = collector.result()
        for name in ORACLES:
            got = getattr(some, name)
            if name in built:
                expected = ORACLES[name](str(capture))
                pd.testing.assert_frame_equal(some.frame(name), expected, obj=name)
                assert some.counters[name] == everything.counters[name], (capture.name, name)
                compared += got.num_rows
            else:
                assert got.num_rows == 0, (capture.name, name)
                assert not some.counters[name], (capture.name, name, some.counters[name])
    assert compared > 0


def test_a_ctrl_c_that_cuts_the_core_workers_start_short_stops_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Thread.start() waits for the thread to run, and a Ctrl-C there left the worker
    reading the capture while the pass's end asked the analyzer for its counters: the
    user got "RuntimeError: Already mutably borrowed" (seen under repeated Ctrl-C of
    ``report``). The Ctrl-C must reach the caller, with the worker stopped first."""
    import threading

    from dissector.accounting import Counters
    from dissector.wire.core import iter_tables

    start = threading.Thread.start

    def interrupted_start(thread: threading.Thread) -> None:
        start(thread)
        if thread.name == "kafka-dissector-core":
            raise KeyboardInterrupt  # as Ctrl-C does in start()'s wait

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    counters = Counters()
    with pytest.raises(KeyboardInterrupt):
        for _ in iter_tables([str(BUNDLED[0])] * 50, Options(), counters=counters):
            pass
    assert not [t for t in threading.enumerate() if t.name == "kafka-dissector-core"]


def test_the_core_on_the_callers_thread_gives_the_python_decoders_tables() -> None:
    """``iter_tables(ahead=False)`` (a Spark task given one core: no thread reading
    ahead, the core's packet reading on the same thread) gives the Python decoder's
    tables on every bundled and shared capture, and the pairs the default pass gives,
    batch boundaries aside."""
    from dissector.wire.core import iter_tables
    from dissector.wire.tables import TableCollector

    rows = 0
    for capture in [*BUNDLED, *SHARED]:
        collector = TableCollector()
        inline = [
            row
            for t in iter_tables(
                [str(capture)], Options(), tables=collector, batch_rows=7, ahead=False
            )
            for row in t.to_pylist()
        ]
        assert_same_tables(collector.result(), str(capture))
        threaded = [row for t in iter_tables([str(capture)], Options()) for row in t.to_pylist()]
        assert inline == threaded, capture.name
        rows += len(inline)
    assert rows > 1000
