"""Rows of a live run to a file, appended as the core builds them (flat memory).

Parquet takes the core's Arrow tables as they are (``frame.pairs_table``: the schema of
``analyze -o``), one row group per interval. CSV and JSON lines are appended per
interval in the format ``analyze -o`` writes (``frame.write_text_rows``); they go
through a pandas frame, so they cost more per pair than Parquet.
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING

from dissector.live.source import LiveError

if TYPE_CHECKING:
    import pyarrow as pa


class ParquetSink:
    """Appends each interval's rows to one Parquet file as a row group.

    Same schema and metadata as ``analyze -o`` (``frame.open_pairs_parquet``).
    """

    def __init__(self, path: str) -> None:
        from dissector.table.frame import open_pairs_parquet

        self.path = path
        try:
            self._writer = open_pairs_parquet(path)
        except OSError as exc:
            raise LiveError(f"cannot write {path}: {exc}") from exc
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        from dissector.table.frame import pairs_table

        if table.num_rows:
            self._writer.write_table(pairs_table(table))
            self.rows += table.num_rows

    def close(self) -> None:
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
            self._file: IO[str] = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as exc:
            raise LiveError(f"cannot write {path}: {exc}") from exc
        self._header = True
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._write(table)

    def _write(self, table: pa.Table) -> None:
        from dissector.table.frame import write_text_rows
        from dissector.wire.core import table_to_frame

        write_text_rows(table_to_frame(table), self._file, self.ext, header=self._header)
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
