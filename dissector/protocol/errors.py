"""Kafka error code -> name, as Apache Kafka's ``Errors.java`` spells it.

The table is not typed in here: it is read from kio's ``ErrorCode`` enum, which kio
generates from Apache Kafka's sources. Enum members are lower snake case
(``unknown_topic_or_partition``); upper-casing gives the Java constant names
(``UNKNOWN_TOPIC_OR_PARTITION``, ``NONE``, ``UNKNOWN_SERVER_ERROR``).
"""

from __future__ import annotations

import operator
from functools import cache
from types import MappingProxyType
from typing import Final, SupportsIndex

from dissector.protocol.diskcache import load_or_build

__all__ = ["ERROR_NAMES", "error_name", "error_retriable"]


def _from_kio() -> dict[int, tuple[str, bool]]:
    from kio.schema.errors import ErrorCode

    return {int(m.value): (m.name.upper(), bool(m.retriable)) for m in ErrorCode}


@cache
def _table() -> MappingProxyType[int, tuple[str, bool]]:
    # From the start-up cache: importing kio alone takes longer than a small capture.
    return MappingProxyType(load_or_build("error-names", _from_kio))


ERROR_NAMES: Final[MappingProxyType[int, tuple[str, bool]]] = _table()
"""Read-only ``code -> (NAME, retriable)`` for every code kio defines."""


def error_name(code: int) -> str | None:
    """Kafka's name for an int16 error code, or None when Kafka defines no such code.

    Never raises: wire values come from untrusted bytes, so anything that is not an
    integer known to the table (bools, floats, None, strings) gives None. Integer
    types such as numpy's int16 are accepted, since DataFrame columns hold them.
    """
    entry = _lookup(code)
    return entry[0] if entry is not None else None


def error_retriable(code: int) -> bool | None:
    """Whether Kafka marks the code retriable; None for an unknown code."""
    entry = _lookup(code)
    return entry[1] if entry is not None else None


def _lookup(code: object) -> tuple[str, bool] | None:
    if isinstance(code, bool) or not isinstance(code, SupportsIndex):
        return None
    try:
        key = operator.index(code)
    except TypeError:
        return None
    return ERROR_NAMES.get(key)
