"""Live capture: an interface through the native core, rows as they complete.

``dissector.live(iface, ...)`` is this package called as a function (see ``live``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from dissector.live.loop import LiveCapture, LiveOptions, live
from dissector.live.source import CaptureStats, LiveError, PcapSource, default_filter

__all__ = [
    "CaptureStats",
    "LiveCapture",
    "LiveError",
    "LiveOptions",
    "PcapSource",
    "default_filter",
    "live",
]


# ``dissector.live`` is both this package and the function users call: importing a
# submodule rebinds the package attribute to the package, so the package itself is
# made callable and forwards to ``live``.
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return live(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
