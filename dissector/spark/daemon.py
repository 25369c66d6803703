"""The Python workers' daemon (``spark.python.daemon.module``): PySpark's own, started
with a ``sys.path`` that imports PySpark from its installed directory.

The JVM starts every Python worker with ``PYTHONPATH`` beginning with
``$SPARK_HOME/python/lib/pyspark.zip``, the py4j zip and the ``spark-core`` jar. Even
when PySpark is installed (pip puts it in ``site-packages``, where ``SPARK_HOME`` also
points), each new worker then imports ``pyspark.worker`` and everything it needs from the
zip, compiled from source (no bytecode cache inside a zip), and at its first task
``importlib.invalidate_caches`` re-reads the directories of the three archives (thousands
of entries): about 0.4 s of CPU per worker process, measured on a 2-core machine. This
module drops an archive from ``sys.path`` when every package in it is importable
from a directory of the path, in the same version, and then runs PySpark's daemon,
whose forked workers inherit the path.

It also gives the workers' allocators a default (``ALLOCATOR_DEFAULTS``) that the
environment does not already set.

Imports only the standard library before the fork (the daemon must start no thread
before it forks its workers; pyarrow and numpy do).
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Mapping
from importlib.machinery import PathFinder
from pathlib import Path, PurePosixPath

# mimalloc, the allocator of the native core and of pyarrow's default memory pool, hands
# pages a program frees back to the kernel 10 ms after (its purge delay), and the next
# allocation takes them back one page fault at a time. A worker runs task after task,
# and each task frees its tables' buffers as it writes them: kept for a second instead,
# they are reused. Six tasks of a long-poll capture in one process: 54,000 page faults
# instead of 89,000, 0.18 s less system CPU, peak RSS 230 MB instead of 214 MB. Read by
# each mimalloc when it starts: the workers load both after the fork.
ALLOCATOR_DEFAULTS = {"MIMALLOC_PURGE_DELAY": "1000"}

# The file of a package that says its version, compared between archive and directory.
VERSION_FILES = ("version.py", "_version.py", "__version__.py")


def top_level_names(archive: zipfile.ZipFile) -> set[str]:
    """The packages and modules an archive offers to ``import`` (its top-level ``.py``
    files and folders holding one)."""
    names: set[str] = set()
    for member in archive.namelist():
        parts = PurePosixPath(member).parts
        if not member.endswith((".py", ".pyc")) or not parts:
            continue
        names.add(parts[0] if len(parts) > 1 else PurePosixPath(parts[0]).stem)
    return names


def same_version(archive: zipfile.ZipFile, name: str, directory: Path) -> bool:
    """Whether package ``name`` in the archive and in ``directory`` say the same version
    (both have the same version file, byte for byte; neither has one: the same)."""
    for file in VERSION_FILES:
        inside = f"{name}/{file}"
        outside = directory / file
        has_inside = inside in archive.NameToInfo
        if has_inside or outside.is_file():
            return has_inside and outside.is_file() and archive.read(inside) == outside.read_bytes()
    return True


def redundant(entry: str, directories: list[str]) -> bool:
    """Whether archive ``entry`` of ``sys.path`` offers nothing that the directories in
    ``directories`` do not (its packages found there, in the same version)."""
    try:
        with zipfile.ZipFile(entry) as archive:
            for name in top_level_names(archive):
                spec = PathFinder.find_spec(name, directories)
                if spec is None or spec.origin is None:
                    return False
                locations = list(spec.submodule_search_locations or [])
                if locations and not same_version(archive, name, Path(locations[0])):
                    return False
    except (OSError, zipfile.BadZipFile):
        return False
    return True


def pruned_path(path: list[str]) -> list[str]:
    """``path`` without the archives that ``redundant`` finds (directories, and
    archives still needed, keep their order)."""
    directories = [p for p in path if not Path(p or ".").is_file()]
    return [p for p in path if not (Path(p or ".").is_file() and redundant(p, directories))]


def allocator_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``ALLOCATOR_DEFAULTS`` that ``environ`` leaves unset: a setting of the
    user's wins."""
    return {name: value for name, value in ALLOCATOR_DEFAULTS.items() if name not in environ}


def main() -> None:
    os.environ.update(allocator_settings(os.environ))
    kept = pruned_path(sys.path)
    for entry in set(sys.path) - set(kept):
        # its importer, made when this module was looked up, would be re-read too
        sys.path_importer_cache.pop(entry, None)
    sys.path[:] = kept
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
