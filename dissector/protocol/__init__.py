"""Stage 5: Kafka message decoding, driven by Apache Kafka's message specs.

Contract used by the row stage and the CLI (implementations live in the
sub-modules of this package):

* ``decode_request(payload, *, records=False) -> Decoded`` decodes a whole request
  frame (without the 4-byte size prefix): header and body.
* ``decode_response(payload, api_key, api_version, *, records=False) -> Decoded``
  decodes a whole response frame given its request's key and version.
* ``summarize(api_key, api_version, request, response, topics) -> Summary`` reduces a
  decoded pair to the analytics columns of ``dissector.schema``.
* ``TopicNames`` learns topic_id -> name from the responses it is shown.
* ``api_name(api_key) -> str`` and ``supported_apis()`` describe coverage.
* ``error_name(code) -> str | None``.

Decoding never raises on bad bytes: ``Decoded.error`` says which field failed at
which offset and ``Decoded.body`` keeps what was decoded so far.

How it works: ``sources`` reads Apache's JSON message specs (``--specs DIR`` or jar, then
the ones the package ships: ``bundled``, generated from kafka-clients jars by
``scripts/specs/generate.py``) into one model (``spec.Layout`` per api_key, version
and direction); ``compile`` turns a layout into a decoder (generated Python source,
or closures for explaining failures); ``messages`` decodes whole frames (headers, then
bodies) and caches the compiled decoders in a ``Registry``; ``bound_decoder`` binds all
of it to one spec set; ``summary`` computes the analytics columns.
Field names are Apache's, in snake_case (``ThrottleTimeMs`` -> ``throttle_time_ms``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissector.lazy import lazy_attributes

if TYPE_CHECKING:
    from dissector.protocol.bound_decoder import BoundDecoder, decoder_for
    from dissector.protocol.errors import error_name
    from dissector.protocol.messages import (
        Decoded,
        Registry,
        decode_request,
        decode_response,
        get_registry,
        is_known_version,
        request_is_flexible,
    )
    from dissector.protocol.names import ApiSupport, api_name, supported_apis
    from dissector.protocol.summary import Summary, TopicNames, summarize

# Loaded on first use: a run whose pairs the native core summarises never needs the
# decoders, and importing them costs start-up time.
_HOME = {
    "Decoded": "messages",
    "Registry": "messages",
    "decode_request": "messages",
    "decode_response": "messages",
    "get_registry": "messages",
    "is_known_version": "messages",
    "request_is_flexible": "messages",
    "BoundDecoder": "bound_decoder",
    "decoder_for": "bound_decoder",
    "error_name": "errors",
    "ApiSupport": "names",
    "api_name": "names",
    "supported_apis": "names",
    "Summary": "summary",
    "TopicNames": "summary",
    "summarize": "summary",
}


__getattr__ = lazy_attributes(__name__, _HOME, globals())


__all__ = [
    "ApiSupport",
    "BoundDecoder",
    "Decoded",
    "Registry",
    "Summary",
    "TopicNames",
    "api_name",
    "decode_request",
    "decode_response",
    "decoder_for",
    "error_name",
    "get_registry",
    "is_known_version",
    "request_is_flexible",
    "summarize",
    "supported_apis",
]
