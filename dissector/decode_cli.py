"""``kafka-dissector decode`` (JSON lines, one object per pair) and ``kafka-dissector apis``."""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

import click

from dissector.accounting import Counters
from dissector.protocol import (
    Decoded,
    Registry,
    TopicNames,
    api_name,
    decode_request,
    decode_response,
    get_registry,
    summarize,
    supported_apis,
)
from dissector.protocol.decoder import decoder_for
from dissector.protocol.names import version_ranges


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


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if hasattr(value, "to_json"):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _side(decoded: Decoded | None) -> dict[str, Any] | None:
    if decoded is None:
        return None
    out: dict[str, Any] = {"header": decoded.header, "body": decoded.body}
    if decoded.error:
        out["error"] = decoded.error
    if decoded.trailing:
        out["trailing_bytes"] = decoded.trailing
    if decoded.notes:
        out["notes"] = decoded.notes
    if decoded.assumed_version is not None:
        out["assumed_version"] = decoded.assumed_version
    return out


def iter_decoded(
    paths: Iterable[str],
    *,
    api: int | None = None,
    records: bool = False,
    spec_dirs: Iterable[str] = (),
    ports: Iterable[int] | None = None,
    counters: Counters | None = None,
) -> Iterator[dict[str, Any]]:
    """One dict per request/response pair (or lone frame), in capture order.

    ``counters``, when given, receives the run's counters (e.g. ``truncated_file``).
    """
    from dissector.core import iter_exchanges
    from dissector.options import Options

    spec_dirs = list(spec_dirs)
    registry: Registry = get_registry(spec_dirs)
    topics: dict[str, TopicNames] = {}
    # The bound decoder tells the correlator which (key, version) exist, specs included.
    bound = decoder_for(spec_dirs) if spec_dirs else None
    options = Options(ports=frozenset(ports) if ports is not None else None)
    exchanges = iter_exchanges(list(paths), options, decoder=bound, counters=counters)
    for path, ex in exchanges:
        names = topics.setdefault(path, TopicNames())
        if api is not None and ex.api_key != api:
            continue
        request = response = None
        if ex.api_key is not None and ex.api_version is not None:
            if ex.request is not None:
                request = decode_request(ex.request.payload, records=records, registry=registry)
            if ex.response is not None:
                response = decode_response(
                    ex.response.payload,
                    ex.api_key,
                    ex.api_version,
                    records=records,
                    registry=registry,
                )
            summary = summarize(ex.api_key, ex.api_version, request, response, names)
            for side in (request, response):
                if side is not None:
                    names.annotate(side.body)
            summary_dict: dict[str, Any] | None = dataclasses.asdict(summary)
        else:
            summary_dict = None
        yield {
            "capture": path,
            "stream": ex.stream,
            "client": f"{ex.client[0]}:{ex.client[1]}",
            "broker": f"{ex.broker[0]}:{ex.broker[1]}",
            "kind": ex.kind,
            "api_key": ex.api_key,
            "api_name": api_name(ex.api_key, registry) if ex.api_key is not None else None,
            "api_version": ex.api_version,
            "correlation_id": ex.correlation_id,
            "note": ex.note,
            "request": _side(request),
            "response": _side(response),
            "summary": summary_dict,
        }


def _ports(value: str | None) -> frozenset[int] | None:
    from dissector.cli import parse_ports

    return parse_ports(value)


@click.command("decode")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
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
def decode_command(
    paths: tuple[str, ...],
    api: str | None,
    records: bool,
    spec_dirs: tuple[str, ...],
    ports: str | None,
) -> None:
    """Decode every request/response pair of the captures as JSON lines."""
    from dissector.capture import CaptureError
    from dissector.cli import capture_problem, report_failures, warn_damage

    key = parse_api(api, load_registry(spec_dirs))
    port_set = _ports(ports)
    failures: list[tuple[str, str]] = []
    for path in paths:
        problem = capture_problem(path)
        if problem is not None:
            failures.append((path, problem))
            continue
        counters = Counters()
        items = iter_decoded(
            [path], api=key, records=records, spec_dirs=spec_dirs, ports=port_set, counters=counters
        )
        try:
            _write_lines(items, sys.stdout)
        except CaptureError as exc:
            # lines of this capture already written stay: they are complete pairs
            failures.append((path, str(exc)))
            continue
        warn_damage(path, counters.as_dict())
    report_failures(failures, len(paths))


def _write_lines(items: Iterable[dict[str, Any]], out: TextIO) -> None:
    for item in items:
        out.write(json.dumps(item, default=_jsonable, ensure_ascii=False))
        out.write("\n")


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
