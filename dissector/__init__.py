"""kafka-dissector: Kafka network traffic -> decoded request/response pairs.

Public API:
    analyze(source, *, ports=None) -> pandas.DataFrame   (one row per pair)
    iter_pairs(source, *, ports=None) -> Iterator[PairRecord]  (streaming)
    COLUMNS / COLUMN_NAMES: the DataFrame contract
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dissector.schema import COLUMN_NAMES, COLUMNS

if TYPE_CHECKING:
    import os

    import pandas as pd

    from dissector.accounting import Counters
    from dissector.options import ChainRule, Options
    from dissector.protocol.bound_decoder import BoundDecoder
    from dissector.stages import Exchange, PairRecord
    from dissector.tls import KeyLogs

__all__ = [
    "COLUMNS",
    "COLUMN_NAMES",
    "CaptureSet",
    "ChainRule",
    "Counters",
    "Options",
    "PairRecord",
    "analyze",
    "decode",
    "groups",
    "iter_exchanges",
    "iter_pairs",
    "live",
    "partitions",
    "versions",
]

__version__ = "0.1.0"

# Imported on first use so that ``import dissector`` stays cheap for Spark workers.
_LAZY = {
    "CaptureSet": "dissector.options",
    "ChainRule": "dissector.options",
    "Counters": "dissector.accounting",
    "Options": "dissector.options",
    "PairRecord": "dissector.stages",
}
# Sub-modules reachable as attributes: ``dissector.live(...)`` (the module is callable).
_LAZY_MODULES = {
    "live": "dissector.live",
    # the analytics tables: ``dissector.partitions(capture)`` etc.
    "partitions": "dissector.analytics.partitions",
    "groups": "dissector.analytics.groups",
    "versions": "dissector.analytics.versions",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module 'dissector' has no attribute {name!r}")


def analyze(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    options: Options | None = None,
    chain: str | ChainRule = "auto",
    tls_keylog: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> pd.DataFrame:
    """Every Kafka request/response pair in the capture(s), one row each.

    ``specs``: extra Apache Kafka JSON message-spec directories or kafka-clients
    jars, for versions newer than the installed specs.
    ``chain``: how several files group into continuous captures ("auto": the files
    of one rotated recording are one capture, "none", "all", or a ``ChainRule``;
    a ``CaptureSet`` in ``source`` is read as given); ``df.attrs["capture_sets"]``
    lists each capture's files.
    ``df.attrs["counters"]`` holds what the stages counted (packets, gaps, frames
    that were not Kafka, ...), ``df.attrs["tls_streams"]`` the connections found to
    carry TLS not decrypted, ``df.attrs["tls"]`` the TLS connections by version, cipher
    suite and outcome.
    ``tls_keylog``: NSS key log file(s) to decrypt Kafka over TLS with (``SSLKEYLOGFILE``
    is read too when set); rows of decrypted connections carry the ``tls`` flag.
    """
    from dissector.options import capture_paths
    from dissector.table.analysis import run_analysis

    if options is None:
        options = _options(ports, chain, tls_keylog)
    return run_analysis(capture_paths(source), options, decoder=_decoder(specs))


def iter_pairs(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    options: Options | None = None,
    counters: Counters | None = None,
    chain: str | ChainRule = "auto",
    tls_keylog: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> Iterator[PairRecord]:
    """Stream the pair records of one or many captures (the DataFrame's rows); memory
    stays flat in the capture length. ``chain``: see ``analyze``."""
    from dissector.options import capture_paths
    from dissector.wire import core

    if options is None:
        options = _options(ports, chain, tls_keylog)
    return core.iter_pairs(
        capture_paths(source), options, decoder=_decoder(specs), counters=counters
    )


def iter_exchanges(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    options: Options | None = None,
    counters: Counters | None = None,
    chain: str | ChainRule = "auto",
    tls_keylog: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> Iterator[tuple[str, Exchange]]:
    """(capture path, exchange) for every request/response exchange, with raw payloads.
    ``chain``: see ``analyze``."""
    from dissector.options import capture_paths
    from dissector.wire import core

    if options is None:
        options = _options(ports, chain, tls_keylog)
    return core.iter_exchanges(
        capture_paths(source), options, decoder=_decoder(specs), counters=counters
    )


def decode(
    source: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    api: int | None = None,
    records: bool = False,
    specs: Iterable[str | os.PathLike[str]] = (),
    ports: Iterable[int] | None = None,
    tls_keylog: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
    options: Options | None = None,
) -> Iterator[dict[str, Any]]:
    """Every pair fully decoded: request and response headers and bodies as nested
    dicts (Apache's field names in snake_case), one dict per pair, streaming.
    ``records=True`` expands record batches into records. ``options``: the run's
    options (``ports`` and ``tls_keylog`` laid over them)."""
    from dissector.wire.full_decode import iter_decoded

    keys = _key_logs(tls_keylog)
    return iter_decoded(
        source, api=api, records=records, specs=specs, ports=ports, tls=keys, options=options
    )


def _key_logs(given: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> KeyLogs | None:
    import os

    from dissector.tls import key_logs

    paths = [given] if isinstance(given, str | os.PathLike) else list(given)
    return key_logs(paths)


def _options(
    ports: Iterable[int] | None,
    chain: str | ChainRule,
    tls_keylog: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] = (),
) -> Options:
    from dissector.options import ChainRule, Options

    rule = chain if isinstance(chain, ChainRule) else ChainRule(mode=chain)  # type: ignore[arg-type]
    ports_set = frozenset(ports) if ports is not None else None
    return Options(ports=ports_set, chain=rule, tls=_key_logs(tls_keylog))


def _decoder(specs: Iterable[str | os.PathLike[str]]) -> BoundDecoder | None:
    paths = [str(s) for s in specs]
    if not paths:
        return None
    from dissector.protocol.bound_decoder import decoder_for

    return decoder_for(paths)
