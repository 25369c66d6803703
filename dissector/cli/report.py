"""``kafka-dissector report``: one self-contained HTML report of captures."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dissector.analytics import report
from dissector.analytics.summary_table import FILTER_ABSENT_ATTR
from dissector.cli.common import (
    FILTER_HELP,
    capture_problem,
    chain_options,
    chain_rule,
    max_decompressed_option,
    max_frame_option,
    one_shot,
    outputs,
    parse_row_filter,
    pass_options,
    report_failures,
    tls_key_logs,
    tls_keylog_option,
)

if TYPE_CHECKING:
    from dissector.options import Options


@click.command("report")
# Not checked by click: a missing or unreadable capture is skipped (capture_problem), the
# report made of the others, and the exit status says so, as in analyze and decode.
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="kafka-report.html",
    show_default=True,
    help="HTML file to write",
)
@click.option("--ports", help="broker ports, comma-separated (default: usual ports + heuristic)")
@click.option("--title", help="page title (default: names the capture files)")
@click.option("--filter", "row_filter", metavar="EXPR", help=FILTER_HELP)
@max_frame_option
@max_decompressed_option
@chain_options
@tls_keylog_option
@one_shot
def report_command(
    paths: tuple[str, ...],
    output: str,
    ports: str | None,
    title: str | None,
    row_filter: str | None = None,
    max_frame: int | None = None,
    max_decompressed: int | None = None,
    chain: str = "auto",
    no_chain: bool = False,
    chain_gap: float = 3600.0,
    tls_keylog: tuple[str, ...] = (),
) -> None:
    """Write one self-contained HTML report (charts, tables, capture facts) for PATHS.

    Files of one rotated recording are read as one capture (--chain)."""
    wanted = parse_row_filter(row_filter)
    options = pass_options(
        ports=ports,
        max_frame=max_frame,
        max_decompressed=max_decompressed,
        tls=tls_key_logs(tls_keylog),
        chain=chain_rule(chain, no_chain, chain_gap),
    )
    failures: list[tuple[str, str]] = []
    readable = []
    for capture in paths:
        problem = capture_problem(capture)
        if problem is None:
            readable.append(capture)
        else:
            failures.append((capture, problem))
    if readable:
        settings = {"failures": failures, "show": sys.stderr.isatty()}
        path = _write(readable, output, title, wanted, options, settings)
        if len(failures) < len(paths):
            outputs().written.append(output)
            click.echo(f"wrote {path} ({path.stat().st_size / 1024:,.0f} KiB)")
        else:
            path.unlink(missing_ok=True)  # no capture could be read: no report of nothing
    report_failures(failures, len(paths))


def _write(
    paths: list[str],
    output: str,
    title: str | None,
    wanted: Any,
    options: Options,
    settings: dict[str, Any],
) -> Path:
    """``report.report_file``, with the rows ``wanted`` (a ``row_filter.Filter``) only."""
    from dissector.options import DEFAULT_MAX_FRAME

    if wanted is None:
        return report.report_file(paths, output, options, title=title, **settings)
    df = report.analyze(
        paths, options, **settings, partition_columns=report.report_partition_columns()
    )
    before = len(df)
    mask = wanted.mask(df)
    absent = () if mask.any() else wanted.absent(df)
    df = df[mask]
    df.attrs[report.FILTER_ATTR] = (wanted.text, before)
    df.attrs[FILTER_ABSENT_ATTR] = absent
    ports = options.ports
    command = " ".join(
        ["kafka-dissector report", *map(shlex.quote, paths), "-o", shlex.quote(output)]
        + (["--ports", ",".join(map(str, sorted(ports)))] if ports else [])
        + (
            ["--max-frame", str(options.max_frame)]
            if options.max_frame != DEFAULT_MAX_FRAME
            else []
        )
        + (
            ["--max-decompressed", str(options.max_decompressed)]
            if options.max_decompressed is not None
            else []
        )
        + ["--filter", shlex.quote(wanted.text)]
    )
    return report.write_report(df, output, title=title, command=command, ports=ports)
