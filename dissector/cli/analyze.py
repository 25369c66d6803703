"""``kafka-dissector analyze``: the pairs of captures, a summary table, optional files."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from dissector.analytics.no_kafka import no_kafka
from dissector.analytics.summary_table import FILTER_ABSENT_ATTR, print_summary
from dissector.cli.common import (
    FILTER_HELP,
    TABLE_FORMATS,
    chain_options,
    chain_rule,
    check_output_format,
    group_captures,
    load_decoder,
    make_parent_dirs,
    max_decompressed_option,
    max_frame_option,
    note_sets,
    one_shot,
    outputs,
    parse_row_filter,
    pass_options,
    report_failures,
    tls_key_logs,
    tls_keylog_option,
    warn_damage,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.options import Options
    from dissector.stages import Decoder
    from dissector.table.row_filter import Filter
    from dissector.wire.core import Run
    from dissector.wire.tables import TableCollector


@click.command("analyze")
# readable=False: an unreadable capture is skipped like a missing one (capture_problem),
# not a usage error that stops the others.
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(),
    help="write the pairs: .parquet, .csv, .jsonl or .json (JSON lines); "
    "missing directories are created",
)
@click.option(
    "--ports",
    help="broker ports and ranges, e.g. 9092,9094-9096 "
    "(default: the usual Kafka ports plus a heuristic)",
)
@max_frame_option
@click.option(
    "--specs",
    multiple=True,
    type=click.Path(exists=True),
    help="extra Apache Kafka JSON spec directory or kafka-clients jar (repeatable)",
)
@click.option(
    "--partitions",
    "partitions_out",
    type=click.Path(dir_okay=False),
    help="also write the partition table (one row per pair, topic, partition)",
)
@click.option(
    "--groups",
    "groups_out",
    type=click.Path(dir_okay=False),
    help="also write the groups table (one row per group-membership call)",
)
@click.option("--filter", "row_filter", metavar="EXPR", help=FILTER_HELP)
@click.option("--quiet", is_flag=True, help="no summary table (warnings and errors still show)")
@max_decompressed_option
@chain_options
@tls_keylog_option
@one_shot
def analyze(
    paths: tuple[str, ...],
    output: str | None,
    ports: str | None,
    max_frame: int | None,
    specs: tuple[str, ...],
    quiet: bool,
    partitions_out: str | None = None,
    groups_out: str | None = None,
    row_filter: str | None = None,
    max_decompressed: int | None = None,
    chain: str = "auto",
    no_chain: bool = False,
    chain_gap: float = 3600.0,
    tls_keylog: tuple[str, ...] = (),
) -> None:
    """Decode every Kafka request/response pair in PATHS (pcap or pcapng, maybe gzipped).

    Files of one rotated recording are read as one capture (--chain).
    Without -o nothing is written: the summary table is the output.
    """
    if output:
        check_output_format(output, TABLE_FORMATS)
    tables_out = {"partitions": partitions_out, "groups": groups_out}
    for name, out in tables_out.items():
        # checked before the pass: a typo must not cost it
        if out and not out.lower().endswith(ANALYTICS_FORMATS):
            raise click.BadParameter(
                f"{out!r}: use one of {', '.join(ANALYTICS_FORMATS)}", param_hint=f"--{name}"
            )
    wanted = parse_row_filter(row_filter)
    opts = pass_options(
        ports=ports,
        max_frame=max_frame,
        max_decompressed=max_decompressed,
        tls=tls_key_logs(tls_keylog),
        chain=chain_rule(chain, no_chain, chain_gap),
    )
    decoder = load_decoder(specs) if specs else None
    tables = _AnalyticsOutputs(tables_out) if any(tables_out.values()) else None
    result, failures = analyze_each(
        list(paths),
        opts,
        show=sys.stderr.isatty() and not quiet,
        decoder=decoder,
        analytics=tables.collector if tables is not None else None,
    )
    if wanted is not None:
        result = result.filtered(wanted)
    if not quiet:
        print_summary(result.frame(), ports=opts.ports)
    if output and len(failures) < len(paths):
        _write(result, output, quiet)
    if tables is not None:
        tables.finish(quiet)
    report_failures(failures, len(paths))


# The analytics tables' formats: those of every table.
ANALYTICS_FORMATS = TABLE_FORMATS


def _cannot_write(out: str, exc: OSError) -> click.ClickException:
    return click.ClickException(f"cannot write {out}: {exc.strerror or exc}")


class _AnalyticsOutputs:
    """The analytics tables asked for, written batch by batch as the pass builds them
    (Parquet, CSV or JSON lines): memory does not grow with the tables."""

    def __init__(self, wanted: dict[str, str | None]) -> None:
        from dissector.table.frame import ParquetTableWriter
        from dissector.table.text_rows import TextTableWriter
        from dissector.tables_schema import CONTRACTS, names
        from dissector.wire.tables import TableCollector

        self.outputs = {name: out for name, out in wanted.items() if out}
        self.writers: dict[str, ParquetTableWriter | TextTableWriter] = {}
        for name, out in self.outputs.items():
            make_parent_dirs(out)
            try:
                if out.lower().endswith(".parquet"):
                    self.writers[name] = ParquetTableWriter(out, CONTRACTS[name])
                else:
                    self.writers[name] = TextTableWriter(out, list(names(CONTRACTS[name])))
            except OSError as exc:
                raise _cannot_write(out, exc) from exc
            outputs().streaming.append(out)
        # only the tables asked for: --groups alone does not read every Fetch's partitions
        self.collector: TableCollector = TableCollector(
            writers=dict(self.writers), wanted=frozenset(self.outputs)
        )

    def finish(self, quiet: bool) -> None:
        done = outputs()
        for name, out in self.outputs.items():
            writer = self.writers[name]
            try:
                writer.close()
            except OSError as exc:
                raise _cannot_write(out, exc) from exc
            done.written.append(out)
            if not quiet:
                click.echo(f"wrote {writer.rows} rows to {out}")


@dataclass
class Analysed:
    """The pairs of the readable captures as one Arrow table; the pandas frame is built
    only when something needs it (the summary table, CSV/JSON output): writing Parquet
    goes from Arrow straight to disk."""

    table: pa.Table
    run: Run  # what the runs saw besides the rows, put together (``merged_run``)
    _frame: pd.DataFrame | None = None

    filter_text: str | None = None
    rows_before_filter: int | None = None
    filter_absent: tuple[str, ...] = ()  # Filter.absent when no row matched

    def has_frame(self) -> bool:
        """Whether the pandas frame is built already (the summary table needs it)."""
        return self._frame is not None

    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            from dissector.table.analysis import run_attrs
            from dissector.wire.core import table_to_frame

            self._frame = table_to_frame(self.table)
            self._frame.attrs = run_attrs(self.run)
            if self.filter_text is not None:
                self._frame.attrs["filter"] = (self.filter_text, self.rows_before_filter)
                self._frame.attrs[FILTER_ABSENT_ATTR] = self.filter_absent
        return self._frame

    def filtered(self, wanted: Filter) -> Analysed:
        """Only the rows ``wanted`` matches; counters stay the capture's (they account
        for every packet, not for the rows shown)."""
        import pyarrow as pa

        mask = wanted.mask(self.frame())
        table = self.table.filter(pa.array(mask.to_numpy()))
        absent = () if mask.any() else wanted.absent(self.frame())
        return Analysed(
            table,
            self.run,
            filter_text=wanted.text,
            rows_before_filter=self.table.num_rows,
            filter_absent=absent,
        )


def analyze_each(
    paths: list[str],
    options: Options,
    *,
    show: bool,
    decoder: Decoder | None,
    analytics: TableCollector | None = None,
) -> tuple[Analysed, list[tuple[str, str]]]:
    """The pairs of every readable capture, and (path, reason) for each unreadable one;
    ``analytics`` receives the partitions, groups and versions tables of the readable
    ones, built in the same pass.

    Files are grouped into capture sets first (``options.chain``); captures are
    independent, so one bad file costs only its own rows (a set: its own).
    """
    # pyarrow is imported after the first capture started: the import then overlaps
    # the native core's work (it releases the GIL), a third of a second saved.
    from dissector.table.analysis import each_capture, merged_run
    from dissector.wire.core import arrow_schema

    failures: list[tuple[str, str]] = []
    sets = group_captures(paths, options.chain, failures)
    note_sets(sets)
    done = []
    for capture in each_capture(
        sets, options, failures=failures, show=show, decoder=decoder, analytics=analytics
    ):
        seen = capture.run.counters.as_dict()
        warn_damage(capture.source.name, seen)
        absent = no_kafka(capture.table.num_rows, seen, capture.run.tls_streams, options.ports)
        if absent is not None and len(sets) > 1:
            # The table covers them all: say which capture held none.
            click.echo(f"note: {capture.source.name}: {absent.sentence()}", err=True)
        done.append(capture)
    import pyarrow as pa

    tables = [c.table for c in done]
    table = pa.concat_tables(tables) if tables else arrow_schema().empty_table()
    return Analysed(table, merged_run([c.run for c in done])), failures


def _write(result: Analysed, output: str, quiet: bool) -> None:
    from dissector.table.frame import write_pairs_parquet
    from dissector.table.text_rows import write_table_text

    make_parent_dirs(output)
    done = outputs()
    done.writing = output
    try:
        ext = os.path.splitext(output)[1].lower()
        if ext == ".parquet":
            write_pairs_parquet(result.table, output)
        else:  # batch by batch from Arrow, whether the summary built the frame or not
            write_table_text(result.table, output, ext)
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from exc
    done.writing = None
    done.written.append(output)
    if not quiet:
        click.echo(f"wrote {result.table.num_rows} rows to {output}")
