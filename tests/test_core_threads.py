"""The native core called from one thread after another (the driver of a local Spark
job reads capture facts on a thread pool; a fleet's scan runs on pool threads that
come and go). mimalloc v3, the core's allocator at first, crashed the process
(SIGSEGV) on the second thread's first call; the core now builds mimalloc v2. Run in a
child process: a crash must fail the test, not end the test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "captures" / "kafka-4-mixed.pcapng"

CHILD = textwrap.dedent(
    """
    import sys, threading
    from dissector.wire.sets import file_facts

    records = []
    for _ in range(4):  # each call on a new thread, the one before gone
        thread = threading.Thread(target=lambda: records.append(file_facts(sys.argv[1]).records))
        thread.start()
        thread.join()
    print(records)
    """
)


def test_file_facts_on_successive_threads() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(CAPTURE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [int(n) for n in done.stdout.strip(" []\n").split(",")]
    assert len(records) == 4 and len(set(records)) == 1 and records[0] > 0
