"""``kafka-dissector report``: one self-contained HTML report of captures."""

from __future__ import annotations

import click

from dissector.analytics.report import report_file
from dissector.cli.common import capture_problem, outputs, parse_ports, report_failures


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
def report_command(
    paths: tuple[str, ...], output: str, ports: str | None, title: str | None
) -> None:
    """Write one self-contained HTML report (charts, tables, capture facts) for PATHS."""
    port_set = parse_ports(ports)
    failures: list[tuple[str, str]] = []
    readable = []
    for capture in paths:
        problem = capture_problem(capture)
        if problem is None:
            readable.append(capture)
        else:
            failures.append((capture, problem))
    if readable:
        path = report_file(readable, output, ports=port_set, title=title, failures=failures)
        if len(failures) < len(paths):
            outputs().written.append(output)
            click.echo(f"wrote {path} ({path.stat().st_size / 1024:,.0f} KiB)")
        else:
            path.unlink(missing_ok=True)  # no capture could be read: no report of nothing
    report_failures(failures, len(paths))
