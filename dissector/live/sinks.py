"""Rows of a live run to a file, appended as the core builds them (flat memory).

Parquet takes the core's Arrow tables as they are (``frame.pairs_table``: the schema of
``analyze -o``), gathered into row groups of ``ROW_GROUP_ROWS`` rows or
``ROW_GROUP_SECONDS`` of capture, whichever comes first. CSV and JSON lines are appended
per interval in the format ``analyze -o`` writes, from the same Arrow tables
(``table.text_rows``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from dissector.live.source import LiveError

if TYPE_CHECKING:
    import pyarrow as pa

# A Parquet writer keeps every row group's metadata for the footer, about 30 KiB a row
# group of the pairs schema (measured: 3,600 row groups, 110 MiB). One row group per
# interval made a live run's memory grow by 110 MiB an hour whatever the traffic; rows are
# gathered instead (at most this many held, some 40 MB) so that a row group is written
# per 262,144 pairs or per minute.
ROW_GROUP_ROWS = 262_144
ROW_GROUP_SECONDS = 60.0


class ParquetSink:
    """Appends the rows to one Parquet file, a row group per ``ROW_GROUP_ROWS`` rows or
    per ``ROW_GROUP_SECONDS`` (the rows are written at the latest then, and at close).

    Same schema and metadata as ``analyze -o`` (``frame.open_pairs_parquet``).
    """

    def __init__(
        self,
        path: str,
        *,
        group_rows: int = ROW_GROUP_ROWS,
        group_seconds: float = ROW_GROUP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from dissector.table.frame import open_pairs_parquet

        self.path = path
        try:
            self._writer = open_pairs_parquet(path)
        except OSError as exc:
            raise LiveError(f"cannot write {path}: {exc}") from exc
        self.rows = 0  # taken, written or waiting for their row group
        self.row_groups = 0
        self._group_rows = group_rows
        self._group_seconds = group_seconds
        self._clock = clock
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_since = 0.0

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if not self._pending:
            self._pending_since = self._clock()
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        waited = self._clock() - self._pending_since
        if self._pending_rows >= self._group_rows or waited >= self._group_seconds:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        from dissector.table.frame import pairs_table

        if not self._pending:
            return
        # each piece cast on its own: their dictionaries differ
        group = pa.concat_tables([pairs_table(t) for t in self._pending])
        self._pending, self._pending_rows = [], 0
        self._writer.write_table(group, row_group_size=group.num_rows)
        self.row_groups += 1

    def close(self) -> None:
        try:
            self._flush()
        finally:
            self._writer.close()


class TextSink:
    """CSV / JSON lines, appended per interval (the CSV header once, first)."""

    def __init__(self, path: str) -> None:
        from dissector.table.frame import EXPORT_FORMATS

        ext = os.path.splitext(path)[1].lower()
        if ext not in EXPORT_FORMATS:
            raise LiveError(
                f"unknown output format {ext!r}: use one of {', '.join(EXPORT_FORMATS)}"
            )
        self.path = path
        self.ext = ext
        try:
            self._file: IO[bytes] = open(path, "wb")  # noqa: SIM115
        except OSError as exc:
            raise LiveError(f"cannot write {path}: {exc}") from exc
        self._header = True
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._write(table)

    def _write(self, table: pa.Table) -> None:
        from dissector.table.text_rows import PAIRS_STYLE, pairs_batches, write_batches

        write_batches(
            pairs_batches(table),
            self._file,
            self.ext,
            PAIRS_STYLE,
            header=self._header,
            names=table.schema.names,
        )
        self._header = False
        self.rows += table.num_rows
        self._file.flush()

    def close(self) -> None:
        if self._header:  # no row at all: the CSV still gets its column line
            from dissector.wire.core import arrow_schema

            self._write(arrow_schema().empty_table())
        self._file.close()


def open_sink(path: str) -> ParquetSink | TextSink:
    if path.lower().endswith(".parquet"):
        return ParquetSink(path)
    return TextSink(path)
