"""Shared test fixtures: where the conformance captures are, and the tshark oracle; and
how ``pytest -n N`` keeps tests that share a machine-wide resource apart
(``tests/scheduling.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
CAPTURES = REPO / "captures"
# Third-party captures provided beside the checkout; never copied into the repo.
SHARED_CAPTURES = REPO.parent / "shared" / "captures"
KAFKA_BROKER = REPO / "scripts" / "kafka-broker"
BROKER_START_TIMEOUT_S = 420  # includes the first Maven resolution of the jars
BROKER_STOP_TIMEOUT_S = 60


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's (a dev dependency)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``pytest -n N`` (``--dist load``, the default with ``-n``): the shared-resource
    scheduler. Another ``--dist`` asked for is left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from tests.scheduling import SharedResourceScheduling

    return SharedResourceScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test using the broker or Spark must be named so that the scheduler, which sees
    only node ids, keeps it with the others (``scheduling.unnamed``)."""
    from tests.scheduling import unnamed

    misplaced = unnamed(items)
    if misplaced:
        raise pytest.UsageError(
            "tests that use the broker or Spark must say broker, live or spark in their "
            "module or name (tests/scheduling.py): " + ", ".join(misplaced)
        )


@pytest.fixture(scope="session")
def shared_captures() -> Path:
    if not SHARED_CAPTURES.is_dir():
        pytest.skip(f"conformance captures not present: {SHARED_CAPTURES} (../shared/captures)")
    return SHARED_CAPTURES


@pytest.fixture(scope="session")
def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (apt-get install tshark); it is the oracle here")
    return path


def _broker(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_BROKER), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[None]:
    """The test bed broker for the session; stopped by its PID afterwards if started here."""
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        message = f"the broker test bed needs {missing} (Java 17+ and Maven)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    started = _broker("start", timeout=BROKER_START_TIMEOUT_S)
    if started.returncode == 3:
        # Someone's broker from this same state dir is already up: use it, leave it running.
        yield
        return
    assert started.returncode == 0, f"broker did not start:\n{started.stderr[-4000:]}"
    try:
        yield
    finally:
        _broker("stop", timeout=BROKER_STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole test run (a JVM start costs tens of seconds)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17+ (apt-get install openjdk-17-jre-headless)")
    from dissector.spark.job import build_session

    session = build_session(
        "local[2]",
        app_name="kafka-dissector-tests",
        conf={"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
