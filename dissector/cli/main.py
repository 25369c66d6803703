"""The ``kafka-dissector`` command line.

Sub-commands live with the stage they belong to and are imported only when
used, so ``kafka-dissector analyze`` never pays for matplotlib or pyspark.

User mistakes (a missing extra, an unwritable output, a file that is not a
capture) end with one line on stderr and a non-zero exit, never a traceback.
Output files follow one rule in every command: missing parent directories are
created, and the file name must end in an extension of the format written.
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from dissector.analytics.summary_table import print_summary

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from dissector.options import Options
    from dissector.stages import Decoder

# name -> (module, click command attribute, one-line help shown by --help)
_LAZY_COMMANDS = {
    "decode": ("dissector.cli.decode", "decode_command", "Full decoded pairs as JSON lines."),
    "apis": ("dissector.cli.decode", "apis_command", "List every supported API and version."),
    "live": ("dissector.live.loop", "live_command", "Capture and analyse Kafka traffic live."),
    "report": (
        "dissector.analytics.report",
        "report_command",
        "Write a self-contained HTML report.",
    ),
    "spark": ("dissector.spark.job", "spark_command", "Fleet-wide analysis of many captures."),
    "anomalies": ("dissector.cli.tools", "anomalies_command", "List counters, error codes, flags."),
    "codegen": ("dissector.cli.tools", "codegen_command", "Print a generated decoder."),
}

# Top-level module of an optional dependency -> the extra of pyproject.toml installing it.
_EXTRAS = {
    "pyspark": "spark",
    "py4j": "spark",
    "matplotlib": "report",
    "jinja2": "report",
    "pcapy": "live",
}
# What an extra needs besides Python packages.
_EXTRA_NOTES = {"spark": " (and Java 17 or newer on the PATH)"}

# Table formats analyze (and live) write; see frame.export.
TABLE_FORMATS = (".parquet", ".csv", ".jsonl", ".json")
HTML_FORMATS = (".html", ".htm")
PCAP_FORMATS = (".pcapng", ".pcap")

# Lazy commands whose output options follow the shared rule: option -> accepted extensions.
_OUTPUT_RULES: dict[str, dict[str, tuple[str, ...]]] = {
    "report": {"output": HTML_FORMATS},
    "live": {"output": TABLE_FORMATS, "write_pcap": PCAP_FORMATS},
}

# Counters of a capture file that mean part of it was not read: worth a warning,
# not a failure (the pairs before the damage are good).
_FILE_DAMAGE = {
    "truncated_file": "the file is truncated (its last record is cut off)",
    "bad_record": "it has records of impossible length; reading stopped there",
    "read_error": "reading stopped early (I/O error or corrupt gzip stream)",
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
                cmd = getattr(importlib.import_module(module), attr)
            except ImportError as exc:
                raise missing_extra(cmd_name, exc) from exc
            rules = _OUTPUT_RULES.get(cmd_name)
            return _with_output_rule(cmd, rules) if rules else cmd
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ImportError as exc:
            # Sub-commands import their optional dependencies only when they run.
            raise missing_extra(ctx.invoked_subcommand or "this command", exc) from exc
        except BrokenPipeError:
            _quiet_broken_pipe()
        except OSError as exc:
            raise click.ClickException(os_error_line(exc)) from exc


def missing_extra(command: str, exc: ImportError) -> click.ClickException:
    """The one-line error for an optional dependency that is not installed."""
    module = (exc.name or "").split(".")[0]
    extra = _EXTRAS.get(module)
    if extra is None:
        return click.ClickException(f"'{command}' cannot import a module it needs: {exc}")
    note = _EXTRA_NOTES.get(extra, "")
    return click.ClickException(
        f"'{command}' needs {module}, which is not installed: "
        f"pip install 'kafka-dissector[{extra}]'{note}"
    )


def os_error_line(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    return f"{exc.filename}: {reason}" if exc.filename else reason


def _quiet_broken_pipe() -> NoReturn:
    # The reader (e.g. `| head`) left: stop without a traceback, and point stdout
    # at /dev/null so that the interpreter's final flush does not fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


def _with_output_rule(cmd: click.Command, rules: dict[str, tuple[str, ...]]) -> click.Command:
    """A copy of ``cmd`` that checks its output options by the shared rule first."""
    original = cmd.callback
    if original is None:
        return cmd

    @functools.wraps(original)
    def checked(**kwargs: Any) -> Any:
        outputs = {kwargs[name]: name for name in rules if kwargs.get(name)}
        for value, name in outputs.items():
            check_output_format(value, rules[name], "--" + name.replace("_", "-"))
            make_parent_dirs(value)
            probe_writable(value)
        try:
            return original(**kwargs)
        except OSError as exc:
            if str(exc.filename) not in outputs:
                raise
            raise click.ClickException(
                f"cannot write {exc.filename}: {exc.strerror or exc}"
            ) from exc

    wrapped = copy.copy(cmd)
    wrapped.callback = checked
    return wrapped


def check_output_format(path: str, formats: Sequence[str], option: str = "--output") -> None:
    """Refuse an output file whose extension is not one of the format's."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in formats:
        raise click.BadParameter(
            f"{path!r} must end in {', '.join(formats)} (the format is chosen by the extension)",
            param_hint=option,
        )


def make_parent_dirs(path: str) -> None:
    """Create the directories an output file goes into; refuse a directory as the file."""
    target = Path(path)
    if target.is_dir():
        raise click.ClickException(f"cannot write {path}: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from exc


def probe_writable(path: str) -> None:
    """Fail now, not after a long analysis, when the file cannot be created."""
    existed = os.path.exists(path)
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from exc
    if not existed:
        os.remove(path)


def parse_ports(value: str | None) -> frozenset[int] | None:
    """``--ports``: ports and ranges, comma-separated, e.g. ``9092,9094-9096``."""
    if value is None:
        return None
    ports: set[int] = set()
    for item in value.split(","):
        item = item.strip()
        if item:
            ports.update(_port_range(item, value))
    if not ports:
        raise click.BadParameter(f"no port given in {value!r}", param_hint="--ports")
    return frozenset(ports)


def _port_range(item: str, whole: str) -> range:
    low, dash, high = item.partition("-")
    try:
        first = int(low)
        last = int(high) if dash else first
    except ValueError:
        raise click.BadParameter(
            f"expected ports or ranges like 9092,9094-9096, got {whole!r}", param_hint="--ports"
        ) from None
    if not 0 < first <= last < 65536:
        raise click.BadParameter(
            f"{item!r}: ports are 1-65535 and a range goes low-high", param_hint="--ports"
        )
    return range(first, last + 1)


def capture_problem(path: str) -> str | None:
    """Why ``path`` cannot be a capture before opening it, or None."""
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "is a directory, not a capture file"
    return None


def report_failures(failures: list[tuple[str, str]], total: int) -> None:
    """Name each capture that could not be read; exit non-zero when there is one."""
    if not failures:
        return
    for path, reason in failures:
        line = reason if reason.startswith(path) else f"{path}: {reason}"
        click.echo(f"error: {line}", err=True)
    raise click.ClickException(f"{len(failures)} of {total} captures failed")


def warn_damage(path: str, counters: dict[str, int]) -> None:
    """A capture read only in part is still a success, but the user must know."""
    for name, meaning in _FILE_DAMAGE.items():
        if counters.get(name):
            click.echo(f"warning: {path}: {meaning} ({name}={counters[name]})", err=True)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafka-dissector")
def main() -> None:
    """Kafka traffic analyzer: captures in, decoded request/response pairs out."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
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
@click.option(
    "--max-frame",
    type=click.IntRange(min=1),
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
@click.option("--quiet", is_flag=True, help="no summary table (warnings and errors still show)")
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
    """Decode every Kafka request/response pair in PATHS (pcap or pcapng, maybe gzipped).

    Without -o nothing is written: the summary table is the output.
    """
    from dissector.options import Options

    if output:
        check_output_format(output, TABLE_FORMATS)
    opts = Options(ports=parse_ports(ports))
    if max_frame is not None:
        opts = Options(ports=opts.ports, max_frame=max_frame)
    decoder = _load_specs(specs) if specs else None
    result, failures = analyze_each(
        list(paths), opts, show=sys.stderr.isatty() and not quiet, decoder=decoder
    )
    if not quiet:
        print_summary(result.frame())
    if output and len(failures) < len(paths):
        _write(result, output, quiet)
    readable = [p for p in paths if p not in {f for f, _ in failures}]
    if readable:
        _write_tables(readable, opts.ports, specs, partitions_out, groups_out, quiet)
    report_failures(failures, len(paths))


def _load_specs(specs: tuple[str, ...]) -> Any:
    from dissector.protocol.decoder import decoder_for

    try:
        decoder = decoder_for(specs)
        decoder.registry  # noqa: B018 - load now so that a bad spec fails here, clearly
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load specs: {exc}") from exc
    return decoder


@dataclass
class Analysed:
    """The pairs of the readable captures as one Arrow table; the pandas frame is built
    only when something needs it (the summary table, CSV/JSON output): writing Parquet
    goes from Arrow straight to disk."""

    table: pa.Table
    counters: dict[str, int]
    tls_streams: list[int]
    _frame: pd.DataFrame | None = None

    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            from dissector.wire.core import table_to_frame

            self._frame = table_to_frame(self.table)
            self._frame.attrs = {"counters": self.counters, "tls_streams": self.tls_streams}
        return self._frame


def analyze_each(
    paths: list[str], options: Options, *, show: bool, decoder: Decoder | None
) -> tuple[Analysed, list[tuple[str, str]]]:
    """The pairs of every readable capture, and (path, reason) for each unreadable one.

    Captures are independent, so one bad file costs only its own rows.
    """
    # pyarrow is imported after the first capture started: the import then overlaps
    # the native core's work (it releases the GIL), a third of a second saved.
    from dissector.stages import CaptureError
    from dissector.table.analysis import run_table
    from dissector.wire.core import arrow_schema

    tables: list[pa.Table] = []
    counters: dict[str, int] = {}
    tls: list[int] = []
    failures: list[tuple[str, str]] = []
    for path in paths:
        problem = capture_problem(path)
        if problem is not None:
            failures.append((path, problem))
            continue
        try:
            table, run = run_table([path], options, show=show, decoder=decoder)
        except (CaptureError, OSError) as exc:
            failures.append((path, str(exc)))
            continue
        seen = run.counters.as_dict()
        warn_damage(path, seen)
        for name, n in seen.items():
            counters[name] = counters.get(name, 0) + n
        tls.extend(run.tls_streams)
        tables.append(table)
    import pyarrow as pa

    table = pa.concat_tables(tables) if tables else arrow_schema().empty_table()
    return Analysed(table, dict(sorted(counters.items())), tls), failures


def _write(result: Analysed, output: str, quiet: bool) -> None:
    from dissector.table.frame import export, write_pairs_parquet

    make_parent_dirs(output)
    try:
        if output.lower().endswith(".parquet"):
            write_pairs_parquet(result.table, output)
        else:
            export(result.frame(), output)
    except OSError as exc:
        raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from exc
    if not quiet:
        click.echo(f"wrote {result.table.num_rows} rows to {output}")


def _write_tables(
    paths: list[str],
    ports: frozenset[int] | None,
    specs: tuple[str, ...],
    partitions_out: str | None,
    groups_out: str | None,
    quiet: bool,
) -> None:
    """The optional analytics tables; each is a pass of its own over the captures."""
    if not (partitions_out or groups_out):
        return
    from dissector.analytics.groups import groups
    from dissector.analytics.partitions import TABLE_FORMATS, export_table, partitions

    wanted = [(b, out) for b, out in ((partitions, partitions_out), (groups, groups_out)) if out]
    for _, out in wanted:  # checked before the tables are built: a typo must not cost their passes
        if not out.lower().endswith(TABLE_FORMATS):
            raise click.ClickException(f"{out}: use one of {', '.join(TABLE_FORMATS)}")
    for build, out in wanted:
        table = build(paths, ports=ports, specs=specs)
        export_table(table, out)
        if not quiet:
            click.echo(f"wrote {len(table)} rows to {out}")

