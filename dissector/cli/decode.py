"""``kafka-dissector decode`` (JSON lines, one object per pair) and ``kafka-dissector apis``."""

from __future__ import annotations

import dataclasses
import json
import json.encoder
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import click

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


def line_encoder() -> Callable[[Any], str]:
    """One JSON encoder for every line, built once: ``json.dumps`` with options builds a
    ``JSONEncoder`` each call, and ``JSONEncoder.encode`` builds its C encoder anew each
    call (about a tenth of a line's encoding). The text is ``json.dumps(item,
    default=jsonable, ensure_ascii=False)``'s. No check for circular references: decoded
    bodies are trees."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the _json accelerator
        return json.JSONEncoder(default=jsonable, ensure_ascii=False, check_circular=False).encode
    strings = json.encoder.encode_basestring  # the C one when the accelerator is there
    chunks = make(None, jsonable, strings, None, ": ", ", ", False, False, True)

    def encode(item: Any) -> str:
        return "".join(chunks(item, 0))

    return encode


def _write_lines(items: Iterable[dict[str, Any]], out: TextIO) -> None:
    done = outputs()
    encode = line_encoder()
    write = out.write
    for item in items:
        write(encode(item) + "\n")  # one write a line: the line is short, a call is not
        done.lines += 1


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
