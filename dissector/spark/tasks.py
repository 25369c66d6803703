"""Inside a Spark task: capture bytes -> Arrow batches of pair rows.

``decode_batches`` is the function handed to ``DataFrame.mapInArrow`` over Spark's
``binaryFile`` rows (``path``, ``content``). Each capture becomes

* its pair rows (the contract columns, ``_capture_info`` null), in batches of at most
  ``batch_rows`` so a long capture streams instead of building one huge batch;
* if decoding stopped with an error, one flagged row: ``status`` "malformed" and
  ``decode_error`` "capture_failed: <why>" (the rows before the error are kept);
* one trailer row whose ``_capture_info`` says how it went (size, pairs, error,
  counters). ``read.Fleet`` splits trailers from pairs.

``rows_from_bytes`` is the one place that turns a capture's bytes into pair records.
Today's capture reader opens a path, so it writes the bytes to a temporary file in
the task's scratch directory first (see docs/spark.md); a reader that takes bytes
replaces that function's body and nothing else.

This module needs pyarrow and the offline pipeline, never pyspark.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dissector.accounting import Counters
from dissector.options import Options
from dissector.schema import COLUMNS, Status
from dissector.spark.typemap import CAPTURE_INFO, INFO_COLUMN, decoded_arrow_schema
from dissector.stages import PairRecord

CAPTURE_FAILED = "capture_failed"
"""Prefix of ``decode_error`` on the row that flags a capture that failed to decode."""

FAILED_STATUS = Status.MALFORMED.value

_TIMESTAMP_COLUMNS = frozenset(c.name for c in COLUMNS if c.kind == "timestamp")
_CONTRACT_NAMES = tuple(c.name for c in COLUMNS)


@dataclass(frozen=True, slots=True)
class DecodeConfig:
    """What every task needs; pickled into the tasks, so only plain data."""

    options: Options = field(default_factory=Options)
    batch_rows: int = 4096


@dataclass(slots=True)
class CaptureResult:
    """How one capture went; becomes the trailer row."""

    size_bytes: int
    pairs: int = 0
    failed: bool = False
    error: str | None = None
    decode_seconds: float = 0.0
    counters: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {c.name: getattr(self, c.name) for c in CAPTURE_INFO}


class _Rows:
    """Column lists for the next batch."""

    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {name: [] for name in _CONTRACT_NAMES}
        self.info: list[dict[str, Any] | None] = []

    def __len__(self) -> int:
        return len(self.info)

    def add(self, values: dict[str, Any], info: dict[str, Any] | None = None) -> None:
        for name in _CONTRACT_NAMES:
            value = values.get(name)
            if name in _TIMESTAMP_COLUMNS and value is not None:
                value = value // 1000  # ns -> us, Spark's resolution
            self.cols[name].append(value)
        self.info.append(info)

    def add_record(self, record: PairRecord) -> None:
        self.add({name: getattr(record, name) for name in _CONTRACT_NAMES})

    def take(self) -> pa.RecordBatch:
        schema = decoded_arrow_schema()
        arrays = [pa.array(self.cols[f.name], type=f.type) for f in list(schema)[:-1]]
        arrays.append(pa.array(self.info, type=schema.field(INFO_COLUMN).type))
        self.cols = {name: [] for name in _CONTRACT_NAMES}
        self.info = []
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def flag_row(capture: str, error: str) -> dict[str, Any]:
    """The row standing for a capture that failed: status malformed, why in decode_error."""
    why = f"{CAPTURE_FAILED}: {error}"
    return {"capture": capture, "status": FAILED_STATUS, "decode_error": why}


def failed_batch(captures: Iterable[tuple[str, int, str]]) -> pa.RecordBatch:
    """Flag and trailer rows for captures that never reached a task.

    ``captures`` holds (capture, size in bytes, why) triples.
    """
    rows = _Rows()
    for capture, size_bytes, error in captures:
        result = CaptureResult(size_bytes=size_bytes, failed=True, error=error)
        rows.add(flag_row(capture, error))
        rows.add({"capture": capture}, result.as_dict())
    return rows.take()


class CaptureFailed(Exception):
    """Decoding one capture stopped; the message names the capture and the cause."""


def describe_error(exc: BaseException) -> str:
    """One line saying why: the cause's type, then its message."""
    if isinstance(exc, CaptureFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc or type(exc).__name__}"


def rows_from_bytes(
    capture: str,
    data: bytes | memoryview | pa.Buffer,
    *,
    options: Options | None = None,
    counters: Counters | None = None,
) -> Iterator[PairRecord]:
    """The pair records of the capture ``data``; each record's ``capture`` is ``capture``.

    Raises ``CaptureFailed`` (after the records decoded so far) when decoding stops.
    """
    from dissector.wire.core import iter_pairs_from_bytes

    try:
        yield from iter_pairs_from_bytes(capture, data, options or Options(), counters=counters)
    except Exception as exc:
        raise CaptureFailed(f"{type(exc).__name__}: {exc}") from exc


def decode_capture(
    capture: str, content: bytes | memoryview | pa.Buffer, config: DecodeConfig
) -> Iterator[pa.RecordBatch]:
    """Batches for one capture given as bytes (a ``binaryFile`` row's content)."""
    started = time.monotonic()
    counters = Counters()
    result = CaptureResult(size_bytes=len(memoryview(content)))
    rows = _Rows()
    try:
        for record in rows_from_bytes(capture, content, options=config.options, counters=counters):
            rows.add_record(record)
            result.pairs += 1
            if len(rows) >= config.batch_rows:
                yield rows.take()
    except Exception as exc:  # one bad capture must not fail the fleet job
        result.failed = True
        result.error = describe_error(exc)
        rows.add(flag_row(capture, result.error))
    result.decode_seconds = time.monotonic() - started
    result.counters = counters.as_dict()
    rows.add({"capture": capture}, result.as_dict())
    yield rows.take()


def decode_batches(
    batches: Iterable[pa.RecordBatch], config: DecodeConfig
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: binaryFile batches (path, content) -> decoded batches."""
    for path, data in capture_files(batches):
        yield from decode_capture(path, data, config)


def capture_files(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, Any]]:
    """(path, content buffer) of each file in Spark's binaryFile batches, read in place;
    an unreadable file's content is empty (the capture reader then names the problem)."""
    for batch in batches:
        paths = batch.column("path")
        contents = batch.column("content")
        for i in range(batch.num_rows):
            content = contents[i]
            yield paths[i].as_py(), content.as_buffer() if content.is_valid else b""
