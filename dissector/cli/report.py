"""``kafka-dissector report``: one self-contained HTML report of captures."""

from __future__ import annotations

import sys

import click

from dissector.analytics.report import report_file
from dissector.cli.common import (
    chain_options,
    chain_rule,
    parse_ports,
    report_failures,
    tls_key_logs,
    tls_keylog_option,
)


@click.command("report")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
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
@chain_options
@tls_keylog_option
def report_command(
    paths: tuple[str, ...],
    output: str,
    ports: str | None,
    title: str | None,
    chain: str = "auto",
    no_chain: bool = False,
    chain_gap: float = 3600.0,
    tls_keylog: tuple[str, ...] = (),
) -> None:
    """Write one self-contained HTML report (charts, tables, capture facts) for PATHS.

    Files of one rotated recording are read as one capture (--chain)."""
    failures: list[tuple[str, str]] = []
    rule = chain_rule(chain, no_chain, chain_gap)
    tls = tls_key_logs(tls_keylog)
    if len(failures) < len(paths):
        path = report_file(
            paths,
            output,
            ports=parse_ports(ports),
            title=title,
            failures=failures,
            chain=rule,
            tls=tls,
            show=sys.stderr.isatty(),
        )
        if len(failures) < len(paths):
            click.echo(f"wrote {path} ({path.stat().st_size / 1024:,.0f} KiB)")
        else:
            path.unlink(missing_ok=True)  # no capture could be read: no report of nothing
    report_failures(failures, len(paths))
