"""One rule for turning the package's values into JSON values.

Every JSON the package writes goes through ``jsonable``: the ``decode`` command's
lines (decoded bodies, record batches), the ``.jsonl``/``.json`` export of the pairs
frame. It works two ways: called on a value it returns a copy made only of dict, list,
str, int, float, bool and None; given to ``json.dumps(default=jsonable)`` it is only
called for what ``json`` cannot write itself (bytes, record sets), which is faster on
large decoded bodies.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import sys
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` as JSON values: bytes as base64 (RFC 4648), objects with ``to_json``
    by it, dataclasses as dicts, tuples as lists, datetimes (pandas' ``Timestamp``
    too) as ISO 8601, numpy scalars and arrays as Python ones, and a missing value
    (NaN, ``NaT``, ``pd.NA``) as None. Anything else raises ``TypeError``, as
    ``json.dumps`` expects of its ``default``."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        # NaN is how pandas marks a missing float; JSON has no NaN
        return None if value != value else float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_json"):
        return jsonable(value.to_json())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    # before the datetime test: pandas' NaT is a datetime whose isoformat is "NaT"
    if _pandas_missing(value):
        return None
    if isinstance(value, datetime.date):
        return value.isoformat()
    if hasattr(value, "tolist"):  # numpy: a scalar gives a Python one, an array a list
        return jsonable(value.tolist())
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _pandas_missing(value: Any) -> bool:
    """``pd.NA``, ``pd.NaT`` and the like. A pandas value exists only once pandas is
    loaded, so it is not imported here: the decode command never needs it."""
    pd = sys.modules.get("pandas")
    return pd is not None and bool(pd.api.types.is_scalar(value)) and bool(pd.isna(value))


def iso_ns(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as ISO 8601 UTC with all nine digits, the way the
    pairs table's JSON output writes its times (``2026-11-22T15:54:08.648165829+00:00``)."""
    if ns is None:
        return None
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{_second_text(seconds)}.{fraction:09d}+00:00"


@functools.lru_cache(maxsize=1024)
def _second_text(seconds: int) -> str:
    """A whole second's date and time: pairs come in time order, many in one second, and
    ``decode`` writes two times a pair."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}"
