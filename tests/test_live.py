"""Live capture on loopback against offline analysis of the same bytes.

The replay tests take a real recorded capture (``local-tansu-confluent-kafka.pcapng``,
confluent-kafka against Tansu), split every TCP connection into the client's and the
broker's bytes with tshark's ``follow,tcp,raw`` (an independent reassembler), and
send them again over real loopback sockets in the recorded order while ``live``
captures ``lo``. The oracles: the offline analysis of the recorded file (same
bytes, other packets), the capture's README counts (an independent decoder), and
tshark. Timings differ between the runs and are not compared, except against the
pcap that live itself wrote, which must give identical rows.

Every loop is bounded in count and time; captures stop by count, by duration, or
by an explicit stop with a bounded drain.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import dissector
from dissector.live import LiveCapture, LiveError, LiveOptions, PcapSource, default_filter
from dissector.live import live as live_fn
from dissector.live.view import CAPTURE_GAP_NOTE, LiveStats, percentile
from dissector.options import Options
from tests.oracle.rows import PairRecord

# The session's broker fixture (starts scripts/kafka-broker, stops it by PID).

REPO = Path(__file__).resolve().parent.parent
TANSU = "local-tansu-confluent-kafka.pcapng"
RECORDED_PORT = 9092
IFACE = "lo"
SOCKET_TIMEOUT_S = 10.0
THREAD_JOIN_S = 30.0
CLI_TIMEOUT_S = 60.0

# Everything a row says about the Kafka exchange itself; endpoints and times differ
# between a recording and its replay.
CONTENT_COLUMNS = [
    "stream",
    "api_key",
    "api_name",
    "api_version",
    "correlation_id",
    "client_id",
    "request_size",
    "response_size",
    "status",
    "error_code",
    "error_name",
    "error_count",
    "topics",
    "partitions",
    "records",
    "record_bytes",
    "compression",
    "throttle_ms",
    "decode_error",
]

pytestmark = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="live capture on lo needs root (or CAP_NET_RAW+CAP_NET_ADMIN)",
)


# ---------------------------------------------------------------- replay helpers


@dataclass(frozen=True)
class Turn:
    from_client: bool
    data: bytes


def follow_streams(
    tshark: str, capture: Path, server_ports: frozenset[int]
) -> dict[int, list[Turn]]:
    """Each TCP connection's payload as alternating client/broker turns, via tshark."""
    streams = tshark_stream_ids(tshark, capture)
    args = [tshark, "-n", "-r", str(capture), "-q"]
    for s in streams:
        args += ["-z", f"follow,tcp,raw,{s}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    result: dict[int, list[Turn]] = {}
    for block in out.split("=" * 67):
        m = re.search(r"Filter: tcp\.stream eq (\d+)", block)
        if not m:
            continue
        node0 = re.search(r"Node 0: .*:(\d+)", block)
        assert node0 is not None
        node0_is_client = int(node0.group(1)) not in server_ports
        turns: list[Turn] = []
        for line in block.splitlines():
            if not line.strip() or not re.fullmatch(r"\t?[0-9a-f]+", line):
                continue
            from_node0 = not line.startswith("\t")
            from_client = from_node0 == node0_is_client
            data = bytes.fromhex(line.strip())
            if turns and turns[-1].from_client == from_client:
                turns[-1] = Turn(from_client, turns[-1].data + data)
            else:
                turns.append(Turn(from_client, data))
        result[int(m.group(1))] = turns
    return result


def tshark_stream_ids(tshark: str, capture: Path) -> list[int]:
    out = subprocess.run(
        [tshark, "-n", "-r", str(capture), "-T", "fields", "-e", "tcp.stream"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return sorted({int(x) for x in out.split()})


def free_listener() -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(SOCKET_TIMEOUT_S)
    return srv


def recv_exactly(sock: socket.socket, n: int) -> None:
    got = 0
    while got < n:  # bounded: each recv waits at most SOCKET_TIMEOUT_S, n is finite
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise AssertionError(f"peer closed after {got} of {n} bytes")
        got += len(chunk)


def connect(srv: socket.socket) -> tuple[socket.socket, socket.socket]:
    """A real loopback connection to ``srv``: (client side, broker side)."""
    client = socket.create_connection(srv.getsockname()[:2], timeout=SOCKET_TIMEOUT_S)
    server, _ = srv.accept()
    server.settimeout(SOCKET_TIMEOUT_S)
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def send_turns(client: socket.socket, server: socket.socket, turns: list[Turn]) -> None:
    for turn in turns:
        sender, receiver = (client, server) if turn.from_client else (server, client)
        sender.sendall(turn.data)
        recv_exactly(receiver, len(turn.data))


ROUND_IDS = 1000
"""Correlation ids of replayed round ``r`` are the recording's plus ``r * ROUND_IDS``."""


def renumbered(turns: list[Turn], offset: int) -> list[Turn]:
    """The turns with every frame's correlation id raised by ``offset``: a client
    numbers its requests upwards and never repeats a recent id on a connection (framing
    relies on that to confirm a frame start found after a hole), so a connection that
    replays a recording many times must number each round anew."""

    def frames(data: bytes, corr_at: int) -> bytes:
        out = bytearray(data)
        at = 0
        while at < len(out):
            size = int.from_bytes(out[at : at + 4], "big", signed=True)
            assert size >= corr_at + 4 and at + 4 + size <= len(out), "a turn ends mid-frame"
            pos = at + 4 + corr_at
            corr = int.from_bytes(out[pos : pos + 4], "big", signed=True)
            out[pos : pos + 4] = (corr + offset).to_bytes(4, "big", signed=True)
            at += 4 + size
        return bytes(out)

    # The id follows api_key and api_version in a request, opens a response.
    return [Turn(t.from_client, frames(t.data, 4 if t.from_client else 0)) for t in turns]


def replay_connection(srv: socket.socket, turns: list[Turn]) -> None:
    """One real loopback connection carrying the recorded turns in order."""
    client, server = connect(srv)
    try:
        send_turns(client, server, turns)
    finally:
        client.close()
        server.close()


def replay(srv: socket.socket, streams: dict[int, list[Turn]], order: list[int]) -> None:
    for s in order:
        replay_connection(srv, streams[s])


class Collector:
    """Runs a LiveCapture's record iterator in a thread, bounded by a join timeout."""

    def __init__(self, cap: LiveCapture) -> None:
        self.cap = cap
        self.records: list[PairRecord] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for rec in self.cap.records():
                self.records.append(rec)
        except BaseException as exc:  # surfaced in finish()
            self.error = exc

    def finish(self) -> list[PairRecord]:
        self.cap.stop("test")
        self._thread.join(THREAD_JOIN_S)
        assert not self._thread.is_alive(), "live capture did not stop"
        if self.error is not None:
            raise self.error
        return self.records


def content(df: pd.DataFrame) -> pd.DataFrame:
    out = df[CONTENT_COLUMNS].copy()
    # Iterated, not mapped: mapping keeps the Arrow list dtype, whose objects are arrays.
    topics = [tuple(t) if t is not None else () for t in out["topics"]]
    out["topics"] = pd.Series(topics, index=out.index, dtype=object)
    out = out.astype(object).where(out.notna(), None)
    return out.sort_values(["stream", "correlation_id"], key=_sort_key).reset_index(drop=True)


def _sort_key(col: pd.Series) -> pd.Series:
    return col.map(lambda v: -1 if v is None else v)


def assert_same_rows(left: pd.DataFrame, right: pd.DataFrame) -> None:
    a, b = content(left), content(right)
    assert len(a) == len(b), f"{len(a)} rows vs {len(b)}"
    for i in range(len(a)):
        ra, rb = a.iloc[i].to_dict(), b.iloc[i].to_dict()
        assert ra == rb, f"row {i} differs:\n{ra}\n{rb}"


def remap(df: pd.DataFrame, order: list[int]) -> pd.DataFrame:
    """Live stream k is the k-th replayed connection: give it the recording's index."""
    out = df.copy()
    out["stream"] = out["stream"].map(lambda s: order[int(s)])
    return out


def frame_of(records: list[PairRecord]) -> pd.DataFrame:
    from dissector.table.frame import records_to_frame

    return records_to_frame(records)


def on_port(port: int, **given: Any) -> LiveOptions:
    """A capture of ``lo`` with ``port`` as the broker port."""
    return LiveOptions(IFACE, analysis=Options(ports=frozenset({port})), **given)


CLI_CODE = "import sys; from dissector.cli import main; sys.argv[0] = 'kafka-dissector'; main()"


class Cli:
    """``kafka-dissector live ...`` in a subprocess; stderr is read by a thread so the
    test can wait for the capture to be active without racing ``communicate``."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLI_CODE, "live", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err_lines: list[str] = []
        self.active = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:  # ends when the process closes stderr
            self.err_lines.append(line)
            if line.startswith("capturing on"):
                self.active.set()

    def wait_active(self) -> None:
        if not self.active.wait(CLI_TIMEOUT_S):
            self.proc.kill()
            raise AssertionError("the CLI did not start capturing: " + "".join(self.err_lines))

    def wait_for(self, pattern: str) -> None:
        """Until a stderr line matches (bounded): e.g. an interval line naming an API."""
        deadline = time.monotonic() + CLI_TIMEOUT_S
        while time.monotonic() < deadline:
            if any(re.search(pattern, line) for line in list(self.err_lines)):
                return
            time.sleep(0.1)
        raise AssertionError(f"no stderr line matched {pattern!r}: " + "".join(self.err_lines))

    def finish(self) -> tuple[int, str, str]:
        try:
            assert self.proc.stdout is not None
            stdout = self.proc.stdout.read()  # EOF when the process exits
            self.proc.wait(CLI_TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        return self.proc.returncode, stdout, "".join(self.err_lines)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tansu(shared_captures: Path) -> Path:
    path = shared_captures / TANSU
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return path


@pytest.fixture(scope="module")
def tansu_streams(tshark: str, tansu: Path) -> dict[int, list[Turn]]:
    return follow_streams(tshark, tansu, frozenset({RECORDED_PORT}))


@pytest.fixture(scope="module")
def tansu_offline(tansu: Path) -> pd.DataFrame:
    return dissector.analyze(tansu)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    srv = free_listener()
    yield srv
    srv.close()


# ---------------------------------------------------------------- replay == offline


def test_replay_live_equals_offline_and_its_own_pcap(
    tansu_streams: dict[int, list[Turn]],
    tansu_offline: pd.DataFrame,
    listener: socket.socket,
    tmp_path: Path,
) -> None:
    port = listener.getsockname()[1]
    pcap = tmp_path / "live.pcapng"
    cap = LiveCapture(
        LiveOptions(
            IFACE, analysis=Options(ports=frozenset({port})), duration=60, write_pcap=str(pcap)
        )
    )
    collector = Collector(cap)
    replay(listener, tansu_streams, sorted(tansu_streams))
    time.sleep(0.3)  # lets the FINs pass; the drain bounds the rest
    records = collector.finish()
    live_df = frame_of(records)

    # The capture's README (independent decoder): 84 requests, all answered.
    assert len(live_df) == 84
    assert (live_df["status"].isin(["ok", "error"])).all()
    assert Counter(zip(live_df["api_name"], live_df["api_version"], strict=True)) == Counter(
        {("Produce", 10): 16, ("Fetch", 16): 7, ("ListOffsets", 7): 10, ("Metadata", 12): 11,
         ("OffsetCommit", 9): 4, ("OffsetFetch", 9): 2, ("FindCoordinator", 2): 3,
         ("JoinGroup", 5): 2, ("Heartbeat", 3): 1, ("LeaveGroup", 1): 1, ("SyncGroup", 3): 1,
         ("ListGroups", 5): 1, ("ApiVersions", 3): 13, ("CreateTopics", 4): 1,
         ("DescribeConfigs", 1): 1, ("ConsumerGroupDescribe", 0): 1,
         ("GetTelemetrySubscriptions", 0): 9}
    )  # fmt: skip
    produce = live_df[live_df["api_name"] == "Produce"]
    assert int(produce["records"].sum()) == 1000

    # Same bytes, same rows as the offline analysis of the recording.
    assert_same_rows(live_df, tansu_offline)
    assert (live_df["broker_port"] == port).all()
    assert (live_df["capture"] == f"live:{IFACE}").all()

    # Nothing lost: libpcap dropped nothing, no pair flagged.
    assert cap.final_stats.dropped == 0
    assert cap.flagged == 0

    # The pcap live wrote gives exactly the live rows, timings included.
    from_pcap = dissector.analyze(pcap, ports=[port])
    assert len(from_pcap) == len(live_df)
    cols = [c for c in live_df.columns if c != "capture"]
    a = live_df[cols].sort_values(["stream", "correlation_id"]).reset_index(drop=True)
    b = from_pcap[cols].sort_values(["stream", "correlation_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def test_replay_of_the_projects_recorded_capture(
    tshark: str, listener: socket.socket, tmp_path: Path
) -> None:
    """captures/kafka-4-mixed.pcapng (real Apache Kafka 4.4, many clients, SASL, errors,
    two unanswered requests): replayed over one loopback port, live == offline."""
    recorded = REPO / "captures" / "kafka-4-mixed.pcapng"
    if not recorded.is_file():
        pytest.skip(f"{recorded} is not present")
    streams = follow_streams(tshark, recorded, frozenset({9092, 9094}))
    offline = dissector.analyze(recorded)
    port = listener.getsockname()[1]
    cap = LiveCapture(on_port(port, duration=120))
    collector = Collector(cap)
    replay(listener, streams, sorted(streams))
    time.sleep(0.3)
    live_df = frame_of(collector.finish())
    assert len(live_df) == len(offline) > 400
    assert sorted(live_df["status"].unique()) == ["error", "ok", "unanswered"]
    assert_same_rows(live_df, offline)
    assert cap.final_stats.dropped == 0


def test_replay_over_ipv6_loopback(
    tansu_streams: dict[int, list[Turn]], tansu_offline: pd.DataFrame
) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python build")
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        srv.bind(("::1", 0))
    except OSError as exc:
        srv.close()
        pytest.skip(f"no ::1 on this host: {exc}")
    srv.listen(4)
    srv.settimeout(SOCKET_TIMEOUT_S)
    port = srv.getsockname()[1]
    try:
        cap = LiveCapture(on_port(port, duration=60))
        collector = Collector(cap)
        replay(srv, tansu_streams, [1, 3])
        time.sleep(0.3)
        records = collector.finish()
    finally:
        srv.close()
    got = remap(frame_of(records), [1, 3])
    assert (got["client_ip"] == "::1").all() and (got["broker_ip"] == "::1").all()
    assert_same_rows(got, tansu_offline[tansu_offline["stream"].isin([1, 3])])


def test_pcap_written_by_live_is_read_by_tshark(
    tshark: str, tansu_streams: dict[int, list[Turn]], listener: socket.socket, tmp_path: Path
) -> None:
    port = listener.getsockname()[1]
    pcap = tmp_path / "live.pcap"  # classic pcap this time
    cap = LiveCapture(
        LiveOptions(
            IFACE, analysis=Options(ports=frozenset({port})), duration=60, write_pcap=str(pcap)
        )
    )
    collector = Collector(cap)
    replay(listener, tansu_streams, [0, 1])
    time.sleep(0.3)
    records = collector.finish()
    out = subprocess.run(
        [tshark, "-n", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-T", "fields",
         "-e", "kafka.request_key", "-e", "kafka.correlation_id", "-Y", "kafka.request_key"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    tshark_requests = Counter()
    for line in out.splitlines():
        keys, corrs = line.split("\t")
        for k, c in zip(keys.split(","), corrs.split(","), strict=True):
            tshark_requests[(int(k), int(c))] += 1
    ours = Counter((r.api_key, r.correlation_id) for r in records)
    assert ours == tshark_requests
    assert int(subprocess.run(
        [tshark, "-n", "-r", str(pcap), "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.split()[-1]) == cap.frames  # fmt: skip


def test_python_api_yields_frames_per_interval(
    tansu_streams: dict[int, list[Turn]], tansu_offline: pd.DataFrame, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    stop = threading.Event()
    chunks = live_fn(IFACE, ports=[port], interval=0.2, duration=60, stop=stop)
    frames: list[pd.DataFrame] = []

    def consume() -> None:
        for df in chunks:
            frames.append(df)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    replay(listener, tansu_streams, [1])
    time.sleep(0.5)
    stop.set()
    t.join(THREAD_JOIN_S)
    assert not t.is_alive()
    assert len(frames) >= 2  # interval chunks and the final one
    assert all(list(df.columns) == list(dissector.COLUMN_NAMES) for df in frames)
    got = pd.concat([df for df in frames if len(df)], ignore_index=True)
    assert_same_rows(remap(got, [1]), tansu_offline[tansu_offline["stream"] == 1])
    assert "capture_stats" in frames[-1].attrs


def test_module_is_callable_as_dissector_live() -> None:
    import dissector.live as module

    assert callable(module)
    assert callable(dissector.live)  # the package attribute, as notebooks call it
    with pytest.raises(LiveError, match="no such network interface"):
        module("no-such-if0", duration=1)


# ---------------------------------------------------------------- stopping


def test_count_stops_after_n_pairs_and_open_requests_are_unanswered(
    tansu_streams: dict[int, list[Turn]], listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    cap = LiveCapture(on_port(port, count=5, duration=60))
    collector = Collector(cap)
    replay(listener, tansu_streams, [1])  # 11 pairs in stream 1
    collector._thread.join(THREAD_JOIN_S)
    records = collector.records
    assert cap.stop_reason == "count"
    assert sum(r.status in ("ok", "error") for r in records) == 5


def test_unanswered_request_reported_on_stop(
    tansu_streams: dict[int, list[Turn]], listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    cap = LiveCapture(on_port(port, duration=60))
    collector = Collector(cap)
    # The client's first request goes out, the broker never answers; the
    # connection stays open while live stops.
    first = tansu_streams[0][0]
    assert first.from_client
    client, server = connect(listener)
    try:
        client.sendall(first.data)
        recv_exactly(server, len(first.data))
        deadline = time.monotonic() + THREAD_JOIN_S
        while not cap.open_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cap.open_requests() == {"ApiVersions": 1}  # seen as open while waiting
        records = collector.finish()
    finally:
        client.close()
        server.close()
    assert [r.status for r in records] == ["unanswered"]
    assert records[0].api_name == "ApiVersions"


def test_cli_sigterm_writes_everything(
    tansu_streams: dict[int, list[Turn]],
    tansu_offline: pd.DataFrame,
    listener: socket.socket,
    tmp_path: Path,
) -> None:
    port = listener.getsockname()[1]
    out = tmp_path / "pairs.parquet"
    raw = tmp_path / "raw.pcapng"
    cli = Cli(
        "-i", IFACE, "--ports", str(port), "--interval", "0.3", "-o", str(out),
        "--write-pcap", str(raw), "--view", "plain", "--duration", "60",
    )  # fmt: skip
    cli.wait_active()
    replay(listener, tansu_streams, [0, 1, 2])
    cli.wait_for(r"^  ApiVersions: [0-9.]+ req/s")  # the view has seen traffic
    cli.proc.send_signal(signal.SIGTERM)
    code, stdout, stderr = cli.finish()
    assert code == 0, stderr
    assert "stopped: SIGTERM" in stdout
    assert "kernel drops 0" in stderr  # the live lines show libpcap's drop count
    written = pd.read_parquet(out)
    expected = tansu_offline[tansu_offline["stream"].isin([0, 1, 2])]
    assert_same_rows(written, expected)  # replayed in recorded order: same stream indexes
    assert_same_rows(dissector.analyze(raw, ports=[port]), expected)


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_cli_outputs_equal_analyze_of_its_own_pcap(
    ext: str,
    tansu_streams: dict[int, list[Turn]],
    tansu_offline: pd.DataFrame,
    listener: socket.socket,
    tmp_path: Path,
) -> None:
    """``live -o`` and ``analyze -o`` of the frames live saw write the same file: same
    Parquet schema (and metadata), same CSV and JSON lines, row for row (all but the
    ``capture`` column, which names the interface or the file)."""
    import csv
    import json

    import pyarrow.parquet as pq

    port = listener.getsockname()[1]
    out, raw, offline = tmp_path / f"live.{ext}", tmp_path / "raw.pcapng", tmp_path / f"a.{ext}"
    cli = Cli(
        "-i", IFACE, "--ports", str(port), "--interval", "0.2", "-o", str(out),
        "--write-pcap", str(raw), "--view", "none", "--duration", "60",
    )  # fmt: skip
    cli.wait_active()
    replay(listener, tansu_streams, [0, 1, 2])
    time.sleep(0.5)
    cli.proc.send_signal(signal.SIGTERM)
    code, _stdout, stderr = cli.finish()
    assert code == 0, stderr
    done = subprocess.run(
        [sys.executable, "-m", "dissector.cli", "analyze", str(raw), "--ports", str(port),
         "-o", str(offline), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr

    def rows(path: Path) -> list[dict[str, object]]:
        if ext == "parquet":
            got = pq.read_table(path).drop_columns(["capture"]).to_pylist()
        elif ext == "csv":
            with open(path, newline="", encoding="utf-8") as fh:
                got = [dict(r) for r in csv.DictReader(fh)]
        else:
            got = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for r in got:
            r.pop("capture", None)
        return sorted(got, key=lambda r: (int(str(r["stream"])), int(str(r["correlation_id"]))))

    live_rows, offline_rows = rows(out), rows(offline)
    # Every pair of the three connections (the recording's own analysis), then equal.
    assert len(live_rows) == int(tansu_offline["stream"].isin([0, 1, 2]).sum()) > 0
    assert live_rows == offline_rows
    if ext == "parquet":
        assert pq.read_schema(out).equals(pq.read_schema(offline), check_metadata=True)
        assert pq.ParquetFile(out).num_row_groups >= 1


def test_cli_ctrl_c_stops_cleanly(listener: socket.socket, tmp_path: Path) -> None:
    port = listener.getsockname()[1]
    out = tmp_path / "pairs.jsonl"
    cli = Cli("-i", IFACE, "--ports", str(port), "-o", str(out), "--view", "none")
    cli.wait_active()
    cli.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = cli.finish()
    assert code == 0, stderr
    assert "stopped: SIGINT" in stdout
    assert out.exists()


def test_cli_duration(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    started = time.monotonic()
    cli = Cli("-i", IFACE, "--ports", str(port), "--duration", "1", "--view", "none")
    code, stdout, stderr = cli.finish()
    assert code == 0, stderr
    assert 1.0 <= time.monotonic() - started < 20
    assert "stopped: duration" in stdout
    assert "dropped 0" in stdout


# ---------------------------------------------------------------- lost packets


def test_kernel_drops_are_counted_and_affected_pairs_flagged(
    tansu_streams: dict[int, list[Turn]], tansu_offline: pd.DataFrame
) -> None:
    """One long connection repeats a recorded conversation; while nobody reads the
    1 MiB ring it overflows (libpcap drops), then reading resumes and the same
    connection goes on. The hole is inside a connection, so the rows around it
    must be marked; every unmarked row must equal the recording's row. Each round
    numbers its requests anew (``renumbered``), as a client does."""
    big = max(tansu_streams, key=lambda s: sum(len(t.data) for t in tansu_streams[s]))
    turns = tansu_streams[big]
    per_round = sum(len(t.data) for t in turns)
    srv = free_listener()
    port = srv.getsockname()[1]
    cap = LiveCapture(on_port(port, buffer_mib=1, duration=60))
    records: list[PairRecord] = []
    reader = threading.Thread(target=lambda: records.extend(cap.records()), daemon=True)
    try:
        client, server = connect(srv)
        try:
            # 8 MiB while the ring (1 MiB) is not read: it must overflow.
            rounds = (8 << 20) // per_round + 1
            for r in range(rounds):
                send_turns(client, server, renumbered(turns, r * ROUND_IDS))
            reader.start()
            time.sleep(1.0)  # the reader empties the ring
            for r in range(rounds, rounds + 3):  # the same connection, captured again
                send_turns(client, server, renumbered(turns, r * ROUND_IDS))
        finally:
            client.close()
            server.close()
    finally:
        srv.close()
    time.sleep(0.3)
    cap.stop("test")
    reader.join(THREAD_JOIN_S)
    assert not reader.is_alive()
    assert cap.final_stats.dropped > 0, "the ring did not overflow; the test proves nothing"
    assert cap.health().kernel_drops == cap.final_stats.dropped
    assert cap.counters["tcp_gaps"] > 0  # the reassembler saw the hole

    offline = {
        int(r.correlation_id): r
        for r in content(tansu_offline[tansu_offline["stream"] == big]).itertuples(index=False)
    }
    marked = clean = clean_after_hole = 0
    for rec in records:
        if rec.status in ("orphan_response", "unanswered") or CAPTURE_GAP_NOTE in rec.flags:
            marked += 1
            continue
        clean_after_hole += marked > 0
        ref = offline[rec.correlation_id % ROUND_IDS]
        assert (rec.api_name, rec.api_version, rec.status, rec.records, rec.error_code) == (
            ref.api_name,
            ref.api_version,
            ref.status,
            ref.records,
            ref.error_code,
        ), f"unflagged pair differs from the recording: {rec}"
        clean += 1
    print(f"drops {cap.final_stats.dropped}, rows {len(records)}, marked {marked}, "
          f"clean {clean} ({clean_after_hole} after the hole)")  # fmt: skip
    assert marked > 0
    assert clean >= len(offline)  # at least a round's worth decoded around the hole
    assert clean_after_hole > 0  # and decoding recovered after it
    assert cap.flagged == sum(1 for r in records if CAPTURE_GAP_NOTE in r.flags)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_pcap_write_failure_stops_with_reason_and_keeps_the_rows(
    tansu_streams: dict[int, list[Turn]], tansu_offline: pd.DataFrame, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    cap = LiveCapture(
        LiveOptions(
            IFACE, analysis=Options(ports=frozenset({port})), duration=60, write_pcap="/dev/full"
        )
    )
    collector = Collector(cap)
    # The connection with the most bytes: more than the file's write buffer.
    big = max(tansu_streams, key=lambda s: sum(len(t.data) for t in tansu_streams[s]))
    replay(listener, tansu_streams, [big])
    collector._thread.join(THREAD_JOIN_S)
    records = collector.finish()
    assert cap.stop_reason is not None
    assert cap.stop_reason.startswith("writing /dev/full failed: [Errno 28]")
    assert cap.pcap_error == cap.stop_reason
    # Everything captured up to the failure is analysed; nothing is silently wrong.
    assert any(r.status == "ok" for r in records)
    got = remap(frame_of(records), [big])
    expected = content(tansu_offline[tansu_offline["stream"] == big])
    for row in content(got).to_dict(orient="records"):
        if row["status"] == "unanswered":
            continue  # its response came after the stop
        assert row in expected.to_dict(orient="records")


# ---------------------------------------------------------------- errors


def test_missing_interface_is_a_clear_error() -> None:
    with pytest.raises(LiveError, match=r"no such network interface: 'nope0' \(available: .*lo"):
        PcapSource("nope0", default_filter())


def test_bad_filter_is_a_clear_error() -> None:
    with pytest.raises(LiveError, match=r"bad capture filter 'tcp port': .*syntax error"):
        PcapSource(IFACE, "tcp port")
    with pytest.raises(LiveError, match="bad capture filter"):
        PcapSource(IFACE, "tcp port 99999")


def test_cli_errors_exit_nonzero() -> None:
    code, _out, err = Cli("-i", "nope0", "--duration", "1").finish()
    assert code == 1
    assert "no such network interface: 'nope0'" in err
    code, _out, err = Cli("-i", IFACE, "-f", "tcp and (", "--duration", "1").finish()
    assert code == 1
    assert "bad capture filter" in err


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) not installed")
def test_missing_privileges_is_a_clear_error() -> None:
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-net_raw,-net_admin",
         sys.executable, "-c", CLI_CODE, "live", "-i", IFACE, "--duration", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 1
    assert "no permission to capture on lo" in done.stderr
    assert "CAP_NET_RAW" in done.stderr


def test_default_filter_follows_ports() -> None:
    assert default_filter([9092, 19092]) == "tcp and (port 9092 or port 19092)"
    assert "port 9092" in default_filter()


# ---------------------------------------------------------------- view arithmetic


def test_percentile_matches_pandas() -> None:
    values = [0.4, 12.0, 3.5, 7.25, 1.0, 99.0, 2.0]
    s = pd.Series(values)
    assert percentile(values, 0.5) == pytest.approx(s.quantile(0.5))
    assert percentile(values, 0.99) == pytest.approx(s.quantile(0.99))
    assert percentile([], 0.5) is None


def test_view_counts_match_the_offline_frame(tansu_offline: pd.DataFrame) -> None:
    from dissector.live.view import CaptureHealth

    stats = LiveStats()
    stats.add_table(pa.Table.from_pandas(tansu_offline, preserve_index=False))
    snap = stats.snapshot(title="t", seconds=2.0, health=CaptureHealth(), whole_run=True)
    by_api = {r.api: r for r in snap.rows}
    grouped = tansu_offline.groupby("api_name", observed=True)
    for api, group in grouped:
        lat = group["latency_ms"].astype("float64")
        row = by_api[str(api)]
        assert row.requests == len(group)
        assert row.rate == pytest.approx(len(group) / 2.0)
        assert row.p50_ms == pytest.approx(lat.quantile(0.5))
        assert row.p99_ms == pytest.approx(lat.quantile(0.99))
        assert row.errors == int(group["status"].isin(["error", "malformed"]).sum())
        assert row.unanswered == int((group["status"] == "unanswered").sum())
        gaps = group["flags"].map(lambda f: f is not None and CAPTURE_GAP_NOTE in list(f))
        assert row.flagged == int(gaps.sum())
        named = group[group["status"] == "error"]["error_name"].value_counts()
        assert dict(row.top_errors) == {str(k): int(v) for k, v in named.head(3).items() if v}
    assert sum(r.requests for r in snap.rows) == len(tansu_offline)


# ---------------------------------------------------------------- real broker


def tshark_requests_by_client(
    tshark: str, pcap: Path, port: int, clients: set[str]
) -> Counter[tuple[str, int]]:
    """(client_id, api_key) of every Kafka request tshark decodes for ``clients``."""
    out = subprocess.run(
        [tshark, "-n", "-r", str(pcap), "-d", f"tcp.port=={port},kafka", "-Y",
         "kafka.request_key", "-T", "fields", "-e", "kafka.client_id", "-e", "kafka.request_key"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    counts: Counter[tuple[str, int]] = Counter()
    for line in out.splitlines():
        ids, keys = line.split("\t")
        # One frame may carry several requests; tshark joins each field's values with ",".
        for cid, key in zip(ids.split(","), keys.split(","), strict=True):
            if cid in clients:
                counts[(cid, int(key))] += 1
    return counts


BROKER_PORT = 9092  # scripts/kafka-broker's PLAINTEXT listener
PRODUCED = 200


@pytest.mark.broker
@pytest.mark.usefixtures("kafka_broker")
def test_live_against_real_broker(tshark: str, tmp_path: Path) -> None:
    """Real Apache Kafka and kafka-python while live captures lo.

    Oracles: what the client says (acks, the error it raised), tshark's Kafka
    dissector on the pcap live wrote, and the offline analysis of that pcap.
    """
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    pcap = tmp_path / "broker.pcapng"
    cap = LiveCapture(
        LiveOptions(
            IFACE,
            analysis=Options(ports=frozenset({BROKER_PORT})),
            duration=180,
            write_pcap=str(pcap),
        )
    )
    collector = Collector(cap)
    topic = f"live-{os.getpid()}-{time.time_ns()}"
    bootstrap = f"127.0.0.1:{BROKER_PORT}"
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="live-test-admin", request_timeout_ms=30_000
    )
    producer = None
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        with pytest.raises(TopicAlreadyExistsError) as raised:
            admin.create_topics([NewTopic(topic, 1, 1)])
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, client_id="live-test-producer", linger_ms=0, acks=1
        )
        futures = [producer.send(topic, b"value-%d" % i) for i in range(PRODUCED)]
        producer.flush(60)
        acked = sum(1 for f in futures if f.succeeded())
    finally:
        if producer is not None:
            producer.close(10)
        admin.close()
    time.sleep(0.5)  # the FINs of the closed connections
    records = collector.finish()
    df = frame_of(records)

    assert acked == PRODUCED
    produce = df[(df["client_id"] == "live-test-producer") & (df["api_name"] == "Produce")]
    assert int(produce["records"].sum()) == acked
    assert (produce["status"] == "ok").all()
    assert produce["latency_ms"].notna().all()

    creates = df[(df["client_id"] == "live-test-admin") & (df["api_name"] == "CreateTopics")]
    assert sorted(creates["status"]) == ["error", "ok"]
    failed = creates[creates["status"] == "error"].iloc[0]
    assert failed["error_name"] == raised.value.message  # TOPIC_ALREADY_EXISTS
    assert list(failed["topics"]) == [topic]

    # Requests per client and API key as tshark's Kafka dissector counts them in the
    # same bytes. Only our clients: other tests may use the shared broker meanwhile.
    ours = {"live-test-admin", "live-test-producer"}
    mine = df[df["client_id"].isin(ours).fillna(False)]
    assert Counter(zip(mine["client_id"], mine["api_key"].astype(int), strict=True)) == (
        tshark_requests_by_client(tshark, pcap, BROKER_PORT, ours)
    )
    assert (mine["status"].isin(["ok", "error"])).all()
    assert not mine["flags"].map(lambda f: CAPTURE_GAP_NOTE in f).any()
    assert cap.final_stats.dropped == 0
    from_pcap = dissector.analyze(pcap, ports=[BROKER_PORT])
    cols = [c for c in df.columns if c != "capture"]
    a = df[cols].sort_values(["stream", "correlation_id"]).reset_index(drop=True)
    b = from_pcap[cols].sort_values(["stream", "correlation_id"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)


def _latency_table(values: list[float], api: str = "Produce") -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "api_name": pa.array([api] * n),
            "status": pa.array(["ok"] * n),
            "error_name": pa.array([None] * n, pa.string()),
            "flags": pa.array([[]] * n, pa.list_(pa.string())),
            "latency_ms": pa.array(values, pa.float64()),
        }
    )


def test_view_latency_sample_is_bounded_and_representative() -> None:
    import random
    import statistics

    from dissector.live.view import LATENCY_SAMPLE

    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(LATENCY_SAMPLE + 130_000)]
    stats = LiveStats()
    # In batches of uneven size, as the core hands them over.
    at = 0
    for size in [1, 999, 30_000, 20_000, 7, 64_000] * 10:
        if at >= len(values):
            break
        stats.add_table(_latency_table(values[at : at + size]))
        at += size
    stats.add_table(_latency_table(values[at:]))
    window = stats.total["Produce"]
    assert window.requests == len(values)
    assert len(window.latencies) == LATENCY_SAMPLE
    # A uniform sample of all the values, not the first ones: its median and p99 are
    # those of the whole (an exponential distribution; the first 50,000 alone would
    # match too, so the later values are made larger and must show up).
    assert statistics.median(window.latencies) == pytest.approx(statistics.median(values), rel=0.05)
    late = LiveStats()
    late.add_table(_latency_table(values[:LATENCY_SAMPLE]))
    late.add_table(_latency_table([v + 100.0 for v in values[LATENCY_SAMPLE:]]))
    kept_late = sum(1 for v in late.total["Produce"].latencies if v >= 100.0)
    share = (len(values) - LATENCY_SAMPLE) / len(values)
    assert kept_late / LATENCY_SAMPLE == pytest.approx(share, rel=0.03)


def test_rendered_view_shows_rates_errors_and_drops(tansu_offline: pd.DataFrame) -> None:
    from rich.console import Console

    from dissector.live.view import CaptureHealth, plain_lines, render

    stats = LiveStats()
    stats.add_table(pa.Table.from_pandas(tansu_offline, preserve_index=False))
    health = CaptureHealth(packets=318, kernel_drops=5, interface_drops=0, tcp_gaps=2)
    snap = stats.snapshot(
        title="t", seconds=4.0, health=health, open_by_api={"Fetch": 2}, whole_run=True
    )
    console = Console(record=True, width=200)
    console.print(render(snap))
    text = console.export_text()
    assert "kernel drops 5" in text
    errors = tansu_offline[tansu_offline["status"] == "error"]
    assert len(errors) == 1
    name = errors.iloc[0]["error_name"]
    api = errors.iloc[0]["api_name"]
    line = next(ln for ln in text.splitlines() if ln.strip("│ ").startswith(api))
    assert f"{name} x1" in line
    produce = next(ln for ln in plain_lines(snap) if ln.strip().startswith("Produce:"))
    assert "4.0 req/s, 16 requests" in produce  # 16 Produce pairs over 4 s
    fetch = next(ln for ln in plain_lines(snap) if ln.strip().startswith("Fetch:"))
    assert "open 2" in fetch
