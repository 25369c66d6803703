"""Captures -> exchanges (the native core) -> fully decoded exchanges (``protocol.pairs``).

The composition every full-body reader shares: ``dissector.decode`` and the ``decode``
command, and the partitions, groups and versions tables.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from dissector.accounting import Counters
from dissector.options import AnySource, Options, capture_paths, keyword_options
from dissector.protocol.bound_decoder import with_max_decompressed
from dissector.protocol.pairs import (
    DecodedExchange,
    Expand,
    as_json,
    decode_exchanges,
    decoder_for_specs,
)
from dissector.stages import ExchangeView
from dissector.wire.core import iter_core_exchanges

if TYPE_CHECKING:
    from dissector.protocol.summary import TopicNames
    from dissector.stages import Decoder
    from dissector.tls import KeyLogs

Source = str | os.PathLike[str] | AnySource | Iterable[str | os.PathLike[str] | AnySource]


def _never(_api: str, _request: bool) -> bool:
    return False


def decoded_exchanges(
    source: Source,
    wanted: Callable[[ExchangeView, str | None], bool],
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    expand: Expand = _never,
    counts: Counter[str] | None = None,
    counters: Counters | None = None,
    decoder: Decoder | None = None,
    tls: KeyLogs | None = None,
    options: Options | None = None,
) -> Iterator[tuple[DecodedExchange, TopicNames]]:
    """(decoded exchange, the capture's TopicNames) for each wanted exchange of the
    captures (see ``protocol.pairs.decode_exchanges``); ``counters``: the run's counters;
    ``options``: the run's options (``ports``/``tls`` laid over them)."""
    options = keyword_options(options, ports=ports, tls=tls)
    decoder = with_max_decompressed(
        decoder if decoder is not None else decoder_for_specs(specs), options.max_decompressed
    )
    exchanges = iter_core_exchanges(
        capture_paths(source), options, decoder=decoder, counters=counters
    )
    return decode_exchanges(
        ((x.capture, x) for x in exchanges), decoder, wanted, expand=expand, counts=counts
    )


def iter_decoded(
    source: Source,
    *,
    api: int | None = None,
    records: bool = False,
    specs: Iterable[str | os.PathLike[str]] = (),
    ports: Iterable[int] | None = None,
    counters: Counters | None = None,
    tls: KeyLogs | None = None,
    options: Options | None = None,
) -> Iterator[dict[str, Any]]:
    """One JSON-able dict per request/response pair (or lone frame), in capture order:
    only API key ``api`` when given; ``records`` expands record batches into records."""
    decoder = decoder_for_specs(specs)

    def wanted(ex: ExchangeView, _name: str | None) -> bool:
        return api is None or ex.api_key == api

    def expand(_api: str, _request: bool) -> bool:
        return records

    for dx, names in decoded_exchanges(
        source,
        wanted,
        ports=ports,
        expand=expand,
        counters=counters,
        decoder=decoder,
        tls=tls,
        options=options,
    ):
        yield as_json(dx, decoder, names)
