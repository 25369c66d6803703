"""TLS key logs on Hadoop paths, read on the driver and shipped to the tasks as text.

A key log spelled as a URI with a scheme (``hdfs://nn/keys/``, ``s3a://bucket/keys.log``,
``file:///shared/keys/``; ``dissector.tls.is_uri``) is read through Hadoop's FileSystem
in the driver's JVM, with the cluster's configuration and credentials, as the captures
are listed (``read``). A folder stands for the files in it (not its sub-folders; names
starting with ``_`` or ``.`` are left out as in Spark's scans: ``_SUCCESS``, the
``.crc`` files Hadoop writes beside local files), a glob for the files it matches. The
tasks then get the contents, never a path they might not reach; plain paths are left
as they are (the spark command has read them already, ``load``'s tasks open them).

Every task holds every shipped key log, so their total is capped (``MAX_SHIPPED_BYTES``):
a file over what is left is refused by its size, before it is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dissector.tls import KeyLogError, KeyLogs, is_uri

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from dissector.options import Options

MAX_SHIPPED_BYTES = 256 << 20
"""The key logs a run ships to its tasks, in all: the secrets of some 300,000 TLS 1.3
connections (four or five lines of under 200 bytes each), copied into every task's memory."""

MIB = 1 << 20


def ship_options(
    spark: SparkSession, options: Options, max_bytes: int = MAX_SHIPPED_BYTES
) -> Options:
    """``options`` with their Hadoop key logs read into texts (``ship_key_logs``)."""
    if options.tls is None:
        return options
    return dataclasses.replace(options, tls=ship_key_logs(spark, options.tls, max_bytes))


def ship_key_logs(
    spark: SparkSession, logs: KeyLogs, max_bytes: int = MAX_SHIPPED_BYTES
) -> KeyLogs:
    """``logs`` with the paths that are URIs replaced by their contents, read through
    Hadoop; ``KeyLogError`` (one line) for a path that matches nothing or cannot be read,
    and for texts over ``max_bytes`` in all."""
    shipped = sum(len(t.encode("utf-8", "replace")) for t in logs.texts)
    if shipped > max_bytes:
        raise KeyLogError(
            f"TLS key logs: {_size(shipped)} in all, over the {_size(max_bytes)} "
            "shipped to the Spark tasks at most"
        )
    uris = [p for p in logs.paths if is_uri(p)]
    if not uris:
        return logs
    texts = list(logs.texts)
    for found in _files(spark, uris):
        data = found.read(max_bytes, shipped)
        shipped += len(data)
        texts.append(data.decode("utf-8", errors="replace"))
    local = tuple(p for p in logs.paths if not is_uri(p))
    return KeyLogs(paths=local, texts=tuple(texts), follow=logs.follow)


def _size(size: int) -> str:
    if size < MIB:
        return f"{size} bytes"
    return f"{size // MIB} MiB" if size % MIB == 0 else f"{size / MIB:.1f} MiB"


@dataclass(frozen=True)
class _File:
    """A key log file found under a URI given: its Hadoop file system and status."""

    uri: str  # as given (a folder, a glob, the file itself)
    fs: Any
    status: Any

    @property
    def where(self) -> str:
        """The file as an error line names it: the URI given, and the file when other."""
        name = self.status.getPath().toString()
        return self.uri if name.rstrip("/") == self.uri.rstrip("/") else f"{self.uri} ({name})"

    def read(self, max_bytes: int, shipped: int) -> bytes:
        """Its bytes; refused by its size, unread, when it would take the shipped key logs
        over ``max_bytes``."""
        left = max_bytes - shipped
        size = int(self.status.getLen())
        if size > left:
            raise KeyLogError(self._too_large(size, max_bytes, shipped))
        with _one_line(self.where):
            stream = self.fs.open(self.status.getPath())
            try:
                # One byte past what is left: a file grown since it was listed is refused too.
                data = bytes(stream.readNBytes(left + 1))
            finally:
                stream.close()
        if len(data) > left:
            raise KeyLogError(self._too_large(len(data), max_bytes, shipped))
        return data

    def _too_large(self, size: int, max_bytes: int, shipped: int) -> str:
        others = f", {_size(shipped)} taken by the others" if shipped else ""
        return (
            f"TLS key log {self.where}: too large ({_size(size)}; the key logs shipped to "
            f"the Spark tasks are at most {_size(max_bytes)} in all{others})"
        )


def _files(spark: SparkSession, uris: Iterable[str]) -> list[_File]:
    """Every file the URIs stand for, in order; a folder's files sorted by name."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # only a stopped context has no gateway
        raise RuntimeError("the SparkContext is stopped: it has no JVM gateway")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    found: list[_File] = []
    for uri in uris:
        with _one_line(uri):
            path = jvm.org.apache.hadoop.fs.Path(uri)
            fs = path.getFileSystem(conf)
            statuses = fs.globStatus(path)  # None for a plain path not there, [] for a glob
            if not statuses:
                raise KeyLogError(f"TLS key log {uri}: no such file")
            for status in statuses:
                if not status.isDirectory():
                    found.append(_File(uri, fs, status))
                    continue
                files = [s for s in fs.listStatus(status.getPath()) if _key_log_file(s)]
                if not files:
                    raise KeyLogError(f"TLS key log {uri}: a folder without files")
                files.sort(key=lambda s: s.getPath().getName())
                found += [_File(uri, fs, s) for s in files]
    return found


def _key_log_file(status: Any) -> bool:
    return not status.isDirectory() and not status.getPath().getName().startswith(("_", "."))


@contextmanager
def _one_line(where: str) -> Iterator[None]:
    """A Hadoop failure (no file system for the scheme, access denied, ...) as the one
    line the command prints, instead of a Java trace."""
    from py4j.protocol import Py4JJavaError

    try:
        yield
    except Py4JJavaError as exc:
        java = str(exc.java_exception.toString()).strip().splitlines()
        raise KeyLogError(
            f"TLS key log {where}: cannot be read: {java[0] if java else exc}"
        ) from exc
