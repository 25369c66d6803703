"""API families: the sets of APIs that the summary, the tables and the analyses treat
alike, and the header-version rule, each defined once here.

Members are ``ApiKey`` members (named from the bundled specs, so a typo fails at
import); ``names`` gives the Apache names for code that matches the ``api_name``
column. Everything outside ``dissector/protocol/`` names an API through this module or
``ApiKey``, never by a string literal (``tests/test_protocol_vocabulary.py`` checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from dissector.protocol.keys import ApiKey, api_names

GROUP_MEMBERSHIP: Mapping[int, str] = {
    ApiKey.JOIN_GROUP: "classic",
    ApiKey.SYNC_GROUP: "classic",
    ApiKey.HEARTBEAT: "classic",
    ApiKey.LEAVE_GROUP: "classic",
    ApiKey.CONSUMER_GROUP_HEARTBEAT: "consumer",
    ApiKey.SHARE_GROUP_HEARTBEAT: "share",
    ApiKey.STREAMS_GROUP_HEARTBEAT: "streams",
}
"""APIs by which members join and stay in a group, and the group protocol each means."""

CLASSIC_JOIN = ApiKey.JOIN_GROUP
"""A classic member's join: its successful response hands out the generation."""
CLASSIC_SYNC = ApiKey.SYNC_GROUP
"""A classic member's sync: the leader's assignment reaches the members."""

LONG_POLLS: tuple[ApiKey, ...] = (ApiKey.FETCH, ApiKey.SHARE_FETCH)
"""The reads the broker may hold open up to the request's max_wait_ms while fewer than
min_bytes are available (long polls); their responses deliver record batches."""

TOPIC_ID_SOURCES: frozenset[ApiKey] = frozenset(
    {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DESCRIBE_TOPIC_PARTITIONS}
)
"""Responses that tell which name a topic id stands for."""

PARTITION_ROLES: Mapping[int, str] = {
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.SHARE_FETCH: "fetch",
    ApiKey.SHARE_ACKNOWLEDGE: "acknowledge",
    ApiKey.LIST_OFFSETS: "offsets",
    ApiKey.OFFSET_COMMIT: "commit",
    ApiKey.OFFSET_FETCH: "commit",
    ApiKey.TXN_OFFSET_COMMIT: "commit",
    ApiKey.END_TXN: "transaction",
}
"""The APIs of the partitions table and the role each plays for the derived quantities
(``produce``: offsets written; ``fetch``: offsets delivered; ``commit``: a group's
committed offsets)."""

GROUP_COMMITS: tuple[ApiKey, ...] = (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH)
"""APIs that name a group's committed offset directly (TxnOffsetCommit's count only once
its transaction commits)."""

COMMITS: tuple[int, ...] = tuple(k for k, r in PARTITION_ROLES.items() if r == "commit")
"""Every API a committed offset is read from (``PARTITION_ROLES`` role ``commit``)."""

NEGOTIATION = ApiKey.API_VERSIONS
"""The version negotiation: its response header stays v0 (below)."""


def names(keys: Iterable[int]) -> tuple[str, ...]:
    """Apache's names of ``keys``, in order (for matching the ``api_name`` column)."""
    return tuple(api_names()[int(k)] for k in keys)


V = TypeVar("V")


def by_name(family: Mapping[int, V]) -> dict[str, V]:
    """``family`` keyed by Apache's names."""
    return {api_names()[int(k)]: v for k, v in family.items()}


# ----------------------------------------------------------------- header versions


HEADER_V0_REQUESTS: frozenset[tuple[ApiKey, int]] = frozenset({(ApiKey.CONTROLLED_SHUTDOWN, 0)})
"""(api_key, version) of the requests whose header is v0 (no client_id), whether or not
a spec describes them."""


def request_header_version(api_key: int, api_version: int, flexible: bool) -> int:
    """Request header version: v2 (tagged fields) in flexible versions, else v1; v0 for
    ``HEADER_V0_REQUESTS``."""
    if (api_key, api_version) in HEADER_V0_REQUESTS:
        return 0
    return 2 if flexible else 1


def response_header_version(api_key: int, flexible: bool) -> int:
    """Response header version: v1 (tagged fields) in flexible versions, except
    ApiVersions, whose response keeps v0 so that any client can read it."""
    return 1 if flexible and api_key != NEGOTIATION else 0
