"""The report as one HTML document: the Jinja template filled with the sections."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Imported here, not where used: a missing optional dependency (report extra: jinja2)
# then surfaces as the CLI's clear message, not a traceback (``run.analyze`` imports this
# module as its pass starts).
import jinja2
from markupsafe import Markup, escape

from dissector import __version__
from dissector.analytics import stats
from dissector.analytics.report.derived import capture_names
from dissector.analytics.report.formatting import fmt_int, fmt_time
from dissector.analytics.report.model import COLLAPSE_ROWS
from dissector.analytics.report.sections import sections

if TYPE_CHECKING:
    import pandas as pd


@functools.cache
def _template() -> Any:
    """The compiled page template (compiled once: ``run.analyze`` compiles it while the
    core reads the capture)."""
    source = resources.files("dissector").joinpath("templates/report.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, finalize=_visible)
    env.globals["zip"] = zip
    env.filters["breakable"] = breakable
    return env.from_string(source)


def _visible(value: Any) -> Any:
    """Wire strings shown in the page keep no control characters (written ``\\xNN``)."""
    from dissector.table.text_rows import visible_text

    # Called for every value the page shows (ten thousand on a long capture): a text
    # with no control character (``isprintable``: none of ``visible_text``'s) is itself
    if type(value) is str and value.isprintable():
        return value
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible_text(value)
    return value


def breakable(text: str) -> Markup:
    """``text`` escaped, with a line-break opportunity after each underscore and slash:
    browsers break at spaces and hyphens only, and an error name such as
    SASL_AUTHENTICATION_FAILED would otherwise set its column's minimum width."""
    # escaping adds no underscore or slash, nor does the first replace add a slash
    escaped = str(escape(_visible(str(text))))
    return Markup(escaped.replace("_", "_<wbr>").replace("/", "/<wbr>"))


def render(
    df: pd.DataFrame,
    *,
    title: str | None = None,
    command: str = "",
    ports: frozenset[int] | None = None,
) -> str:
    """The report of the pairs frame ``df`` as one HTML document (``ports``: the
    ``--ports`` the pairs were found with, for the no-Kafka page's hint)."""
    with stats.memoized(df):
        return _render(df, title=title, command=command, ports=ports)


def _render(
    df: pd.DataFrame, *, title: str | None, command: str, ports: frozenset[int] | None
) -> str:
    facts = stats.capture_facts(df)
    names = ", ".join(Path(c).name for c in capture_names(df)) or "no capture"
    if df.empty:
        subtitle = f"No Kafka request/response pairs in {names}"
    else:
        subtitle = (
            f"{fmt_int(len(df))} Kafka request/response pairs from {names}; "
            f"{fmt_time(facts.first)} to {fmt_time(facts.last)}"
        )
    command = command or "kafka-dissector report " + " ".join(capture_names(df))
    return _template().render(
        title=title or f"Kafka traffic report: {names}",
        subtitle=subtitle,
        sections=sections(df, command, ports=ports, facts=facts),
        collapse_rows=COLLAPSE_ROWS,
        version=__version__,
        command=command,
    )


def write_report(
    df: pd.DataFrame,
    output: str | Path,
    *,
    title: str | None = None,
    command: str = "",
    ports: frozenset[int] | None = None,
) -> Path:
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    html = render(df, title=title, command=command, ports=ports)
    # The command line may hold file names the OS gave as bytes that are not UTF-8:
    # shown as \xNN, as the capture column shows them (options.text_path).
    html = html.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    path.write_text(html, encoding="utf-8")
    return path
