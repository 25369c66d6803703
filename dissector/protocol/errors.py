"""Kafka error code -> name, as Apache Kafka's ``Errors.java`` spells it.

The table is not typed in here: it is the ``errors`` table of the bundled data
(``bundled``), which ``scripts/specs/generate.py`` reads from the ``Errors`` enum of the
newest kafka-clients jar: Java constant names (``UNKNOWN_TOPIC_OR_PARTITION``, ``NONE``,
``UNKNOWN_SERVER_ERROR``) and whether each error's exception is retriable.
"""

from __future__ import annotations

import operator
from functools import cache
from types import MappingProxyType
from typing import Final, SupportsIndex

from dissector.protocol.diskcache import load_or_build

__all__ = ["ERROR_NAMES", "error_name", "error_retriable"]


def _from_bundled() -> dict[int, tuple[str, bool]]:
    from dissector.protocol.bundled import bundled_errors

    return {e.code: (e.name, e.retriable) for e in bundled_errors()}


@cache
def _table() -> MappingProxyType[int, tuple[str, bool]]:
    # From the start-up cache: a run that finds it never reads the bundled data.
    return MappingProxyType(load_or_build("error-names", _from_bundled))


ERROR_NAMES: Final[MappingProxyType[int, tuple[str, bool]]] = _table()
"""Read-only ``code -> (NAME, retriable)`` for every code Kafka's ``Errors`` defines."""


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
    if type(code) is int:  # the usual case, without the protocol check (decode: per pair)
        return ERROR_NAMES.get(code)
    if isinstance(code, bool) or not isinstance(code, SupportsIndex):
        return None
    try:
        key = operator.index(code)
    except TypeError:
        return None
    return ERROR_NAMES.get(key)
