"""The package imported from a zip (Spark's ``--py-files`` / ``addPyFile`` route).

No Spark here: a fresh interpreter imports ``dissector`` from a zip built from this
checkout. A zip cannot carry the native core (a shared library), so analysis from it
must fail with one clear line pointing at the documented route (docs/spark.md), while
the pure-Python parts (the spec model and its start-up cache) still work: inside a zip
``protocol/diskcache.py`` cannot read its sources from a directory, and must still key
its entries (read through importlib.resources), never fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "captures" / "kafka-4-mixed.pcapng"

_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import dissector
from dissector.protocol import diskcache, get_registry
layouts = len(get_registry().specs.combinations())
try:
    dissector.analyze(sys.argv[2])
    native = "loaded"
except ImportError as exc:
    native = str(exc)
print(json.dumps({"file": dissector.__file__, "layouts": layouts, "key": diskcache._key(),
                  "native": native}))
"""


def _zip_package(target: Path) -> Path:
    """The checkout's ``dissector`` package as a zip of its sources (no compiled parts)."""
    package = REPO / "dissector"
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".so":
                zf.write(path, path.relative_to(REPO).as_posix())
    return target


@pytest.mark.slow
def test_package_runs_from_a_zip_with_its_startup_cache(tmp_path: Path) -> None:
    archive = _zip_package(tmp_path / "dissector.zip")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    results = []
    for _ in range(2):  # the second run loads what the first one stored
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, str(archive), str(BUNDLED)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = results
    assert first["file"].startswith(str(archive)), first["file"]
    from dissector.protocol import get_registry

    assert first["layouts"] == second["layouts"] == len(get_registry().specs.combinations())
    assert "native core" in first["native"] and "docs/spark.md" in first["native"]
    # Keyed by the zipped sources exactly as by the same files on disk, and stored.
    from dissector.protocol import diskcache

    assert first["key"] == second["key"] == diskcache._key() is not None
    stored = list((tmp_path / "cache" / "kafka-dissector" / "protocol").glob("*.pickle"))
    assert any(first["key"] in p.name for p in stored), stored
