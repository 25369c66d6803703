"""The protocol stage as one object bound to a spec set (``--specs``).

The pipeline takes any object with these methods as its decoder; the package
itself (``dissector.protocol``) is one bound to the installed specs, and
``decoder_for(spec_dirs)`` gives one that also reads Apache JSON specs from
directories or kafka-clients jars (newer or vendor Kafka).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from dissector.protocol import messages as _messages
from dissector.protocol.names import ApiSupport
from dissector.protocol.names import api_name as _api_name
from dissector.protocol.names import supported_apis as _supported_apis
from dissector.protocol.summary import Summary
from dissector.protocol.summary import TopicNames as _TopicNames
from dissector.protocol.summary import summarize as _summarize


@dataclass(frozen=True)
class BoundDecoder:
    """Holds only the spec paths, so it pickles (Spark workers) and each process
    builds and caches its own registry on first use."""

    spec_dirs: tuple[str, ...] = ()
    # the most one frame's record batches may decompress to (None: records.FRAME_BUDGET_CAP)
    max_decompressed: int | None = None
    # the pipeline makes one per capture: ``decoder.TopicNames()``
    TopicNames: ClassVar[type[_TopicNames]] = _TopicNames

    @property
    def registry(self) -> _messages.Registry:
        return _messages.get_registry(self.spec_dirs)

    def decode_request(
        self, payload: bytes, *, records: bool = False, prefix: bool = False
    ) -> _messages.Decoded:
        return _messages.decode_request(
            payload,
            records=records,
            registry=self.registry,
            max_decompressed=self.max_decompressed,
            prefix=prefix,
        )

    def decode_response(
        self,
        payload: bytes,
        api_key: int,
        api_version: int,
        *,
        records: bool = False,
        prefix: bool = False,
    ) -> _messages.Decoded:
        return _messages.decode_response(
            payload,
            api_key,
            api_version,
            records=records,
            registry=self.registry,
            max_decompressed=self.max_decompressed,
            prefix=prefix,
        )

    def summarize(
        self,
        api_key: int,
        api_version: int,
        request: _messages.Decoded | None,
        response: _messages.Decoded | None,
        topics: _TopicNames,
    ) -> Summary:
        return _summarize(api_key, api_version, request, response, topics)

    def api_name(self, api_key: int) -> str:
        return _api_name(api_key, self.registry)

    def supported_apis(self) -> list[ApiSupport]:
        return _supported_apis(self.registry)

    def is_known_version(self, api_key: int, api_version: int) -> bool:
        return _messages.is_known_version(api_key, api_version, self.registry)

    def request_is_flexible(self, api_key: int, api_version: int) -> bool:
        return _messages.request_is_flexible(api_key, api_version, self.registry)


def decoder_for(
    spec_dirs: Iterable[str | Path] = (), max_decompressed: int | None = None
) -> BoundDecoder:
    """A decoder that also knows the Apache JSON specs in these directories or jars
    (``max_decompressed``: its frames' decompression cap, None: the default)."""
    return BoundDecoder(tuple(str(Path(d)) for d in spec_dirs), max_decompressed)


def with_max_decompressed(decoder: Any, cap: int | None) -> Any:
    """``decoder`` decompressing at most ``cap`` bytes a frame (``Options.max_decompressed``):
    the package's own decoder or a ``BoundDecoder`` bound to the cap; unchanged when
    ``cap`` is None. Any other decoder cannot take a cap: a ValueError says so rather
    than a run that silently ignores it."""
    import dataclasses

    if cap is None:
        return decoder
    # The package itself, known by name: importing it here would close an import
    # circle (it imports this module).
    if isinstance(decoder, ModuleType) and decoder.__name__ == __package__:
        return BoundDecoder((), cap)
    if isinstance(decoder, BoundDecoder):
        return dataclasses.replace(decoder, max_decompressed=cap)
    raise ValueError(f"a decompression cap needs the package's decoder, not {decoder!r}")
