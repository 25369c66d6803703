"""Start-up cache: the spec model and name tables, kept on disk between runs.

Building the default ``SpecSet`` reflects about 600 kio classes and reads
kafka-python's JSON specs (0.6 s, plus 0.3 s importing both packages); the pickle
of the result loads in about 15 ms. So the built tables are stored under
``${XDG_CACHE_HOME:-~/.cache}/kafka-dissector/protocol``, named by a key over everything
they are derived from: the Python version, the versions of kafka-python and kio,
and the source of the modules that build them. An upgrade or an edit therefore
builds afresh; nothing needs to be invalidated by hand.

The cache only saves time: any problem (no home, read-only disk, a corrupt or
foreign file) falls back to building. ``KAFKA_DISSECTOR_CACHE=off`` disables it.
The directory is used only when it belongs to the user and nobody else can write
to it, since a pickle is code.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ENV_SWITCH = "KAFKA_DISSECTOR_CACHE"
FORMAT = 1  # bump when what is stored changes shape
# The packages whose data the tables are read from.
_PACKAGES = ("kafka-python", "kio")
# Our modules that turn that data into the tables.
_BUILDERS = (
    "sources.py",
    "spec.py",
    "errors.py",
    "names.py",
    "diskcache.py",
    # the native core's copy of the model (export.py reads summary roles and decode rules)
    "export.py",
    "summary.py",
    "tables.py",
    "compile.py",
    "records.py",
    "messages.py",
    # the parent package's rule of which decode errors leave a row's status alone
    "../stages.py",
)


def cache_dir() -> Path | None:
    """Where entries live, or None when caching is off or there is no home."""
    if os.environ.get(ENV_SWITCH, "").lower() in ("off", "0", "no", "false"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory can be determined
            return None
    return Path(base) / "kafka-dissector" / "protocol"


@functools.cache
def _key() -> str | None:
    """What every entry depends on, hashed (computed once per process).

    None when our sources cannot be read (no cache then: a key without them could
    serve tables built by other code).
    """
    h = hashlib.sha256(f"{FORMAT} {sys.version}".encode())
    for package in _PACKAGES:
        h.update(f"{package}={package_version(package)}".encode())
    try:
        for name in _BUILDERS:
            h.update(_source(name))
    except OSError:
        return None
    return h.hexdigest()[:24]


def _source(name: str) -> bytes:
    """The bytes of a module file of this package (``../name``: of its parent package).

    Through the loader that imported this module, not the file system: the package
    may be imported from a zip (Spark's --py-files), where ``__file__`` names no real
    directory but the zip importer reads the same path. ``importlib.resources`` would
    do too, but its import (tempfile, random, ...) costs start-up about 10 ms.
    """
    loader: Any = globals().get("__loader__")
    if hasattr(loader, "get_data") and __file__:
        return loader.get_data(os.path.normpath(os.path.join(os.path.dirname(__file__), name)))
    from importlib import resources

    package = __package__ or "dissector.protocol"
    if name.startswith("../"):
        package, name = package.rpartition(".")[0], name[3:]
    return resources.files(package).joinpath(name).read_bytes()


def package_version(name: str) -> str:
    """The installed version of distribution ``name`` ("absent" when not installed).

    Read from the name of its ``.dist-info`` directory (what pip and uv install), the
    first one along ``sys.path`` as ``importlib.metadata`` would find it: importing
    ``importlib.metadata`` costs a command's start-up about 20 ms (email, zipfile,
    csv...), which is then paid only for other layouts (eggs, zips).
    """
    want = _dist_name(name)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip, a missing directory
            continue
        for item in names:
            if item.endswith(".dist-info"):
                dist, sep, version = item[: -len(".dist-info")].partition("-")
                if sep and _dist_name(dist) == want:
                    return version
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _dist_name(name: str) -> str:
    """A distribution name normalised as PEP 503 says (``Kafka_Python`` = ``kafka-python``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _safe(directory: Path) -> bool:
    """Owned by us and writable by nobody else (POSIX); elsewhere: it exists."""
    try:
        st = directory.stat()
    except OSError:
        return False
    if not hasattr(os, "getuid"):
        return stat.S_ISDIR(st.st_mode)
    return (
        stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def load_or_build(name: str, build: Callable[[], T]) -> T:
    """The stored value named ``name`` for the current key, else ``build()`` (stored)."""
    directory = cache_dir()
    key = _key()
    if directory is None or key is None:
        return build()
    path = directory / f"{name}-{key}.pickle"
    if _safe(directory):
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)
        except FileNotFoundError:
            pass
        except Exception:  # corrupt or from an incompatible run: rebuild over it
            pass
    value = build()
    _store(directory, name, path, value)
    return value


def _store(directory: Path, name: str, path: Path, value: object) -> None:
    import tempfile  # only when storing: a run that loads never pays its import

    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _safe(directory):
            return
        # Written aside and renamed: concurrent runs (Spark workers) never see half a file.
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        for old in directory.glob(f"{name}-*.pickle"):
            if old != path:  # left by other package versions or sources
                old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only or full disk only costs the next run the build again
