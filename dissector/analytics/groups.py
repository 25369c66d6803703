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
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dissector.analytics.partitions import DecodedExchange, Source
from dissector.protocol.errors import error_name
from dissector.protocol.families import CLASSIC_JOIN, CLASSIC_SYNC
from dissector.protocol.tables import FENCING_ERRORS, GROUP_APIS, group_facts
from dissector.tables_schema import GROUP_COLUMNS, names

if TYPE_CHECKING:
    import pandas as pd

    from dissector.options import Options
    from dissector.tls import KeyLogs

__all__ = [
    "FENCING_ERRORS",
    "GROUP_APIS",
    "GROUP_COLUMNS",
    "GROUP_COLUMN_NAMES",
    "group_notes",
    "group_row",
    "groups",
    "rebalances",
]

GROUP_COLUMN_NAMES: tuple[str, ...] = names(GROUP_COLUMNS)


def group_row(dx: DecodedExchange) -> dict[str, Any]:
    """The groups-table row of one decoded membership call, by the Python decoder: the
    test oracle of the native pass."""
    ex = dx.exchange
    f = group_facts(
        dx.api_name or "", dx.request_body(), dx.response_body(), dx.response is not None
    )
    name = error_name(f.error_code) if f.error_code is not None else None
    req_time = ex.request.last_ts_ns if ex.request is not None else None
    resp_time = ex.response.last_ts_ns if ex.response is not None else None
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
        "group_id": f.group_id,
        "member_id": f.member_id,
        "group_instance_id": f.group_instance_id,
        "request_generation": f.request_generation,
        "generation": f.generation,
        "protocol_type": f.protocol_type,
        "protocol_name": f.protocol_name,
        "leader": f.leader,
        "members": f.members,
        "assignment_bytes": f.assignment_bytes,
        "assigned_partitions": f.assigned_partitions,
        "error_code": f.error_code,
        "error_name": name,
        "fenced": name in FENCING_ERRORS if name is not None else None,
    }


def groups(
    source: Source,
    *,
    ports: Iterable[int] | None = None,
    specs: Iterable[str | os.PathLike[str]] = (),
    tls: KeyLogs | None = None,
    options: Options | None = None,
) -> pd.DataFrame:
    """One row per group-membership call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
    ConsumerGroupHeartbeat, ShareGroupHeartbeat, StreamsGroupHeartbeat), from the native
    core's pass over the captures (``tls``: key logs for Kafka over TLS).
    ``df.attrs["counters"]`` counts the pairs and decode errors."""
    from dissector.analytics.frames import tables_of

    frames = tables_of(
        source, ports=ports, specs=specs, tls=tls, options=options, tables=["groups"]
    )
    return frames.groups


def group_notes(calls: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per group of the groups table ``calls``, in group order: its protocol (of its
    first call), members (distinct member ids), generations (classic: of JoinGroup
    responses without error; consumer, share and streams groups: member epochs above 0
    answered without error), calls per API and calls answered with an error. The
    report's groups table; ``protocol.notes.NotingDecoder`` reads the same from the
    Python decoder's bodies (its test oracle)."""
    import pandas as pd

    notes: dict[str, dict[str, Any]] = {}
    rows = calls[["group_id", "group_protocol", "api_name", "member_id", "response_time"]]
    rows = rows.assign(error_code=calls["error_code"], generation=calls["generation"])
    for row in rows.itertuples(index=False):
        if not isinstance(row.group_id, str):
            continue  # a request whose group the decoder could not read
        note = notes.setdefault(
            row.group_id,
            {"protocol": row.group_protocol, "members": set(), "generations": set(),
             "calls": {}, "errors": 0},
        )  # fmt: skip
        note["calls"][row.api_name] = note["calls"].get(row.api_name, 0) + 1
        if isinstance(row.member_id, str) and row.member_id:
            note["members"].add(row.member_id)
        if not pd.isna(row.error_code) and row.error_code != 0:
            note["errors"] += 1
        elif not pd.isna(row.response_time) and not pd.isna(row.generation):
            classic_join = row.api_name == CLASSIC_JOIN.api_name and row.generation >= 0
            epoch = row.group_protocol != "classic" and row.generation > 0
            if classic_join or epoch:
                note["generations"].add(int(row.generation))
    return {
        group: note
        | {
            "members": len(note["members"]),
            "generations": sorted(note["generations"]),
            "calls": dict(sorted(note["calls"].items())),
        }
        for group, note in sorted(notes.items())
    }


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
    joins = g[g["api_name"] == CLASSIC_JOIN.api_name]
    won = joins[joins["error_code"].eq(0) & joins["generation"].ge(0)]
    syncs = g[(g["api_name"] == CLASSIC_SYNC.api_name) & g["error_code"].eq(0)]
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
