"""``kafka-dissector spark --master spark://...`` on a standalone cluster on loopback.

The test starts a master and one worker (PySpark's own ``bin/spark-class``, bound to
127.0.0.1, bounded waits, stopped by their PIDs) and runs the command as documented in
docs/spark.md, route "package installed in the executors' Python": the executors run
the interpreter named by ``spark.pyspark.python``, here this virtualenv's (the worker's
environment puts this checkout first on PYTHONPATH, as an install would).

Then the same cluster with an executor Python that cannot import the package's
dependencies (this interpreter with ``-S``: no site-packages): the command must fail
with the one-line hint, not a JVM stack trace.

Oracle: ``dissector.analyze`` on the same captures.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

import dissector
from tests.test_spark_cli import CLI_TIMEOUT_S, command, spark_env

REPO = Path(__file__).resolve().parent.parent
CAPTURES = [REPO / "captures" / n for n in ("kafka-4-mixed.pcapng", "tls-on-kafka-port.pcapng")]
LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _spark_class() -> tuple[Path, Path]:
    import pyspark

    home = Path(pyspark.__file__).parent
    script = home / "bin" / "spark-class"
    if not script.exists():
        pytest.skip(f"PySpark has no {script}")
    return home, script


@dataclass(frozen=True)
class Cluster:
    url: str
    workdir: Path


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=5) as resp:
            state = json.load(resp)
    except OSError:
        return 0
    return int(state.get("aliveworkers", 0))


def _wait(what: str, ready: object, procs: list[subprocess.Popen[bytes]], logs: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        for proc in procs:
            if proc.poll() is not None:
                tail = "".join(p.read_text()[-2000:] for p in logs.glob("*.log"))
                pytest.fail(f"{what}: a daemon exited ({proc.returncode}):\n{tail}")
        time.sleep(1)
    pytest.fail(f"{what}: not ready within {START_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = spark_env()
    home, spark_class = _spark_class()
    root = tmp_path_factory.mktemp("standalone")
    logs = root / "logs"
    logs.mkdir()
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP=LOOPBACK, SPARK_NO_DAEMONIZE="1")
    port, ui_port = _free_port(), _free_port()
    url = f"spark://{LOOPBACK}:{port}"
    master_args = ["--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)]
    worker_args = [url, "--host", LOOPBACK, "--cores", "2", "--memory", "1g"]
    worker_args += ["--webui-port", str(_free_port()), "--work-dir", str(root / "work")]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        # spark-class ends in exec: each PID is the daemon's JVM itself.
        for name, cls, args in (
            ("master", "org.apache.spark.deploy.master.Master", master_args),
            ("worker", "org.apache.spark.deploy.worker.Worker", worker_args),
        ):
            with open(logs / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [str(spark_class), cls, *args],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=root,
                    )
                )
        _wait("worker registration", lambda: _alive_workers(ui_port) == 1, procs, logs)
        yield Cluster(url, root)
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _submit(cluster: Cluster, out: Path, python: str, *extra: str) -> subprocess.CompletedProcess:
    conf = {
        "spark.pyspark.python": python,
        "spark.executor.memory": "512m",
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.task.maxFailures": "1",  # a task that cannot start fails the job at once
    }
    args = [str(p) for p in CAPTURES] + ["--master", cluster.url, "-o", str(out), *extra]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return subprocess.run(
        [*command(), "spark", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        cwd=cluster.workdir,
        env=spark_env(),
        check=False,
    )


def test_standalone_cluster_with_the_package_in_the_executors_python(
    cluster: Cluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = _submit(cluster, out, sys.executable)
    assert done.returncode == 0, done.stderr[-4000:]
    want = [dissector.analyze(str(p)) for p in CAPTURES]
    pairs = sum(len(df) for df in want)
    assert f"{len(CAPTURES)} captures (0 failed to decode), {pairs} pairs" in done.stdout
    got = pd.read_parquet(out / "pairs")
    assert len(got) == pairs
    by_capture = got["capture"].str.removeprefix("file:").value_counts().to_dict()
    assert by_capture == {str(p): len(df) for p, df in zip(CAPTURES, want, strict=True) if len(df)}
    statuses = got["status"].value_counts().to_dict()
    assert statuses == pd.concat(want)["status"].value_counts().to_dict()


def test_executors_without_the_package_get_a_one_line_hint(
    cluster: Cluster, tmp_path: Path
) -> None:
    bare = tmp_path / "python-without-site-packages"
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    done = _submit(cluster, tmp_path / "out", str(bare))
    assert done.returncode == 1, done.stderr[-4000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Spark's Python workers ("), last
    assert str(bare) in last and "cannot import" in last and "docs/spark.md" in last
    assert "Traceback (most recent call last)" not in done.stderr
    assert len(done.stderr.splitlines()) <= 5, done.stderr  # no JVM stack traces
    assert not (tmp_path / "out" / "pairs").exists()
