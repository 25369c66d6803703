"""Group dynamics: one row per group-membership call, and a rebalance timeline.

Classic groups (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) move through
generations: members join, the broker answers with a generation id, the leader's
SyncGroup hands out assignments. KIP-848 consumer groups and KIP-932 share groups
(ConsumerGroupHeartbeat, ShareGroupHeartbeat) have no join round: each heartbeat's
response carries the member's epoch, which moves up when the assignment changes,
and fencing errors throw a member out. ``rebalances`` turns the calls into one row
per generation (classic) or epoch (consumer/share).
"""

from __future__ import annotations

import os
import sys
import types
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dissector.analytics.partitions import DecodedExchange, Source, decoded_exchanges, table
from dissector.protocol.errors import error_name

if TYPE_CHECKING:
    import pandas as pd

    from dissector.tls import KeyLogs

# The membership APIs by Kafka's names, and the group protocol each belongs to.
GROUP_APIS: dict[str, str] = {
    "JoinGroup": "classic",
    "SyncGroup": "classic",
    "Heartbeat": "classic",
    "LeaveGroup": "classic",
    "ConsumerGroupHeartbeat": "consumer",
    "ShareGroupHeartbeat": "share",
    "StreamsGroupHeartbeat": "streams",
}
# Errors that mean the broker no longer accepts the member as it is.
FENCING_ERRORS = frozenset(
    {
        "FENCED_MEMBER_EPOCH",
        "STALE_MEMBER_EPOCH",
        "UNKNOWN_MEMBER_ID",
        "FENCED_INSTANCE_ID",
        "ILLEGAL_GENERATION",
    }
)

GROUP_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("capture", "string", "path of the capture file"),
    ("stream", "Int64", "TCP connection index within the capture"),
    ("correlation_id", "Int64", "correlation id of the pair"),
    ("client_id", "string", "client_id from the request header"),
    ("request_time", "datetime64[ns, UTC]", "request complete"),
    ("response_time", "datetime64[ns, UTC]", "response complete (null: no response)"),
    ("latency_ms", "Float64", "response complete minus request complete"),
    ("api_name", "string", "JoinGroup, SyncGroup, Heartbeat, LeaveGroup, *GroupHeartbeat"),
    ("api_version", "Int64", "API version of the request"),
    ("group_protocol", "string", "classic, consumer (KIP-848), share (KIP-932), streams"),
    ("group_id", "string", "the group"),
    ("member_id", "string", "the member (the id the broker gave, else the one sent)"),
    ("group_instance_id", "string", "static membership id"),
    ("request_generation", "Int64", "generation id or member epoch the request carried"),
    ("generation", "Int64", "generation id (JoinGroup) or member epoch (heartbeats) answered"),
    ("protocol_type", "string", "JoinGroup/SyncGroup protocol type, e.g. consumer"),
    ("protocol_name", "string", "chosen assignor, e.g. range"),
    ("leader", "string", "JoinGroup: the leader's member id"),
    ("members", "Int64", "members listed (JoinGroup response, SyncGroup/LeaveGroup request)"),
    ("assignment_bytes", "Int64", "SyncGroup: bytes of the member's assignment"),
    ("assigned_partitions", "Int64", "heartbeats: partitions in the assignment answered"),
    ("error_code", "Int64", "top-level error, else the first non-zero member error"),
    ("error_name", "string", "Kafka's name for error_code"),
    ("fenced", "boolean", "the error fences the member (epoch/generation/member id)"),
)
GROUP_COLUMN_NAMES: tuple[str, ...] = tuple(c[0] for c in GROUP_COLUMNS)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _member_id(request: dict[str, Any], response: dict[str, Any]) -> str | None:
    """The id the broker assigned (JoinGroup, first heartbeat), else the one sent, else
    the single member a LeaveGroup v3+ names."""
    for body in (response, request):
        value = body.get("member_id")
        if isinstance(value, str) and value:
            return value
    members = request.get("members")
    if isinstance(members, list) and len(members) == 1 and isinstance(members[0], dict):
        return _str(members[0].get("member_id"))
    return None


def _members(api: str, request: dict[str, Any], response: dict[str, Any]) -> int | None:
    for body, key in ((response, "members"), (request, "assignments"), (request, "members")):
        value = body.get(key)
        if isinstance(value, list):
            return len(value)
    return 1 if api == "LeaveGroup" and request.get("member_id") else None


def _assigned_partitions(response: dict[str, Any]) -> int | None:
    assignment = response.get("assignment")
    if not isinstance(assignment, dict):
        return None
    count = 0
    for topic in _list(assignment.get("topic_partitions")):
        parts = topic.get("partitions") if isinstance(topic, dict) else None
        count += len(parts) if isinstance(parts, list) else 0
    return count


def _error(response: dict[str, Any]) -> int | None:
    top = _int(response.get("error_code"))
    if top:
        return top
    for member in _list(response.get("members")):
        code = _int(member.get("error_code")) if isinstance(member, dict) else None
        if code:
            return code
    return top


def group_row(dx: DecodedExchange) -> dict[str, Any]:
    ex = dx.exchange
    request, response = dx.request_body(), dx.response_body()
    code = _error(response)
    name = error_name(code) if code is not None else None
    req_time = ex.request.last_ts_ns if ex.request is not None else None
    resp_time = ex.response.last_ts_ns if ex.response is not None else None
    assignment = response.get("assignment")
    request_generation = _int(request.get("member_epoch"))
    if request_generation is None:
        request_generation = _int(request.get("generation_id"))
    generation = _int(response.get("member_epoch"))
    if generation is None:
        generation = _int(response.get("generation_id"))
    if generation is None and dx.response is not None and code == 0:
        generation = request_generation  # SyncGroup/Heartbeat accepted the one sent
    return {
        "capture": dx.capture,
        "stream": ex.stream,
        "correlation_id": ex.correlation_id,
        "client_id": ex.client_id,
        "request_time": req_time,
        "response_time": resp_time,
        "latency_ms": (resp_time - req_time) / 1e6 if req_time and resp_time else None,
        "api_name": dx.api_name,
        "api_version": ex.api_version,
        "group_protocol": GROUP_APIS.get(dx.api_name or ""),
        "group_id": _str(request.get("group_id")),
        "member_id": _member_id(request, response),
        "group_instance_id": _str(request.get("group_instance_id") or request.get("instance_id")),
        "request_generation": request_generation,
        "generation": generation,
        "protocol_type": _str(response.get("protocol_type") or request.get("protocol_type")),
        "protocol_name": _str(response.get("protocol_name") or request.get("protocol_name")),
        "leader": _str(response.get("leader")) or None,
        "members": _members(dx.api_name or "", request, response),
        "assignment_bytes": len(assignment) if isinstance(assignment, bytes) else None,
        "assigned_partitions": _assigned_partitions(response),
        "error_code": code,
        "error_name": name,
        "fenced": name in FENCING_ERRORS if name is not None else None,
    }


def groups(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
) -> pd.DataFrame:
    """One row per group-membership call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
    ConsumerGroupHeartbeat, ShareGroupHeartbeat). ``df.attrs["counters"]`` counts the
    pairs and decode errors."""
    counters: Counter[str] = Counter()
    rows = [
        group_row(dx)
        for dx, _ in decoded_exchanges(
            source, GROUP_APIS, ports=ports, specs=specs, counters=counters, tls=tls
        )
    ]
    df = table(rows, GROUP_COLUMNS)
    df.attrs["counters"] = dict(counters)
    return df


# ----------------------------------------------------------------- rebalance timeline

REBALANCE_COLUMNS = [
    "capture", "group_id", "group_protocol", "generation", "start_time", "end_time",
    "duration_ms", "members", "member_ids", "leader", "protocol_name", "calls", "errors",
    "fenced",
]  # fmt: skip


def rebalances(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per classic generation or consumer/share epoch of each group.

    Classic: a round starts with the earliest JoinGroup sent after the previous
    generation's last successful join was answered and ends with the last
    successful SyncGroup of the generation (else its last join); ``members`` are the
    members whose join got the generation. Consumer/share: an epoch starts with the
    first heartbeat answered with it and ends with the last heartbeat that moved a
    member to it; ``members`` are those answered with it. ``calls``, ``errors`` and
    ``fenced`` count the group's calls from the start up to the next round or epoch.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for (capture, group, protocol), g in calls.groupby(
        ["capture", "group_id", "group_protocol"], sort=True
    ):
        g = g.sort_values("request_time")
        if protocol == "classic":
            rows.extend(_classic(capture, group, g))
        else:
            rows.extend(_epochs(capture, group, protocol, g))
    out = pd.DataFrame(rows, columns=REBALANCE_COLUMNS)
    out["duration_ms"] = out["duration_ms"].astype("Float64")
    return out


def _counts(g: pd.DataFrame, start: Any, stop: Any) -> dict[str, int]:
    window = g[(g["request_time"] >= start) & ((g["request_time"] < stop) if stop else True)]
    errors = window["error_code"].fillna(0).ne(0)
    return {
        "calls": len(window),
        "errors": int(errors.sum()),
        "fenced": int(window["fenced"].fillna(False).sum()),
    }


def _classic(capture: str, group: str, g: pd.DataFrame) -> list[dict[str, Any]]:
    joins = g[g["api_name"] == "JoinGroup"]
    won = joins[joins["error_code"].eq(0) & joins["generation"].ge(0)]
    syncs = g[(g["api_name"] == "SyncGroup") & g["error_code"].eq(0)]
    generations = sorted(int(x) for x in won["generation"].dropna().unique())
    rounds = []
    previous_end = None
    for gen in generations:
        mine = won[won["generation"] == gen]
        last_join = mine["response_time"].max()
        in_round = joins[joins["response_time"] <= last_join]
        if previous_end is not None:
            in_round = in_round[in_round["request_time"] > previous_end]
        start = in_round["request_time"].min() if len(in_round) else mine["request_time"].min()
        synced = syncs[syncs["generation"] == gen]
        end = synced["response_time"].max() if len(synced) else last_join
        leaders = mine["leader"].dropna()
        names = mine["protocol_name"].dropna()
        rounds.append(
            {
                "capture": capture,
                "group_id": group,
                "group_protocol": "classic",
                "generation": gen,
                "start_time": start,
                "end_time": end,
                "duration_ms": (end - start).total_seconds() * 1000,
                "members": mine["member_id"].nunique(),
                "member_ids": sorted(mine["member_id"].dropna().unique()),
                "leader": leaders.iloc[0] if len(leaders) else None,
                "protocol_name": names.iloc[0] if len(names) else None,
            }
        )
        previous_end = last_join
    for i, r in enumerate(rounds):
        stop = rounds[i + 1]["start_time"] if i + 1 < len(rounds) else None
        r.update(_counts(g, r["start_time"], stop))
    return rounds


def _epochs(capture: str, group: str, protocol: str, g: pd.DataFrame) -> list[dict[str, Any]]:
    # epoch -1 (-2 for static members) answers a member leaving: not an epoch of the group
    answered = g[g["error_code"].eq(0) & g["generation"].ge(0).fillna(False)]
    moved = answered[answered["generation"] != answered["request_generation"]]
    epochs = []
    for epoch in sorted(int(x) for x in answered["generation"].unique()):
        mine = answered[answered["generation"] == epoch]
        bumps = moved[moved["generation"] == epoch]
        start = mine["request_time"].min()
        end = bumps["response_time"].max() if len(bumps) else mine["response_time"].min()
        epochs.append(
            {
                "capture": capture,
                "group_id": group,
                "group_protocol": protocol,
                "generation": epoch,
                "start_time": start,
                "end_time": end,
                "duration_ms": (end - start).total_seconds() * 1000,
                "members": mine["member_id"].nunique(),
                "member_ids": sorted(mine["member_id"].dropna().unique()),
                "leader": None,
                "protocol_name": None,
            }
        )
    for i, r in enumerate(epochs):
        stop = epochs[i + 1]["start_time"] if i + 1 < len(epochs) else None
        r.update(_counts(g, r["start_time"], stop))
    return epochs


# ``dissector.analytics.groups`` is both this module and the function users call (see partitions).
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return groups(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
