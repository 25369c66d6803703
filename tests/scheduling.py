"""How ``pytest -n N`` (pytest-xdist) spreads the tests over its workers: tests that
share a machine-wide resource run one after another on one worker, the others wherever
a worker is free.

* ``loopback``: the broker test bed and live captures on ``lo``. The broker is one per
  machine (fixed ports, and the first worker's session would stop it under the
  others'), and a capture on ``lo`` sees every test's loopback traffic.
* ``spark``: Spark sessions and jobs, one JVM at a time: two on a small machine only
  slow each other down, and the standalone-cluster tests take ports of their own.

The resource is read from the test's node id alone (the scheduler, in the controller,
sees nothing else): its module or name says ``broker``, ``live`` or ``spark``.
Collection fails for a test that uses the broker or Spark and is not named so
(``unnamed``, from ``conftest.py``). A name that matches by chance ("first_delivery",
"keepalive") costs only parallelism.

xdist's own ``--dist loadgroup`` is not used: on pytest 9.2 its ``xdist_group`` marks
are silently ignored (pytest-xdist issue 1386), which put two brokers on one port.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

import pytest
from xdist.scheduler import LoadScopeScheduling

LOOPBACK = "loopback"
SPARK = "spark"
# The fixtures and marks of tests that use one of them.
FIXTURES = frozenset({"kafka_broker", "spark"})
MARKS = ("broker", "spark")


def shared_resource(nodeid: str) -> str | None:
    """The machine-wide resource the test ``nodeid`` uses, or None."""
    path, _, name = nodeid.partition("::")
    module = PurePosixPath(path).stem
    if module.startswith("test_live") or "broker" in module or "live" in name:
        return LOOPBACK
    if "spark" in module or "spark" in name:
        return SPARK
    return None


class SharedResourceScheduling(LoadScopeScheduling):
    """xdist's load-by-scope scheduler with a scope per test, except that the tests
    of one shared resource are one scope: one worker runs them in collection order."""

    def _split_scope(self, nodeid: str) -> str:
        return shared_resource(nodeid) or nodeid


def unnamed(items: Iterable[pytest.Item]) -> list[str]:
    """The node ids of the tests that use the broker or Spark (``FIXTURES``,
    ``MARKS``) but whose node id does not say so: the scheduler would put them
    anywhere."""
    return [
        item.nodeid
        for item in items
        if shared_resource(item.nodeid) is None
        and (
            FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or any(item.get_closest_marker(mark) for mark in MARKS)
        )
    ]
