"""Names a package exports but imports only on first use (PEP 562 module ``__getattr__``).

A package that re-exports its modules' names would import them all when it is imported;
``protocol`` (the decoders) and ``analytics.report`` (pandas) cost start-up time a run
that never uses them should not pay.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: name -> the same name in module
    ``package.homes[name]``, imported on first use and kept in ``namespace`` (the
    package's ``globals()``), so that later reads do not call it again."""

    def attribute(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{home}"), name)
        namespace[name] = value
        return value

    return attribute
