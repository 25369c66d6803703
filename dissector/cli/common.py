"""What every ``kafka-dissector`` command shares: option parsing, output rules and the
one-line errors (a missing extra, an unwritable output, a capture that cannot be read)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from dissector.schema import TABLE_FORMATS as _TABLE_FORMATS

if TYPE_CHECKING:
    from collections.abc import Callable

    from dissector.options import CaptureSet, ChainRule, Options
    from dissector.protocol.bound_decoder import BoundDecoder
    from dissector.table.row_filter import Filter
    from dissector.tls import KeyLogs

# Top-level module of an optional dependency -> the extra of pyproject.toml installing it.
_EXTRAS = {
    "pyspark": "spark",
    "py4j": "spark",
    "matplotlib": "report",
    "jinja2": "report",
}
# What an extra needs besides Python packages.
_EXTRA_NOTES = {"spark": " (and Java 17 or newer on the PATH)"}

# Table formats analyze (and live) write: schema.TABLE_FORMATS (a light import).
TABLE_FORMATS = _TABLE_FORMATS
HTML_FORMATS = (".html", ".htm")
PCAP_FORMATS = (".pcapng", ".pcap")

# Counters of a capture file that mean part of it was not read: worth a warning,
# not a failure (the pairs before the damage are good).
_FILE_DAMAGE = {
    "truncated_file": "the file is truncated (its last record is cut off)",
    "bad_record": "it has records of impossible length; reading stopped there",
    "read_error": "reading stopped early (I/O error or corrupt gzip stream)",
}


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


def quiet_broken_pipe() -> NoReturn:
    # The reader (e.g. `| head`) left: stop without a traceback, and point stdout
    # at /dev/null so that the interpreter's final flush does not fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(1)


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


def probe_writable_folder(path: str, shown: str) -> None:
    """Fail now, not once a long job has started, when the folder ``path`` (named
    ``shown`` on the command line) cannot be created or written. What the probe
    creates is removed: a job that fails later leaves no empty folder behind."""
    import tempfile

    folder = Path(path)
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise click.ClickException(f"cannot write {shown}: {exc.strerror or exc}") from exc
    finally:
        for created in made:  # the deepest first
            with contextlib.suppress(OSError):
                created.rmdir()


def parse_ports(value: str | None) -> frozenset[int] | None:
    """``--ports``: ports and ranges, comma-separated, e.g. ``9092,9094-9096``.

    An empty item (``9092,,9093``, a trailing comma) is refused: it is most likely a
    port lost from a script's variable, and quietly ignoring it would watch too few.
    """
    if value is None:
        return None
    if not value.strip():
        raise click.BadParameter(f"no port given in {value!r}", param_hint="--ports")
    ports: set[int] = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise click.BadParameter(
                f"empty item in {value!r}: ports and ranges like 9092,9094-9096",
                param_hint="--ports",
            )
        ports.update(_port_range(item, value))
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


def tls_keylog_option(command: Any, *, hadoop: bool = False) -> Any:
    """``--tls-keylog FILE`` (repeatable): NSS key logs to decrypt Kafka over TLS with.
    ``hadoop``: the spark command's, which also reads folders and Hadoop URIs."""
    where = (
        "; a folder stands for its files, and a URI (hdfs://, s3a://, file:/...) is read "
        "through Hadoop"
        if hadoop
        else ""
    )
    return click.option(
        "--tls-keylog",
        "tls_keylog",
        multiple=True,
        metavar="FILE",
        help="NSS key log (SSLKEYLOGFILE format) to decrypt TLS with; repeatable "
        f"(SSLKEYLOGFILE is read too when set){where}",
    )(command)


def max_decompressed_option(command: Any) -> Any:
    """``--max-decompressed BYTES``: the most the record batches of one Kafka frame may
    decompress to (``Options.max_decompressed``), in every pass of the command."""
    from dissector.options import MAX_DECOMPRESSED_LIMIT

    return click.option(
        "--max-decompressed",
        "max_decompressed",
        type=click.IntRange(min=1, max=MAX_DECOMPRESSED_LIMIT),
        default=None,
        metavar="BYTES",
        help="most bytes the record batches of one Kafka frame may decompress to (default "
        "256 MiB: a frame gets 32 times its size, at least 64 MiB, up to this); past it a "
        "batch is flagged decompression_limit",
    )(command)


def tls_key_logs(
    paths: Sequence[str], *, follow: bool = False, ship: bool = False
) -> KeyLogs | None:
    """The run's key logs (``dissector.tls.key_logs``), or one clear error line.
    ``ship``: their contents instead of their paths (Spark tasks run elsewhere), a folder
    stands for the files in it, and URIs (``hdfs://``, ``file:/``: ``tls.is_uri``) are
    kept as paths for the driver to read through Hadoop once Spark is up
    (``dissector.spark.keylogs``)."""
    from dissector.tls import KeyLogError, KeyLogs, is_uri, key_logs, read_texts

    uris = tuple(p for p in paths if ship and is_uri(p))
    if ship:  # a folder of key logs (one per broker, say): every file in it
        paths = [
            str(f)
            for p in paths
            if not is_uri(p)
            for f in (sorted(Path(p).iterdir()) if Path(p).is_dir() else [p])
        ]
    try:
        logs = key_logs(paths, follow=follow)
        if ship and (logs is not None or uris):
            return KeyLogs(paths=uris, texts=read_texts(logs.paths) if logs else ())
    except KeyLogError as exc:
        raise click.ClickException(str(exc)) from None
    return logs


def capture_problem(path: str) -> str | None:
    """Why ``path`` cannot be read as a capture before analysing it, or None.

    Missing, a directory, or not readable (permissions): the one rule of every command
    that takes captures is to name such a file, skip it and go on with the others.
    Whether the bytes are a capture is the reader's to say (``CaptureError``).
    """
    if not os.path.exists(path):
        return "no such file"
    if os.path.isdir(path):
        return "is a directory, not a capture file"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    return None


def report_failures(failures: list[tuple[str, str]], total: int) -> None:
    """Name each capture that could not be read; exit non-zero when there is one."""
    if not failures:
        return
    from dissector.options import text_path

    for path, reason in failures:
        name = text_path(path)  # a name of bytes that are not UTF-8 shown as \xNN
        line = reason if reason.startswith((path, name)) else f"{name}: {reason}"
        click.echo(f"error: {line}", err=True)
    raise click.ClickException(f"{len(failures)} of {total} captures failed")


def warn_damage(path: str, counters: dict[str, int]) -> None:
    """A capture read only in part is still a success, but the user must know."""
    for name, meaning in _FILE_DAMAGE.items():
        if counters.get(name):
            click.echo(f"warning: {path}: {meaning} ({name}={counters[name]})", err=True)


def load_decoder(specs: tuple[str, ...]) -> BoundDecoder:
    from dissector.protocol.bound_decoder import decoder_for

    try:
        decoder = decoder_for(specs)
        decoder.registry  # noqa: B018 - load now so that a bad spec fails here, clearly
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load specs: {exc}") from exc
    return decoder


# ---------------------------------------------------------------- Ctrl-C

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command Ctrl-C ended


@dataclass
class Outputs:
    """What a command has written so far, so that Ctrl-C can say it (one per run)."""

    written: list[str] = field(default_factory=list)
    writing: str | None = None  # an output file being written now
    # files written batch by batch during a pass (the analytics tables): cut off
    # until the pass ends and they are closed
    streaming: list[str] = field(default_factory=list)
    lines: int = 0  # JSON lines written to stdout (decode)
    # outputs a cancelled run leaves incomplete and cannot take back (a Spark job's
    # output folder, written by many tasks at once): named, not removed
    incomplete: list[str] = field(default_factory=list)


def outputs() -> Outputs:
    """The running command's record of its outputs (kept in the click context)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return Outputs()
    meta = ctx.find_root().meta
    found = meta.get("kafka_dissector.outputs")
    if not isinstance(found, Outputs):
        found = meta["kafka_dissector.outputs"] = Outputs()
    return found


def interrupted(done: Outputs) -> NoReturn:
    """Ctrl-C: say what was written (and remove a file cut off mid-write), exit 130."""
    parts = list(done.written)
    if done.lines:
        parts.append(f"{done.lines} JSON lines to stdout")
    message = "interrupted: " + (f"wrote {', '.join(parts)}" if parts else "nothing written")
    for cut in [done.writing, *done.streaming]:
        if cut is not None and cut not in done.written and Path(cut).is_file():
            Path(cut).unlink(missing_ok=True)
            message += f"; {cut} was cut off while being written: removed"
    for left in done.incomplete:
        message += f"; {left} is incomplete"
    click.echo(message, err=True)
    sys.exit(EXIT_INTERRUPTED)


# ---------------------------------------------------------------- --filter

FILTER_HELP = (
    "only rows matching EXPR, e.g. 'api == Fetch and latency > 100', 'error', "
    "'client contains cons or topic == orders' (syntax: README, Filtering)"
)


def parse_row_filter(text: str | None) -> Filter | None:
    """``--filter``: the parsed filter, or a usage error naming what is wrong."""
    if text is None:
        return None
    from dissector.table.row_filter import FilterError, parse_filter

    try:
        return parse_filter(text)
    except FilterError as exc:
        raise click.BadParameter(str(exc), param_hint="--filter") from None


def max_frame_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--max-frame N``: the largest Kafka frame the pass accepts (``Options.max_frame``;
    None when not given: the default)."""
    return click.option(
        "--max-frame",
        type=click.IntRange(min=1),
        default=None,
        help="largest Kafka frame accepted, bytes (default 100 MiB)",
    )(command)


def chain_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--chain``, ``--no-chain`` and ``--chain-gap``: how several files group into
    continuous captures (``dissector.wire.sets``); read by ``chain_rule``."""
    command = click.option(
        "--chain-gap",
        type=click.FloatRange(min=0),
        default=3600.0,
        show_default=True,
        help="seconds of silence between two files beyond which they are not chained",
    )(command)
    command = click.option(
        "--no-chain", is_flag=True, help="read every file as a capture of its own (--chain none)"
    )(command)
    return click.option(
        "--chain",
        type=click.Choice(["auto", "none", "all"]),
        default="auto",
        show_default=True,
        help="files of one rotated recording (same name pattern, link types and interfaces, "
        "one after the other in time) are read as one capture; none: each file alone; "
        "all: the files are one capture, in time order",
    )(command)


def pass_options(
    *,
    ports: str | None,
    max_frame: int | None,
    max_decompressed: int | None,
    tls: KeyLogs | None,
    chain: ChainRule | None = None,
) -> Options:
    """The ``Options`` of a command's passes, from its ``--ports``, ``--max-frame``,
    ``--max-decompressed``, ``--tls-keylog`` and chain options: the one place a command
    builds them, handed whole to every pass it runs (``max_frame`` None: the default)."""
    from dissector.options import DEFAULT_MAX_FRAME, ChainRule, Options

    return Options(
        ports=parse_ports(ports),
        max_frame=max_frame if max_frame is not None else DEFAULT_MAX_FRAME,
        chain=chain if chain is not None else ChainRule(),
        tls=tls,
        max_decompressed=max_decompressed,
    )


def chain_rule(chain: str, no_chain: bool, chain_gap: float) -> ChainRule:
    from dissector.options import ChainRule

    if no_chain and chain != "auto":
        raise click.UsageError("--no-chain and --chain: give one of them")
    return ChainRule(mode="none" if no_chain else chain, max_gap_s=chain_gap)  # type: ignore[arg-type]


def group_captures(
    paths: Sequence[str], rule: ChainRule, failures: list[tuple[str, str]]
) -> list[CaptureSet]:
    """The readable ``paths`` as capture sets; each file that cannot be read is added
    to ``failures`` (path, reason) and left out."""
    from dissector.wire.sets import capture_sets

    readable = []
    for path in paths:
        problem = capture_problem(path)
        if problem is not None:
            failures.append((path, problem))
        else:
            readable.append(path)
    return capture_sets(readable, rule, failures=failures)


def note_sets(sets: Sequence[CaptureSet]) -> None:
    """Say on stderr which files were read as one capture (a note, not a warning: the
    user should know the rows' ``capture`` names the first file of each)."""
    for s in sets:
        if len(s.files) > 1:
            rest = s.file_names[-1]
            click.echo(
                f"note: {len(s.files)} files read as one capture {s.name} (to {rest}; "
                "--no-chain reads them apart)",
                err=True,
            )


@contextlib.contextmanager
def _one_shot() -> Iterator[None]:
    """Settings for a command that does one thing and ends with the process (analyze,
    report; issue #10: analyze's wall time is compared with tshark's).

    * numpy (imported by pyarrow) starts OpenBLAS's thread pool, whose threads spin a
      while; the commands do no linear algebra (about 35 ms of CPU on 2 cores).
    * The cyclic collector would only walk the objects of imports, 90 times (about
      30 ms on a 94,000-pair capture): the rows live in Arrow buffers and numpy arrays,
      and a run makes no cycles worth it (a report's peak stays the same without it, at
      32,000 pairs, 259,000 and 1.5M).
    * At exit, the interpreter's last full collection walks every object again; frozen,
      they are only freed: 50 ms less CPU to end analyze, and 0.1 s less for a report
      (pandas and pyarrow's dataset modules alone take 0.07-0.09 s to tear down).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # read when numpy loads
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        _freeze_at_exit()


@functools.cache
def _freeze_at_exit() -> None:
    atexit.register(gc.freeze)


def one_shot(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` run with ``_one_shot``'s settings."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        with _one_shot():
            command(*args, **kwargs)

    return run
