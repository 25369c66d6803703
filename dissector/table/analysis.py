"""Analysis runs over capture files: rows, what the run saw besides them, and an
optional progress bar.

The rows come from the native core's passes (``dissector.wire.core``, each taking the
run's ``Options`` whole); this module runs them per capture, keeps going past a capture
that cannot be read (``each_capture``), puts what several runs saw together
(``merged_run``, ``combined_frame``: counters added up by ``accounting.Counters.merge``)
and turns it into the pandas frame of the contract with its ``attrs`` (``run_attrs``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dissector.accounting import Counters, sum_counts
from dissector.options import AnySource, CaptureBytes, CaptureSet, Options
from dissector.stages import CaptureError
from dissector.wire import core

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.stages import Decoder, Exchange
    from dissector.wire.tables import TableCollector

Observer = Callable[[str, "Exchange"], None]


def run_table(
    paths: list[AnySource],
    options: Options,
    *,
    show: bool = False,
    decoder: Decoder | None = None,
    observe: tuple[Iterable[int], Observer] | None = None,
    analytics: TableCollector | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> tuple[pa.Table, core.Run]:
    """The pairs of the captures as one Arrow table, and what the run counted.

    ``observe=(api_keys, fn)`` also hands every exchange of those API keys to ``fn``
    (the report notes group membership and client software from their bodies) in the
    same pass; ``analytics`` (a ``wire.tables.TableCollector``) receives the
    partitions, groups and versions tables built in that pass too; ``meanwhile()`` runs
    while the core reads (``core.iter_tables``).
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
            paths,
            options,
            decoder=decoder,
            on_batch=on_batch,
            keep_keys=keys,
            analytics=analytics,
            meanwhile=meanwhile,
        )


def run_analysis(
    paths: list[AnySource],
    options: Options,
    *,
    show: bool = False,
    decoder: Decoder | None = None,
    observe: tuple[Iterable[int], Observer] | None = None,
    analytics: TableCollector | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> pd.DataFrame:
    """The pairs DataFrame of the captures, with the run's counters in ``df.attrs``
    (``analytics``, ``meanwhile``: see ``run_table``)."""
    table, run = run_table(
        paths,
        options,
        show=show,
        decoder=decoder,
        observe=observe,
        analytics=analytics,
        meanwhile=meanwhile,
    )
    df = core.table_to_frame(table)
    df.attrs = run_attrs(run)
    return df


COUNTERS_ATTR = "counters"
"""``df.attrs`` key: what the stages counted, by counter name (``anomalies.py``)."""
TLS_STREAMS_ATTR = "tls_streams"
"""``df.attrs`` key: the connections found to carry TLS not decrypted."""
TLS_ATTR = "tls"
"""``df.attrs`` key: the TLS connections by capture, version, cipher suite and outcome
(``wire.core.TlsRow``)."""
CAPTURE_SETS_ATTR = "capture_sets"
"""``df.attrs`` key: each capture read (its rows' ``capture``) and the files it was read
from, in order: ``[{"capture": name, "files": [name, ...]}, ...]``."""


def set_listing(sets: Iterable[CaptureSet]) -> list[dict[str, Any]]:
    """The capture sets of a run as plain data (``df.attrs``, JSON)."""
    return [{"capture": s.name, "files": list(s.file_names)} for s in sets]


def run_attrs(run: core.Run) -> dict[str, Any]:
    """What a run saw besides its rows, as the pairs frame's ``attrs``."""
    return {
        COUNTERS_ATTR: run.counters.as_dict(),
        TLS_STREAMS_ATTR: list(run.tls_streams),
        TLS_ATTR: list(run.tls),
        CAPTURE_SETS_ATTR: set_listing(run.sets),
    }


def merged_run(runs: Sequence[core.Run]) -> core.Run:
    """What several runs (captures read one after the other) saw, as one run's."""
    counters = Counters()
    for run in runs:
        counters.merge(run.counters.counts)
    return core.Run(
        counters,
        [s for run in runs for s in run.tls_streams],
        core.arrow_schema(),
        [s for run in runs for s in run.sets],
        [t for run in runs for t in run.tls],
    )


def combined_frame(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """One pairs frame of the frames of several runs (``run_analysis``), their
    ``attrs`` put together: counters added up, the TLS lists and capture sets one after
    the other. No frame: the contract's empty frame."""
    import pandas as pd

    from dissector.table.frame import records_to_frame

    if not frames:
        return records_to_frame([])
    if len(frames) == 1:
        return frames[0]
    combined = pd.concat(frames, ignore_index=True)
    combined.attrs = merged_attrs([df.attrs for df in frames])
    return combined


def merged_attrs(attrs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``attrs`` of several runs' frames as one run's (see ``combined_frame``)."""
    return {
        COUNTERS_ATTR: sum_counts(a.get(COUNTERS_ATTR) or {} for a in attrs),
        **{
            key: [item for a in attrs for item in a.get(key) or ()]
            for key in (TLS_STREAMS_ATTR, TLS_ATTR, CAPTURE_SETS_ATTR)
        },
    }


@dataclass(frozen=True)
class CaptureRun:
    """One capture's pass (a set of files read as one capture): its pairs as Arrow
    and what the core saw besides them."""

    source: CaptureSet
    table: pa.Table
    run: core.Run


def each_capture(
    sets: Iterable[CaptureSet],
    options: Options,
    *,
    failures: list[tuple[str, str]] | None = None,
    show: bool = False,
    decoder: Decoder | None = None,
    analytics: TableCollector | None = None,
) -> Iterator[CaptureRun]:
    """The pass over each capture set in turn, all with the same ``options``.

    Captures are independent: one that cannot be read raises, or with ``failures`` is
    added there as (name, reason) and the others are still read (a set costs only its
    own rows). ``analytics`` receives the partitions, groups and versions tables of
    every capture in the same passes; the rows a capture that failed midway gave them
    stay, and its reason says so. ``show``: a progress bar per capture.
    """
    for capture_set in sets:
        rows_before = analytics.rows() if analytics is not None else 0
        try:
            table, run = run_table(
                [capture_set], options, show=show, decoder=decoder, analytics=analytics
            )
        except (CaptureError, OSError) as exc:
            if failures is None:
                raise
            reason = str(exc)
            if analytics is not None and analytics.rows() > rows_before:
                # a file of the set vanished mid-run: what was read of it stays
                reason += " (the analytics tables keep the rows read before this)"
            failures.append((capture_set.name, reason))
            continue
        yield CaptureRun(capture_set, table, run)


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
