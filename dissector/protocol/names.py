"""API names and the coverage table."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from dissector.protocol.keys import api_names
from dissector.protocol.messages import Registry, assumed_layout, get_registry
from dissector.protocol.spec import REQUEST, RESPONSE


@cache
def _names() -> dict[int, str]:
    # Every key the bundled layers describe, the inter-broker keys 4-7 that Kafka 4.0
    # removed included (their older layer describes them).
    return api_names()


def api_name(api_key: int, registry: Registry | None = None) -> str:
    """Kafka's name for an API key (e.g. ``Produce``), or ``Unknown(k)``.

    With a registry built from ``--specs``, keys newer than the bundled specs are
    named by their spec.
    """
    name = _names().get(api_key)
    if name is None and registry is not None:
        name = registry.specs.names.get(api_key)
    return name or f"Unknown({api_key})"


@dataclass(frozen=True, slots=True)
class ApiSupport:
    api_key: int
    name: str
    request_versions: tuple[int, ...]
    response_versions: tuple[int, ...]
    sources: tuple[str, ...]
    # Newer versions are decoded with this version's layout when they fit it exactly
    # (messages.ASSUMED_VERSION_RULE); None: newer versions stay unsupported_version.
    newer_decoded_as: int | None = None


def supported_apis(registry: Registry | None = None) -> list[ApiSupport]:
    """Every API key we know of, with the versions we can decode in each direction."""
    reg = registry or get_registry()
    keys = sorted(set(_names()) | set(reg.specs.keys()))
    out: list[ApiSupport] = []
    for key in keys:
        sources = sorted(
            {
                layout.source
                for direction in (REQUEST, RESPONSE)
                for layout in reg.specs.layouts.get((key, direction), {}).values()
            }
        )
        out.append(
            ApiSupport(
                api_key=key,
                name=api_name(key, reg),
                request_versions=tuple(reg.specs.versions(key, REQUEST)),
                response_versions=tuple(reg.specs.versions(key, RESPONSE)),
                sources=tuple(sources),
                newer_decoded_as=_newer_decoded_as(reg, key),
            )
        )
    return out


def _newer_decoded_as(reg: Registry, api_key: int) -> int | None:
    versions = reg.specs.versions(api_key, REQUEST)
    if not versions:
        return None
    newer = versions[-1] + 1
    if all(assumed_layout(reg, api_key, newer, d) for d in (REQUEST, RESPONSE)):
        return versions[-1]
    return None


def version_ranges(versions: tuple[int, ...]) -> str:
    """(0, 1, 2, 5) -> "0-2,5"; () -> "-" (names and headers only)."""
    if not versions:
        return "-"
    parts: list[str] = []
    start = prev = versions[0]
    for v in versions[1:]:
        if v != prev + 1:
            parts.append(f"{start}-{prev}" if prev != start else str(start))
            start = v
        prev = v
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)
