"""``kafka-dissector anomalies`` (the anomaly registry) and ``kafka-dissector codegen``
(the generated decoder of one layout): commands that show what the tool knows."""

from __future__ import annotations

import click

from dissector.anomalies import ANOMALIES, Kind, Severity, Stage, markdown_table, ordered
from dissector.protocol.spec import REQUEST, RESPONSE

_SEVERITY_STYLE = {Severity.INFO: "dim", Severity.WARNING: "yellow", Severity.ERROR: "red"}


@click.command("anomalies")
@click.option("--markdown", is_flag=True, help="print a markdown table (the README's section)")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in Kind]),
    help="only counters, decode_error codes, record errors, flags or notes",
)
@click.option("--stage", type=click.Choice([s.value for s in Stage]), help="only one stage")
def anomalies_command(markdown: bool, kind: str | None, stage: str | None) -> None:
    """Every counter, decode_error code and flag: stage, severity, meaning."""
    entries = [
        a
        for a in ANOMALIES
        if (kind is None or a.kind == kind) and (stage is None or a.stage == stage)
    ]
    if markdown:
        click.echo(markdown_table(entries), nl=False)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "kind", "stage", "severity", "meaning", title="anomalies")
    for a in ordered(entries):
        style = _SEVERITY_STYLE[a.severity]
        table.add_row(
            a.name, a.kind.value, a.stage.value, f"[{style}]{a.severity}[/]", a.description
        )
    Console().print(table)


@click.command("codegen")
@click.argument("api")
@click.argument("version", type=click.IntRange(min=0, max=32767))
@click.argument("direction", type=click.Choice([REQUEST, RESPONSE]))
@click.option(
    "--specs",
    "spec_dirs",
    multiple=True,
    type=click.Path(exists=True),
    help="also read Apache JSON specs from this directory or kafka-clients jar",
)
def codegen_command(api: str, version: int, direction: str, spec_dirs: tuple[str, ...]) -> None:
    """Print the generated Python decoder of one layout: API (key or name) VERSION DIRECTION.

    This is the code that runs, line for line: a traceback through a decoder names
    the same lines.
    """
    from dissector.protocol.compile import generated_source
    from dissector.protocol.messages import get_registry

    try:
        registry = get_registry(list(spec_dirs))
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"cannot load specs: {exc}") from exc
    api_key = _api_key(api, registry.specs.names)
    layout = registry.layout(api_key, version, direction)
    if layout is None:
        known = registry.specs.versions(api_key, direction)
        span = f"known versions {known[0]}-{known[-1]}" if known else "no known version"
        raise click.BadParameter(
            f"no {direction} layout for api_key {api_key} version {version} ({span})",
            param_hint="VERSION",
        )
    click.echo(generated_source(layout), nl=False)


def _api_key(text: str, names: dict[int, str]) -> int:
    """An API by number or name (``Fetch``, ``api-versions``, case-insensitive)."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        key = int(value)
        if key in names:
            return key
    else:
        wanted = _squash(value)
        for key, name in names.items():
            if _squash(name) == wanted:
                return key
    raise click.BadParameter(f"unknown API {text!r}; see `kafka-dissector apis`", param_hint="API")


def _squash(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")
