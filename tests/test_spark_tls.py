"""``spark --tls-keylog`` with key logs on a Hadoop path (issue #20: the fleet's key logs
sit beside its captures, on HDFS or S3, one per broker).

A ``file://`` URI is read through Hadoop's FileSystem like ``hdfs://`` or ``s3a://``
(``dissector.spark.keylogs``), so a folder of key logs given as ``file:///...`` exercises
the fleet path on one machine. Oracle: ``dissector.analyze(capture, tls_keylog=...)``,
which reads the same key log as a local file (its TLS decryption is checked against
tshark in ``test_tls.py``). One CLI run serves the module's comparison; the failures
run the command again (each a JVM start) or use the session's ``spark`` fixture.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

import dissector
from dissector.options import Options
from dissector.schema import COLUMN_NAMES
from dissector.table.frame import write_pairs_parquet
from dissector.tls import KeyLogError, KeyLogs, is_uri
from tests.test_spark_cli import error_lines, spark_cli

REPO = Path(__file__).resolve().parent.parent
TLS = REPO / "captures" / "tls"

# capture -> its key log: a client's (TLS 1.3, OpenSSL lines), the broker's Java agent
# (TLS 1.2, RSA Session-ID lines), a client's with ChaCha20.
KEYED = {
    "tls13-kafka-python": "keys",
    "tls12-java": "broker.keys",
    "tls13-chacha-kafka-python": "keys",
}


@dataclass(frozen=True)
class Fleet:
    code: int
    stdout: str
    stderr: str
    out: Path
    captures: dict[str, Path]  # name -> the capture read
    keys: dict[str, Path]  # name -> its key log, in the keys folder


def _spark_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return spark_cli([*args, "--master", "local[2]", "--analytics", "none"], cwd)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    root = tmp_path_factory.mktemp("spark-tls")
    (root / "captures").mkdir()
    (root / "keys").mkdir()
    captures, keys = {}, {}
    for name, suffix in KEYED.items():
        captures[name] = root / "captures" / f"{name}.pcapng"
        keys[name] = root / "keys" / f"{name}.{suffix}"
        shutil.copyfile(TLS / f"{name}.pcapng", captures[name])
        shutil.copyfile(TLS / f"{name}.{suffix}", keys[name])
    # What a Hadoop job leaves in a folder: not a key log, left out like Spark's scans do.
    (root / "keys" / "_SUCCESS").write_text("")
    folder = (root / "keys").as_uri() + "/"  # file:///.../keys/
    out = root / "out"
    done = _spark_cli([str(root / "captures"), "--tls-keylog", folder, "-o", str(out)], root)
    return Fleet(done.returncode, done.stdout, done.stderr, out, captures, keys)


@pytest.mark.spark
@pytest.mark.slow
def test_key_log_folder_on_a_hadoop_path_decrypts_as_analyze_does(
    fleet: Fleet, tmp_path: Path
) -> None:
    assert fleet.code == 0, fleet.stderr[-4000:]
    oracle = {n: dissector.analyze(p, tls_keylog=fleet.keys[n]) for n, p in fleet.captures.items()}
    want = pd.concat(oracle.values(), ignore_index=True)
    assert len(want) > 60  # the comparison is not vacuous
    assert f"3 captures (0 failed to decode), {len(want)} pairs" in fleet.stdout
    reference = tmp_path / "analyze.parquet"
    write_pairs_parquet(want, reference)  # the rows as analyze -o writes them

    got = pd.read_parquet(fleet.out / "pairs")
    ref = pd.read_parquet(reference)
    # Captures are named by their URI in Spark, by their path in analyze.
    got["capture"] = got["capture"].str.removeprefix("file:")
    key = ["capture", "stream", "correlation_id", "request_time", "response_time"]
    got = got.sort_values(key, ignore_index=True, na_position="first")
    ref = ref.sort_values(key, ignore_index=True, na_position="first")
    assert list(got.columns) == list(COLUMN_NAMES)
    for frame in (got, ref):
        for column in ("topics", "flags"):
            frame[column] = frame[column].map(lambda v: None if v is None else list(v))
    pd.testing.assert_frame_equal(got, ref)
    assert all("tls" in flags for flags in got["flags"])


@pytest.mark.spark
@pytest.mark.slow
def test_every_tls_connection_is_counted_decrypted(fleet: Fleet) -> None:
    assert fleet.code == 0, fleet.stderr[-4000:]
    captures = pd.read_parquet(fleet.out / "captures")
    for row in captures.itertuples():
        name = Path(row.capture).name.removesuffix(".pcapng")
        counters = dict(row.counters)
        oracle = dissector.analyze(fleet.captures[name], tls_keylog=fleet.keys[name])
        connections = oracle.attrs["counters"]["tls_connections"]
        assert connections > 0
        assert counters["tls_connections"] == counters["tls_decrypted_connections"] == connections
        assert "tls_no_secret" not in counters
    assert len(captures) == len(fleet.captures)


@pytest.mark.spark
@pytest.mark.slow
def test_a_missing_key_log_uri_is_one_error_line(tmp_path: Path) -> None:
    """The failure rule (README "Exit status"): one line naming the key log, exit 1, no
    Java trace, nothing written."""
    missing = (tmp_path / "nope" / "keys").as_uri()  # file:///.../nope/keys
    capture = TLS / "tls13-kafka-python.pcapng"
    out = tmp_path / "out"
    done = _spark_cli([str(capture), "--tls-keylog", missing, "-o", str(out)], tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert error_lines(done.stderr) == [f"Error: TLS key log {missing}: no such file"]
    assert not out.exists()


@pytest.mark.spark
@pytest.mark.slow
def test_load_reads_a_key_log_uri(spark: object, tmp_path: Path) -> None:
    """The Python API: a ``KeyLogs`` path that is a URI is read by the driver and shipped."""
    from dissector.spark import load

    name = "tls13-aes128-aiokafka"
    keys = TLS / f"{name}.keys"
    options = Options(tls=KeyLogs(paths=(keys.as_uri(),)))
    fleet = load(spark, str(TLS / f"{name}.pcapng"), options=options)  # type: ignore[arg-type]
    try:
        flags = [list(r["flags"]) for r in fleet.pairs.select("flags").collect()]
        counters = dict(fleet.captures.first()["counters"])
    finally:
        fleet.unpersist()
    oracle = dissector.analyze(TLS / f"{name}.pcapng", tls_keylog=keys)
    assert len(flags) == len(oracle) > 0
    assert all("tls" in f for f in flags)
    assert counters["tls_decrypted_connections"] == counters["tls_connections"] > 0


@pytest.mark.spark
@pytest.mark.slow
def test_key_logs_over_the_cap_are_refused_unread(spark: object, tmp_path: Path) -> None:
    from dissector.spark.keylogs import ship_key_logs

    folder = tmp_path / "keys"
    folder.mkdir()
    for name in ("a.keys", "b.keys"):
        shutil.copyfile(TLS / "tls13-kafka-python.keys", folder / name)
    size = (folder / "a.keys").stat().st_size
    logs = KeyLogs(paths=(folder.as_uri(),))
    shipped = ship_key_logs(spark, logs, max_bytes=2 * size)  # type: ignore[arg-type]
    assert shipped.paths == () and len(shipped.texts) == 2
    with pytest.raises(KeyLogError) as refused:
        ship_key_logs(spark, logs, max_bytes=2 * size - 1)  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith(f"TLS key log {folder.as_uri()} (file:{folder}/b.keys): too large")
    assert "\n" not in message


@pytest.mark.parametrize(
    "path,uri",
    [
        ("hdfs://nn:8020/keys/", True),
        ("s3a://bucket/keys.log", True),
        ("file:///tmp/keys", True),
        ("file:/tmp/keys", True),
        ("/tmp/keys.log", False),
        ("keys.log", False),
        ("keys:2024.log", False),  # a local name with a colon, no scheme
    ],
)
def test_which_key_logs_are_read_through_hadoop(path: str, uri: bool) -> None:
    assert is_uri(path) is uri


def test_the_command_keeps_uris_for_the_driver_and_reads_local_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No JVM: before Spark starts, local key logs are read (and a missing one stops the
    command at once); URIs are kept for the driver to read through Hadoop."""
    import click

    from dissector.cli.common import tls_key_logs

    monkeypatch.delenv("SSLKEYLOGFILE", raising=False)
    local = tmp_path / "client.keys"
    local.write_text("CLIENT_RANDOM 00 11\n")
    logs = tls_key_logs(["hdfs://nn/keys/", str(local)], ship=True)
    assert logs.paths == ("hdfs://nn/keys/",)
    assert logs.texts == ("CLIENT_RANDOM 00 11\n",)
    with pytest.raises(click.ClickException, match="no such file"):
        tls_key_logs([str(tmp_path / "missing.keys"), "hdfs://nn/keys/"], ship=True)
    # Elsewhere a URI is no local file, and the line says who reads those.
    with pytest.raises(click.ClickException, match="a URI is read by the spark command only"):
        tls_key_logs(["hdfs://nn/keys/"])
