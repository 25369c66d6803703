"""Rows of a live run to a file: Parquet appended per interval, CSV/JSON lines at the end."""

from __future__ import annotations

import os

from dissector.live.source import LiveError
from dissector.stages import PairRecord


class ParquetSink:
    """Appends each interval's rows to one Parquet file as a row group (flat memory).

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

    def write(self, records: list[PairRecord]) -> None:
        from dissector.table.frame import pairs_table, records_to_frame

        self._writer.write_table(pairs_table(records_to_frame(records)))
        self.rows += len(records)

    def close(self) -> None:
        self._writer.close()


class BufferedSink:
    """CSV / JSON lines: the whole table is written at the end by ``frame.export``."""

    def __init__(self, path: str) -> None:
        from dissector.table.frame import EXPORT_FORMATS

        ext = os.path.splitext(path)[1].lower()
        if ext not in EXPORT_FORMATS:
            raise LiveError(
                f"unknown output format {ext!r}: use one of {', '.join(EXPORT_FORMATS)}"
            )
        self.path = path
        self.records: list[PairRecord] = []
        self.rows = 0

    def write(self, records: list[PairRecord]) -> None:
        self.records.extend(records)
        self.rows += len(records)

    def close(self) -> None:
        from dissector.table.frame import export, records_to_frame

        export(records_to_frame(self.records), self.path)


def open_sink(path: str) -> ParquetSink | BufferedSink:
    if path.lower().endswith(".parquet"):
        return ParquetSink(path)
    return BufferedSink(path)
