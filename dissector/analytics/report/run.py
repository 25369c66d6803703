"""One pass per capture for a report: the pairs and the analytics tables
(``analyze``), and ``report_file``, which analyses captures and writes their report."""

from __future__ import annotations

import dataclasses
import importlib.util
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dissector.analytics import stats
from dissector.analytics.report.derived import P2F_INPUTS, release_memory
from dissector.analytics.report.model import (
    CAPTURES_ATTR,
    CLIENT_SOFTWARE_ATTR,
    GROUPS_ATTR,
    TABLES_ATTR,
    AnalyticsTables,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.options import CaptureSet, ChainRule, Options
    from dissector.tls import KeyLogs
    from dissector.wire.tables import CaptureTables, TableCollector


def analyze(
    paths: Iterable[str | Path],
    options: Options | None = None,
    *,
    ports: frozenset[int] | None = None,
    failures: list[tuple[str, str]] | None = None,
    chain: ChainRule | None = None,
    tls: KeyLogs | None = None,
    show: bool = False,
    partition_columns: Iterable[str] | None = None,
    digest: bool = False,
) -> pd.DataFrame:
    """``dissector.analyze`` plus ``df.attrs["tables"]`` (``AnalyticsTables``: the
    partitions, groups and versions tables), ``df.attrs["client_software"]``
    (``versions.client_software``) and ``df.attrs["groups"]`` (``groups.group_notes``),
    all from one native pass over each capture; ``show``: a progress bar per capture
    (as ``analyze`` shows).

    ``options``: the pass's ``Options`` whole (``max_frame``, ...), with ``ports``,
    ``tls`` and ``chain`` laid over it when given (``options.keyword_options``).
    ``failures``, when given, receives (capture, reason) for each capture that cannot be
    read, and the report covers the others; without it the first such capture raises.
    ``chain``: which files of ``paths`` are read as one capture (``wire.sets``).
    ``partition_columns``: keep only these columns of the partitions table, the others
    dropped batch by batch as the pass makes them (``REPORT_PARTITION_COLUMNS``: what the
    report reads); None keeps them all. ``digest`` (with ``partition_columns``): of its
    rows too, only those the report reads after the pass (``derived.read_after_the_pass``:
    a long capture's table is mostly Fetch entries the report only counts), the
    throughput added up batch by batch (``AnalyticsTables.throughput_parts``).
    """
    from dissector.analytics.groups import group_notes
    from dissector.analytics.versions import client_software
    from dissector.stages import CaptureError
    from dissector.table.analysis import CAPTURE_SETS_ATTR, combined_frame, set_listing
    from dissector.wire.sets import capture_sets
    from dissector.wire.tables import TableCollector

    options = _laid_over(options, ports, tls, chain)
    # Files of one rotated recording are one capture (``chain``, see wire.sets).
    sets = capture_sets([str(p) for p in paths], options.chain, failures=failures)
    readable: list[CaptureSet] = []
    frames = []
    collected = TableCollector()
    kept: list[pa.Table] = []
    throughput: list[pa.Table] = []
    imports = _Imports()
    try:
        for source in sets:
            narrowed = _Narrowed(partition_columns, digest=digest, ready=imports.done)
            analytics = TableCollector(writers=narrowed.writers())
            try:
                frames.append(_run_one(source, options, analytics, show, imports.start))
            except (CaptureError, OSError) as exc:
                if failures is None:
                    raise
                failures.append((source.name, str(exc)))
                continue
            readable.append(source)
            narrowed.digest_pending()
            collected.merge(analytics)
            kept.extend(narrowed.batches)
            throughput.extend(narrowed.throughput)
    finally:
        imports.join()
    imports.check()
    df = combined_frame(frames)
    del frames
    release_memory()
    narrow = _Narrowed(partition_columns).result(collected.result(), kept)
    # No batch digested (no digest, or no partitions rows): the table has every row.
    tables = AnalyticsTables(narrow, throughput_parts=tuple(throughput) or None)
    df.attrs[TABLES_ATTR] = tables
    df.attrs[CLIENT_SOFTWARE_ATTR] = client_software(df, tables.versions, stats.MISSING_LABEL)
    df.attrs[CAPTURES_ATTR] = [name for s in readable for name in s.file_names]
    df.attrs[CAPTURE_SETS_ATTR] = set_listing(readable)
    df.attrs[GROUPS_ATTR] = group_notes(tables.groups)
    df.attrs = {name: _shared(value) for name, value in df.attrs.items()}
    return df


class _SharedDict(dict):
    """An ``attrs`` value that frames derived from the report's frame share: pandas
    deep-copies ``attrs`` into every derived frame (thousands while a report is made: a
    tenth of its statistics' time on a long capture), and the report's are never changed
    in place."""

    def __deepcopy__(self, memo: dict[int, object]) -> _SharedDict:
        return self


class _SharedList(list):
    """A list in ``attrs`` shared by derived frames, as ``_SharedDict``."""

    def __deepcopy__(self, memo: dict[int, object]) -> _SharedList:
        return self


def _shared(value: object) -> object:
    if isinstance(value, dict):
        return _SharedDict(value)
    if isinstance(value, list):
        return _SharedList(value)
    return value


def report_partition_columns() -> tuple[str, ...]:
    """The partitions table's columns the report reads (lag, throughput,
    produce_to_fetch): ``analyze(partition_columns=...)`` for a report keeps only these."""
    from dissector.analytics import lag
    from dissector.analytics.partitions import THROUGHPUT_INPUTS

    return tuple(dict.fromkeys((*lag.INPUTS, *lag.FETCH_INPUTS, *THROUGHPUT_INPUTS, *P2F_INPUTS)))


@dataclass
class _Narrowed:
    """The partitions batches of a pass with only ``columns`` (all when None): a
    ``TableCollector`` writer keeps each batch's wanted columns, and the core's buffers
    of the others are freed as the pass goes. With ``digest``, only the rows read after
    the pass are kept, and the throughput of all is added up as they come."""

    columns: Iterable[str] | None
    digest: bool = False
    ready: Callable[[], bool] = lambda: True
    """Whether a batch may be digested as it comes: not while the report's packages
    are imported (``_Imports``), which the first batch's digest would wait for, the
    core's worker waiting in turn (a pass 0.14 s longer on a 37 MB capture)."""
    batches: list[pa.Table] = field(default_factory=list)
    throughput: list[pa.Table] = field(default_factory=list)
    pending: list[pa.Table] = field(default_factory=list)  # not digested yet

    def writers(self) -> dict[str, Callable[[pa.Table], None]]:
        return {} if self.columns is None else {"partitions": self._keep}

    def _keep(self, batch: pa.Table) -> None:
        if not self.digest:
            self.batches.append(_selected(batch, self.columns or ()))
            return
        self.pending.append(_selected(batch, self.columns or ()))
        if self.ready():
            self.digest_pending()

    def digest_pending(self) -> None:
        """Digest the batches not digested yet: their throughput added up, the rows
        read after the pass kept."""
        import pyarrow as pa

        from dissector.analytics.partitions import throughput_chunks
        from dissector.analytics.report.derived import read_after_the_pass

        pending, self.pending = self.pending, []
        for batch in pending:
            self.throughput.extend(throughput_chunks(batch))
            self.batches.append(batch.filter(pa.array(read_after_the_pass(batch))))

    def result(self, tables: CaptureTables, kept: list[pa.Table]) -> CaptureTables:
        """``tables`` with the kept partitions batches as its partitions table."""
        import dataclasses

        import pyarrow as pa

        if self.columns is None:
            return tables
        narrow = pa.concat_tables(kept) if kept else _selected(tables.partitions, self.columns)
        return dataclasses.replace(tables, partitions=narrow)


def _selected(table: pa.Table, columns: Iterable[str]) -> pa.Table:
    wanted = set(columns)
    return table.select([name for name in table.column_names if name in wanted])


def _run_one(
    source: CaptureSet,
    options: Options,
    analytics: TableCollector,
    show: bool,
    meanwhile: Callable[[], None],
) -> pd.DataFrame:
    from dissector.table.analysis import run_analysis

    return run_analysis([source], options, analytics=analytics, show=show, meanwhile=meanwhile)


@dataclass
class _Imports:
    """The packages the report imports after the pass (``_import_packages``), imported
    on a thread of their own while the core reads the captures. ``meanwhile`` runs on
    the thread that takes the core's batches, and the core's worker keeps at most two
    batches ahead of it: imported there, they held the pass up for their whole time
    (0.3 s of a 30 s capture's report, pandas most of it); on a thread of their own the
    core goes on (the worker releases the GIL)."""

    thread: threading.Thread | None = None
    failure: BaseException | None = None

    def start(self) -> None:
        """Start the imports (once: ``meanwhile`` is called for each capture). A
        missing optional dependency (jinja2) fails here, at the start of the pass, as
        the CLI's clear message."""
        if self.thread is not None:
            return
        if importlib.util.find_spec("jinja2") is None:
            raise ModuleNotFoundError("No module named 'jinja2'", name="jinja2")
        self.thread = threading.Thread(target=self._run, name="report-imports", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            _import_packages()
        except BaseException as exc:  # raised on the caller's thread by check()
            self.failure = exc

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def done(self) -> bool:
        """Whether the imports have ended (or never started)."""
        return self.thread is None or not self.thread.is_alive()

    def check(self) -> None:
        """Raise what the imports raised (e.g. a broken install of jinja2)."""
        if self.failure is not None:
            raise self.failure


def _import_packages() -> None:
    """The third-party packages the report imports after the pass. Only those: the
    dissector modules are imported after the pass, on the caller's thread, so that no
    module of this package is ever imported by two threads at once (two threads
    importing modules that import each other can deadlock)."""
    import jinja2  # noqa: F401
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.acero  # noqa: F401  (pyarrow's group_by: 50 ms more)


def report_file(
    paths: Iterable[str | Path],
    output: str | Path,
    options: Options | None = None,
    *,
    ports: frozenset[int] | None = None,
    title: str | None = None,
    failures: list[tuple[str, str]] | None = None,
    chain: ChainRule | None = None,
    tls: KeyLogs | None = None,
    show: bool = False,
) -> Path:
    """Analyse ``paths`` and write their report to ``output`` (``options``,
    ``failures``, ``chain``, ``show``: see ``analyze``)."""
    from dissector.options import DEFAULT_MAX_FRAME

    sources = [str(p) for p in paths]
    opts = _laid_over(options, ports, tls, chain)
    df = analyze(
        sources,
        opts,
        failures=failures,
        show=show,
        partition_columns=report_partition_columns(),
        digest=True,
    )
    command = "kafka-dissector report " + " ".join(sources) + f" -o {output}"
    if opts.ports:
        command += " --ports " + ",".join(str(p) for p in sorted(opts.ports))
    if opts.max_frame != DEFAULT_MAX_FRAME:
        command += f" --max-frame {opts.max_frame}"
    if opts.tls:
        command += "".join(f" --tls-keylog {p}" for p in opts.tls.paths)
    from dissector.analytics.report.page import write_report

    return write_report(df, output, title=title, command=command, ports=opts.ports)


def _laid_over(
    options: Options | None,
    ports: frozenset[int] | None,
    tls: KeyLogs | None,
    chain: ChainRule | None,
) -> Options:
    """``options`` whole (``Options()`` when None) with the keywords given laid over it."""
    from dissector.options import keyword_options

    laid = keyword_options(options, ports=ports, tls=tls)
    return laid if chain is None else dataclasses.replace(laid, chain=chain)
