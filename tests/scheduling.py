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
``conftest.py`` checks at collection that every test using the broker or Spark is
named so. A name that matches by chance ("delivered") costs only parallelism.

xdist's own ``--dist loadgroup`` is not used: on pytest 9.2 its ``xdist_group`` marks
are silently ignored (pytest-xdist issue 1386), which put two brokers on one port.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from xdist.scheduler import LoadScopeScheduling

LOOPBACK = "loopback"
SPARK = "spark"


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
