"""One analysis run over capture files: rows, counters and an optional progress bar.

The rows come from the native core (``dissector.wire.core``); this module turns them into
the pandas frame of the contract and reports progress.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from dissector.options import AnySource, CaptureBytes, CaptureSet, Options
from dissector.wire import core

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.stages import Exchange
    from dissector.wire.tables import TableCollector

Observer = Callable[[str, "Exchange"], None]


def run_table(
    paths: list[AnySource],
    options: Options,
    *,
    show: bool = False,
    decoder: Any = None,
    observe: tuple[Iterable[int], Observer] | None = None,
    analytics: TableCollector | None = None,
) -> tuple[pa.Table, core.Run]:
    """The pairs of the captures as one Arrow table, and what the run counted.

    ``observe=(api_keys, fn)`` also hands every exchange of those API keys to ``fn``
    (the report notes group membership and client software from their bodies) in the
    same pass; ``analytics`` (a ``wire.tables.TableCollector``) receives the
    partitions, groups and versions tables built in that pass too.
    """
    progress = _bar(paths) if show else nullcontext(None)
    with progress as bar:

        def on_batch(batch: core.Batch) -> None:
            if observe is not None:
                for x in batch.exchanges:
                    observe[1](x.capture, core.exchange_record(x))
            if bar is not None:
                bar(batch.bytes_read)

        keys = tuple(observe[0]) if observe is not None else ()
        return core.analyze_table(
            paths, options, decoder=decoder, on_batch=on_batch, keep_keys=keys, analytics=analytics
        )


def run_analysis(
    paths: list[AnySource],
    options: Options,
    *,
    show: bool = False,
    decoder: Any = None,
    observe: tuple[Iterable[int], Observer] | None = None,
    analytics: TableCollector | None = None,
) -> pd.DataFrame:
    """The pairs DataFrame of the captures, with the run's counters in ``df.attrs``
    (``analytics``: see ``run_table``)."""
    table, run = run_table(
        paths, options, show=show, decoder=decoder, observe=observe, analytics=analytics
    )
    df = core.table_to_frame(table)
    df.attrs["counters"] = run.counters.as_dict()
    df.attrs["tls_streams"] = run.tls_streams
    df.attrs["tls"] = run.tls
    df.attrs[CAPTURE_SETS_ATTR] = set_listing(run.sets)
    return df


CAPTURE_SETS_ATTR = "capture_sets"
"""``df.attrs`` key: each capture read (its rows' ``capture``) and the files it was read
from, in order: ``[{"capture": name, "files": [name, ...]}, ...]``."""


def set_listing(sets: Iterable[CaptureSet]) -> list[dict[str, Any]]:
    """The capture sets of a run as plain data (``df.attrs``, JSON)."""
    return [{"capture": s.name, "files": list(s.file_names)} for s in sets]


def _bar(paths: list[AnySource]) -> AbstractContextManager[Callable[[int], None]]:
    from contextlib import contextmanager

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    @contextmanager
    def bar():  # type: ignore[no-untyped-def]
        files = [f for p in paths for f in (p.files if isinstance(p, CaptureSet) else (p,))]
        total = sum(
            len(p.data) if isinstance(p, CaptureBytes) else os.path.getsize(p)
            for p in files
            if isinstance(p, CaptureBytes) or os.path.isfile(p)
        )
        columns = (
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, transient=True) as progress:
            task = progress.add_task("analyzing", total=total)

            def update(read: int) -> None:
                progress.update(task, completed=min(read, total))

            yield update
            progress.update(task, completed=total)

    return bar()
