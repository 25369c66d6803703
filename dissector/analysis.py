"""One analysis run over capture files: rows, counters and an optional progress bar."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .accounting import Counters
from .pipeline import Options, Session, iter_pairs
from .rows import Decoder, PairRecord

if TYPE_CHECKING:
    import pandas as pd


def run_analysis(
    paths: list[str], options: Options, *, show: bool = False, decoder: Decoder | None = None
) -> pd.DataFrame:
    """The pairs DataFrame of the captures, with the run's counters in ``df.attrs``.

    ``decoder`` replaces the protocol package, e.g. by a wrapper that notes extra
    facts while the one pass runs (the report does).
    """
    from .frame import records_to_frame

    counters = Counters()
    sessions: list[Session] = []
    records = iter_pairs(
        paths, options=options, counters=counters, sessions=sessions, decoder=decoder
    )
    if show:
        records = _with_bar(records, paths, counters)
    df = records_to_frame(records)
    df.attrs["counters"] = counters.as_dict()
    df.attrs["tls_streams"] = [stream for s in sessions for stream in s.tls_streams]
    return df


def _with_bar(
    records: Iterator[PairRecord], paths: list[str], counters: Counters
) -> Iterator[PairRecord]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    total = sum(os.path.getsize(p) for p in paths)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[pairs]} pairs, {task.fields[frames]} frames"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("analyzing", total=total, pairs=0, frames=0)
        for n, rec in enumerate(records, 1):
            yield rec
            if n % 256 == 0:
                bar.update(
                    task,
                    completed=min(counters["bytes_read"], total),
                    pairs=n,
                    frames=counters["frames"],
                )
        bar.update(task, completed=total)
