"""``kafka-dissector decode`` (JSON lines, one object per pair) and ``kafka-dissector apis``."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO, cast

import click
import orjson

from dissector.accounting import Counters
from dissector.analytics.no_kafka import no_kafka
from dissector.cli.common import (
    FILTER_HELP,
    chain_options,
    chain_rule,
    group_captures,
    max_decompressed_option,
    max_frame_option,
    note_sets,
    outputs,
    parse_row_filter,
    pass_options,
    report_failures,
    tls_key_logs,
    tls_keylog_option,
    warn_damage,
)
from dissector.json_values import jsonable
from dissector.protocol import Registry, get_registry, supported_apis
from dissector.protocol.names import version_ranges
from dissector.stages import CaptureError
from dissector.table.row_filter import Filter
from dissector.wire.full_decode import iter_decoded


def parse_api(value: str | None, registry: Registry | None = None) -> int | None:
    """``--api``: a key number or a name such as ``Fetch`` (case-insensitive).

    Only APIs the specs know: a filter on any other key would silently match nothing.
    """
    if value is None:
        return None
    text = value.strip()
    apis = supported_apis(registry) if registry is not None else supported_apis()
    if text.lstrip("-").isdigit():
        key = int(text)
        if any(api.api_key == key for api in apis):
            return key
    else:
        wanted = text.lower().replace("_", "").replace("-", "")
        for api in apis:
            if api.name.lower() == wanted:
                return api.api_key
    raise click.BadParameter(
        f"unknown API {value!r}; see `kafka-dissector apis`", param_hint="--api"
    )


def load_registry(spec_dirs: Iterable[str]) -> Registry:
    """The spec model with the user's --specs, or one clear error line."""
    try:
        return get_registry(list(spec_dirs))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load specs: {exc}") from exc


@click.command("decode")
@click.argument("paths", nargs=-1, required=True, type=click.Path(readable=False))
@click.option("--api", "api", help="only this API: a key number or a name such as Fetch")
@click.option("--records", is_flag=True, help="expand record batches into records")
@click.option(
    "--specs",
    "spec_dirs",
    multiple=True,
    type=click.Path(exists=True),
    help="Apache Kafka JSON message specs (newer or vendor Kafka): a directory, "
    "or a kafka-clients jar; repeatable",
)
@click.option("--ports", help="broker ports and ranges, e.g. 9092,9094-9096")
@click.option("--filter", "row_filter", metavar="EXPR", help=FILTER_HELP)
@max_frame_option
@max_decompressed_option
@chain_options
@tls_keylog_option
def decode_command(
    paths: tuple[str, ...],
    api: str | None,
    records: bool,
    spec_dirs: tuple[str, ...],
    ports: str | None,
    row_filter: str | None = None,
    max_frame: int | None = None,
    max_decompressed: int | None = None,
    chain: str = "auto",
    no_chain: bool = False,
    chain_gap: float = 3600.0,
    tls_keylog: tuple[str, ...] = (),
) -> None:
    """Decode every request/response pair of the captures as JSON lines.

    Each line carries the pair's times, latency and status as the pairs table has them.
    Files of one rotated recording are read as one capture (--chain)."""
    key = parse_api(api, load_registry(spec_dirs))
    wanted = parse_row_filter(row_filter)
    options = pass_options(
        ports=ports,
        max_frame=max_frame,
        max_decompressed=max_decompressed,
        tls=tls_key_logs(tls_keylog),
        chain=chain_rule(chain, no_chain, chain_gap),
    )
    failures: list[tuple[str, str]] = []
    sets = group_captures(paths, options.chain, failures)
    note_sets(sets)
    tally = _FilterTally()
    for capture_set in sets:
        counters = Counters()
        items = iter_decoded(
            [capture_set],
            api=key,
            records=records,
            specs=spec_dirs,
            counters=counters,
            options=options,
        )
        if wanted is not None:
            items = tally.filtered(items, wanted)
        try:
            _write_lines(items, sys.stdout)
        except CaptureError as exc:
            # lines of this capture already written stay: they are complete pairs
            failures.append((capture_set.name, str(exc)))
            continue
        seen = counters.as_dict()
        warn_damage(capture_set.name, seen)
        _say_if_no_kafka(capture_set.name, seen, options.ports)
    if wanted is not None and not tally.matched:
        click.echo(tally.no_match(wanted), err=True)
    report_failures(failures, len(paths))


def _say_if_no_kafka(name: str, counters: dict[str, int], ports: frozenset[int] | None) -> None:
    """The lines go to stdout, so the sentence that no Kafka was there goes to stderr:
    no line at all must not read like an answer. Decided on the frames found, not on
    the lines written, which --api and --filter thin out."""
    if counters.get("kafka_frames", 0):
        return
    absent = no_kafka(0, counters, (), ports)
    if absent is not None:
        click.echo(f"note: {name}: {absent.sentence()}", err=True)


@dataclass
class _FilterTally:
    """What ``--filter`` saw go by: an empty output must not read like an answer when
    the filter named an API or error no pair has (``api == Fecth``)."""

    decoded: int = 0
    matched: int = 0
    names: dict[str, set[str]] = field(default_factory=dict)  # case-folded, per column

    def filtered(self, items: Iterable[dict[str, Any]], wanted: Filter) -> Iterator[dict[str, Any]]:
        for item in items:
            row = decode_row(item)
            self.decoded += 1
            for column in wanted.name_columns:
                if row.get(column) is not None:
                    self.names.setdefault(column, set()).add(str(row[column]).casefold())
            if wanted.matches(row):
                self.matched += 1
                yield item

    def no_match(self, wanted: Filter) -> str:
        unknown = "; ".join(wanted.absent_among(self.names))
        among = f": {unknown} among them" if unknown else ""
        return f"no pair matches {wanted.text!r} ({self.decoded} pairs decoded{among})"


def decode_row(item: dict[str, Any]) -> dict[str, Any]:
    """A decode line as the pairs table's columns, for ``--filter``."""
    row = {k: v for k, v in item.items() if k not in ("request", "response", "summary")}
    for side in ("client", "broker"):
        ip, _, port = str(item[side]).rpartition(":")
        row[f"{side}_ip"], row[f"{side}_port"] = ip, int(port) if port.isdigit() else None
    for name, value in (item.get("summary") or {}).items():
        row.setdefault(name, value)  # the row's own decode_error is the pairs table's
    return row


def line_encoder() -> Callable[[Any], bytes]:
    """One JSON line per item: UTF-8 bytes ending in a newline, compact (no spaces
    between items), values as ``json.dumps(item, default=jsonable)`` gives them.

    orjson writes them: a line by ``json``'s C encoder took a quarter of a decoded pair's
    time, orjson about a sixth of that. Its fast path refuses what a decoded body seldom
    holds (an unknown tagged field keyed by its number, an integer beyond 64 bits); such
    a line is written by ``_rare_line``. orjson writes NaN and infinities as null (JSON
    has neither), ``json`` as JavaScript's words."""
    dumps, fast = orjson.dumps, _FAST_LINE

    def encode(item: Any) -> bytes:
        try:
            return dumps(item, default=jsonable, option=fast)
        except TypeError:
            return _rare_line(item)

    return encode


# dataclasses and datetimes go through ``jsonable`` as in every other JSON output (a
# record set's own ``to_json``, ISO 8601 times), not orjson's own forms of them.
_FAST_LINE = (
    orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def _rare_line(item: Any) -> bytes:
    """A line orjson's fast path refused: keys that are not strings (written as JSON
    object keys, ``"5"``), else ``json`` for what orjson cannot write at all (an integer
    beyond 64 bits); a value neither can write raises ``jsonable``'s TypeError."""
    try:
        return orjson.dumps(item, default=jsonable, option=_FAST_LINE | orjson.OPT_NON_STR_KEYS)
    except TypeError:
        text = json.dumps(item, default=jsonable, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "surrogateescape") + b"\n"


def _write_lines(items: Iterable[dict[str, Any]], out: TextIO) -> None:
    """The items' lines, written a chunk at a time: stdout may be unbuffered
    (``PYTHONUNBUFFERED``, common in containers), and a system call a line took a tenth
    of a pair's time. The lines of the items read before an error are written."""
    done = outputs()
    encode = line_encoder()
    write = _bytes_writer(out)
    chunk: list[bytes] = []
    size = 0
    try:
        for item in items:
            line = encode(item)
            chunk.append(line)
            done.lines += 1
            size += len(line)
            if size >= _CHUNK_BYTES:
                write(b"".join(chunk))
                chunk.clear()
                size = 0
    finally:
        if chunk:
            write(b"".join(chunk))


_CHUNK_BYTES = 1 << 16


def _bytes_writer(out: TextIO) -> Callable[[bytes], object]:
    """Writes UTF-8 text to ``out``: to its byte buffer when it has one (the text
    written before is flushed first, so the order holds), else as text."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        return lambda data: out.write(data.decode("utf-8", "surrogateescape"))
    out.flush()
    return cast("Callable[[bytes], object]", buffer.write)


@click.command("apis")
@click.option(
    "--specs",
    "spec_dirs",
    multiple=True,
    type=click.Path(exists=True),
    help="Apache Kafka JSON message specs to include: a directory or a kafka-clients jar",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object per API")
def apis_command(spec_dirs: tuple[str, ...], as_json: bool) -> None:
    """List every API key with the request and response versions we decode.

    "newer: as vN": a newer version is decoded with vN's layout when both its bodies
    fit it exactly (flexible vN), and marked in the assumed_version column; otherwise
    its bodies are not decoded (decode_error unsupported_version).
    """
    for api in supported_apis(load_registry(spec_dirs)):
        if as_json:
            click.echo(json.dumps(dataclasses.asdict(api)))
        else:
            request = version_ranges(api.request_versions)
            response = version_ranges(api.response_versions)
            newer = "" if api.newer_decoded_as is None else f"  newer: as v{api.newer_decoded_as}"
            click.echo(
                f"{api.api_key:>4}  {api.name:<38} request {request:<8} response {response:<8}"
                f"{newer}".rstrip()
            )
