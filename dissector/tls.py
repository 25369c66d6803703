"""TLS key logs: the secrets the native core decrypts Kafka over TLS with.

A key log is the NSS text format every TLS library writes when asked
(``SSLKEYLOGFILE``, Python's ``ssl.SSLContext.keylog_filename``, Go's
``tls.Config.KeyLogWriter``, the ``extract-tls-secrets`` Java agent). The core reads
all the line forms Wireshark reads (see ``native/src/tls/keylog.rs``); this module only
gathers where they come from: ``--tls-keylog`` files, ``SSLKEYLOGFILE`` when set, and
texts handed over whole (a Spark task gets the content, not a path). Secrets inside a
pcapng capture (Decryption Secrets Blocks) are found by the core itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ENV_VAR = "SSLKEYLOGFILE"

# A scheme then ":/" (hdfs://nn/keys, s3a://bucket/keys/, file:/tmp/keys, file:///tmp/keys):
# a Hadoop path, which only the spark command reads. Requiring the slash keeps a local
# file named "keys:2024.log" local.
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")


class KeyLogError(ValueError):
    """A key log that cannot be read; its message is the one line the CLI prints."""


@dataclass(frozen=True, slots=True)
class KeyLogs:
    """Where a run's TLS secrets come from. ``follow``: the files are read on as they
    grow (live runs: a client appends a line per handshake)."""

    paths: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()
    follow: bool = False

    def __bool__(self) -> bool:
        return bool(self.paths or self.texts)


def is_uri(path: str) -> bool:
    """True for a key log spelled as a URI with a scheme (``hdfs://...``, ``file:/...``):
    read through Hadoop's FileSystem by the spark command, never opened as a local file."""
    return _URI.match(path) is not None


def key_logs(
    paths: Iterable[str | os.PathLike[str]] = (),
    *,
    texts: Iterable[str] = (),
    follow: bool = False,
    environ: Mapping[str, str] | None = None,
) -> KeyLogs | None:
    """The key logs of a run: ``paths``, then ``SSLKEYLOGFILE`` when set (and not given
    already); None when there is none. A path that is not a readable file raises
    ``KeyLogError``, except that a file not there yet is taken when following (a client
    creates its key log at its first handshake); ``SSLKEYLOGFILE`` naming a file not
    there is left out unless following."""
    env = os.environ if environ is None else environ
    given = [os.fspath(p) for p in paths]
    for p in given:
        if not (follow and not os.path.lexists(p)):
            _check(p)
    from_env = env.get(ENV_VAR)
    if from_env and from_env not in given and (follow or os.path.isfile(from_env)):
        given.append(from_env)
    logs = KeyLogs(tuple(given), tuple(texts), follow)
    return logs or None


def _check(path: str) -> None:
    if os.path.isdir(path):
        raise KeyLogError(f"TLS key log {path}: is a directory, not a key log file")
    if not os.path.exists(path):
        # A URI names a file for Hadoop to read, not a local one (dissector.spark.keylogs).
        hint = " (a URI is read by the spark command only)" if is_uri(path) else ""
        raise KeyLogError(f"TLS key log {path}: no such file{hint}")
    if not os.access(path, os.R_OK):
        raise KeyLogError(f"TLS key log {path}: not readable")


def read_texts(paths: Iterable[str]) -> tuple[str, ...]:
    """The contents of key log files (for a run that must not open them itself)."""
    out = []
    for p in paths:
        _check(p)
        with open(p, encoding="utf-8", errors="replace") as f:
            out.append(f.read())
    return tuple(out)
