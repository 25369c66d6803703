"""The API keys as one typed vocabulary: ``ApiKey``, an IntEnum built from the specs.

Like franz-go's typed ``Key`` or Wireshark's ``kafka_apis[]``, but not kept by hand:
the members are made at import from the key -> name table of the bundled specs
(every key the shipped kafka-clients layers describe, the inter-broker keys 4-7 that
Kafka 4.0 removed included). Member names are Apache's
CamelCase names in upper snake case, and ``api_name`` gives Apache's spelling back::

    ApiKey.SHARE_FETCH == 78
    ApiKey.SHARE_FETCH.api_name == "ShareFetch"
    ApiKey.named("ShareFetch") is ApiKey.SHARE_FETCH

Keys that only ``--specs`` adds have no member: code that meets them keeps the plain
int and names it with ``dissector.protocol.names.api_name``. Code names a key through
this enum instead of writing its number, so a typo is an AttributeError at import,
not a silently wrong filter.
"""

from __future__ import annotations

import re
from enum import EnumMeta, IntEnum
from functools import cache
from typing import TYPE_CHECKING

from dissector.protocol.diskcache import load_or_build

# Word boundaries of a CamelCase name: "DescribeTopicPartitions" -> DESCRIBE_TOPIC_PARTITIONS.
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


@cache
def api_names() -> dict[int, str]:
    """api_key -> Apache's name, for every key of the bundled generation.

    Kept in the start-up cache: reading the bundled data (and importing ``sources``,
    needed only to build) is left to the first run.
    """

    def build() -> dict[int, str]:
        from dissector.protocol.bundled import bundled_api_names

        return bundled_api_names()

    return load_or_build("api-names", build)


def member_name(api_name: str) -> str:
    """Apache's CamelCase API name as an enum member name (``ShareFetch`` -> ``SHARE_FETCH``)."""
    return _WORD_BOUNDARY.sub("_", api_name).upper()


class _KeyMeta(EnumMeta):
    if TYPE_CHECKING:
        # The members are only known at run time; to the type checker every upper-case
        # attribute of the class is a member (a wrong one fails at import, see above).
        def __getattr__(cls, name: str) -> ApiKey: ...


class _ApiKeyBase(IntEnum, metaclass=_KeyMeta):
    """The behaviour of ``ApiKey``; an enum without members may still be subclassed."""

    @property
    def api_name(self) -> str:
        """Apache's name of the API (``ShareFetch``)."""
        return api_names()[int(self)]

    @classmethod
    def named(cls, api_name: str) -> ApiKey:
        """The member for Apache's name (``ShareFetch``); KeyError when there is none."""
        return cls[member_name(api_name)]


if TYPE_CHECKING:
    ApiKey = _ApiKeyBase
else:
    ApiKey = _ApiKeyBase(
        "ApiKey",
        [(member_name(name), key) for key, name in sorted(api_names().items())],
        module=__name__,
        qualname="ApiKey",
    )
