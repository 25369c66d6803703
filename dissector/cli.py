"""The ``kafka-dissector`` command line.

Sub-commands live with the stage they belong to and are imported only when
used, so ``kafka-dissector analyze`` never pays for matplotlib or pyspark.
"""

from __future__ import annotations

import importlib
import sys

import click

from .summary_table import print_summary

# name -> (module, click command attribute, one-line help shown by --help)
_LAZY_COMMANDS = {
    "decode": ("dissector.decode_cli", "decode_command", "Full decoded pairs as JSON lines."),
    "apis": ("dissector.decode_cli", "apis_command", "List every supported API and version."),
    "live": ("dissector.live", "live_command", "Capture and analyse Kafka traffic live."),
    "report": ("dissector.report", "report_command", "Write a self-contained HTML report."),
    "spark": ("dissector.spark_job", "spark_command", "Fleet-wide analysis of many captures."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_COMMANDS])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # --help lists sub-commands without importing them (matplotlib, pyspark...).
        rows = [(name, _LAZY_COMMANDS[name][2]) for name in _LAZY_COMMANDS]
        for name in super().list_commands(ctx):
            cmd = super().get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=formatter.width)))
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS:
            module, attr, _ = _LAZY_COMMANDS[cmd_name]
            try:
                return getattr(importlib.import_module(module), attr)
            except ImportError as exc:
                raise click.ClickException(
                    f"'{cmd_name}' needs an optional dependency that is missing: {exc}"
                ) from exc
        return super().get_command(ctx, cmd_name)


def parse_ports(value: str | None) -> frozenset[int] | None:
    if not value:
        return None
    try:
        ports = frozenset(int(p) for p in value.split(",") if p.strip())
    except ValueError as exc:
        raise click.BadParameter(f"ports must be comma-separated numbers: {value!r}") from exc
    if not ports or any(not 0 < p < 65536 for p in ports):
        raise click.BadParameter(f"ports must be between 1 and 65535: {value!r}")
    return ports


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafka-dissector")
def main() -> None:
    """Kafka traffic analyzer: captures in, decoded request/response pairs out."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="write the pairs: .parquet, .csv or .jsonl",
)
@click.option(
    "--ports",
    help="broker ports, comma-separated (default: the usual Kafka ports plus a heuristic)",
)
@click.option(
    "--max-frame",
    type=int,
    default=None,
    help="largest Kafka frame accepted, bytes (default 100 MiB)",
)
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
@click.option("--quiet", is_flag=True, help="no summary table")
def analyze(
    paths: tuple[str, ...],
    output: str | None,
    ports: str | None,
    max_frame: int | None,
    specs: tuple[str, ...],
    quiet: bool,
    partitions_out: str | None = None,
    groups_out: str | None = None,
) -> None:
    """Decode every Kafka request/response pair in PATHS (pcap or pcapng)."""
    from .analysis import run_analysis
    from .capture import CaptureError
    from .frame import export
    from .pipeline import Options

    opts = Options(ports=parse_ports(ports))
    if max_frame is not None:
        opts = Options(ports=opts.ports, max_frame=max_frame)
    decoder = None
    if specs:
        from .protocol.decoder import decoder_for

        try:
            decoder = decoder_for(specs)
            decoder.registry  # noqa: B018 - load now so that a bad spec fails here, clearly
        except (OSError, ValueError) as exc:
            raise click.ClickException(f"cannot load specs: {exc}") from exc
    try:
        df = run_analysis(
            list(paths), opts, show=sys.stderr.isatty() and not quiet, decoder=decoder
        )
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    if output:
        try:
            export(df, output)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    if not quiet:
        print_summary(df)
        if output:
            click.echo(f"wrote {len(df)} rows to {output}")
    _write_tables(list(paths), opts.ports, specs, partitions_out, groups_out, quiet)


def _write_tables(
    paths: list[str],
    ports: frozenset[int] | None,
    specs: tuple[str, ...],
    partitions_out: str | None,
    groups_out: str | None,
    quiet: bool,
) -> None:
    """The optional analytics tables; each is a pass of its own over the captures."""
    from .groups import groups
    from .partitions import TABLE_FORMATS, export_table, partitions

    wanted = [(b, out) for b, out in ((partitions, partitions_out), (groups, groups_out)) if out]
    for _, out in wanted:  # checked before the tables are built: a typo must not cost their passes
        if not out.lower().endswith(TABLE_FORMATS):
            raise click.ClickException(f"{out}: use one of {', '.join(TABLE_FORMATS)}")
    for build, out in wanted:
        table = build(paths, ports=ports, specs=specs)
        export_table(table, out)
        if not quiet:
            click.echo(f"wrote {len(table)} rows to {out}")


if __name__ == "__main__":
    main()
