"""The ``kafka-dissector`` command line: the click group.

Each sub-command is a module of this folder, imported only when used, so
``kafka-dissector analyze`` never pays for matplotlib or pyspark.

User mistakes (a missing extra, an unwritable output, a file that is not a
capture) end with one line on stderr and a non-zero exit, never a traceback.
Output files follow one rule in every command: missing parent directories are
created, and the file name must end in an extension of the format written.
"""

from __future__ import annotations

import copy
import functools
import gc
import importlib
from typing import Any

import click

from dissector.cli.common import (
    HTML_FORMATS,
    PCAP_FORMATS,
    TABLE_FORMATS,
    check_output_format,
    interrupted,
    make_parent_dirs,
    missing_extra,
    os_error_line,
    outputs,
    probe_writable,
    quiet_broken_pipe,
)

# name -> (module, click command attribute, one-line help shown by --help)
_LAZY_COMMANDS = {
    "analyze": ("dissector.cli.analyze", "analyze", "Decode every Kafka pair into a table."),
    "decode": ("dissector.cli.decode", "decode_command", "Full decoded pairs as JSON lines."),
    "apis": ("dissector.cli.decode", "apis_command", "List every supported API and version."),
    "live": ("dissector.cli.live", "live_command", "Capture and analyse Kafka traffic live."),
    "report": ("dissector.cli.report", "report_command", "Write a self-contained HTML report."),
    "spark": ("dissector.cli.spark", "spark_command", "Fleet-wide analysis of many captures."),
    "anomalies": ("dissector.cli.tools", "anomalies_command", "List counters, error codes, flags."),
    "codegen": ("dissector.cli.tools", "codegen_command", "Print a generated decoder."),
}

# Lazy commands whose output options follow the shared rule: option -> accepted extensions.
_OUTPUT_RULES: dict[str, dict[str, tuple[str, ...]]] = {
    "report": {"output": HTML_FORMATS},
    "live": {"output": TABLE_FORMATS, "write_pcap": PCAP_FORMATS},
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
        # Run as the root context closes, whatever ends the command (its return, the
        # SystemExit of a Ctrl-C or an error): after every KeyboardInterrupt caught.
        ctx.call_on_close(_forget_interrupts_seen_by_exec)
        try:
            return self._invoke(ctx)
        except KeyboardInterrupt:
            pass
        except RuntimeError as exc:
            # Python 3.11 wraps a KeyboardInterrupt raised in ``__set_name__`` (a
            # dataclass being built while a lazy import runs) in a RuntimeError.
            if not isinstance(exc.__cause__, KeyboardInterrupt):
                raise
        # Outside the except block: the interrupted frames (and the native core's
        # iterators they hold, whose threads must be joined before the interpreter
        # shuts down) are released with the exception before the process exits.
        gc.collect()
        interrupted(outputs())

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ImportError as exc:
            # Sub-commands import their optional dependencies only when they run.
            raise missing_extra(ctx.invoked_subcommand or "this command", exc) from exc
        except BrokenPipeError:
            quiet_broken_pipe()
        except OSError as exc:
            raise click.ClickException(os_error_line(exc)) from exc


def _forget_interrupts_seen_by_exec() -> None:
    """CPython (3.11 to 3.13 at least) notes a KeyboardInterrupt that leaves an
    ``exec`` of source text, even when it is then caught, and a ``python -m`` process
    so marked ends by killing itself with SIGINT instead of with its exit status: a
    parent saw "killed by SIGINT" instead of 130 whenever the Ctrl-C landed while a
    lazy import built a dataclass or a namedtuple (both ``exec`` generated source).
    Each ``exec`` of text clears the note when it starts; the command handled it."""
    exec("")


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


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kafka-dissector")
def main() -> None:
    """Kafka traffic analyzer: captures in, decoded request/response pairs out."""
