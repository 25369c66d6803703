"""Facts read from decoded bodies that the pairs table has no column for: the client
software ApiVersions requests name, and per consumer/share group its protocol, members
and generations. The report notes them in the same pass as the analysis."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dissector.protocol.families import CLASSIC_JOIN, GROUP_MEMBERSHIP, NEGOTIATION


@dataclass
class GroupNote:
    """What the membership calls of one group showed."""

    protocol: str
    members: set[str] = field(default_factory=set)
    generations: set[int] = field(default_factory=set)
    """Classic: generation ids of successful JoinGroup responses (one per completed
    rebalance). KIP-848/932 groups: member epochs the coordinator handed out."""
    calls: Counter[str] = field(default_factory=Counter)
    errors: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "members": len(self.members),
            "generations": sorted(self.generations),
            "calls": dict(sorted(self.calls.items())),
            "errors": self.errors,
        }


def _body(decoded: Any) -> dict[str, Any]:
    body = getattr(decoded, "body", None)
    return body if isinstance(body, dict) else {}


def note_group_call(
    groups: dict[str, GroupNote], api_key: int, api_name: str, request: Any, response: Any
) -> None:
    """Add one decoded membership call (``families.GROUP_MEMBERSHIP``) to ``groups``."""
    protocol = GROUP_MEMBERSHIP.get(api_key)
    req, resp = _body(request), _body(response)
    group = req.get("group_id")
    if protocol is None or not isinstance(group, str):
        return
    note = groups.setdefault(group, GroupNote(protocol))
    note.calls[api_name] += 1
    leaving = [m.get("member_id") for m in req.get("members") or [] if isinstance(m, dict)]
    for member in (req.get("member_id"), resp.get("member_id"), *leaving):
        if isinstance(member, str) and member:
            note.members.add(member)
    error = resp.get("error_code")
    if error:
        note.errors += 1
        return
    if not resp:
        return
    if api_key == CLASSIC_JOIN:
        generation = resp.get("generation_id")
        if isinstance(generation, int) and generation >= 0:
            note.generations.add(generation)
    elif protocol != "classic":
        epoch = resp.get("member_epoch")
        if isinstance(epoch, int) and epoch > 0:
            note.generations.add(epoch)


@dataclass
class NotingDecoder:
    """The protocol decoder, noting facts the pairs table has no column for while the
    normal analysis runs (no second pass over the capture):

    * the client software ApiVersions v3+ requests name (KIP-511);
    * per group: protocol, members, generations or epochs (``note_group_call``).
    """

    inner: Any
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)
    groups: dict[str, GroupNote] = field(default_factory=dict)
    missing_client: str = "(none)"  # the label of requests without a client_id

    def decode_request(self, payload: Any, *, records: bool = False, prefix: bool = False) -> Any:
        # ``prefix``: a request cut short, read as far as it goes (``pairs.cut_facts``)
        if prefix:
            decoded = self.inner.decode_request(payload, records=records, prefix=True)
        else:
            decoded = self.inner.decode_request(payload, records=records)
        body = _body(decoded)
        if getattr(decoded, "api_key", None) == NEGOTIATION:
            name = body.get("client_software_name")
            if name:
                software = f"{name} {body.get('client_software_version') or ''}".strip()
                client = decoded.header.get("client_id") or self.missing_client
                self.seen[(software, client)] += 1
        return decoded

    def summarize(
        self, api_key: int, api_version: int, request: Any, response: Any, topics: Any
    ) -> Any:
        if api_key in GROUP_MEMBERSHIP:
            note_group_call(self.groups, api_key, self.inner.api_name(api_key), request, response)
        return self.inner.summarize(api_key, api_version, request, response, topics)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def software(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for software, client in sorted(self.seen):
            out.setdefault(software, []).append(client)
        return out

    def group_notes(self) -> dict[str, dict[str, Any]]:
        return {group: note.as_dict() for group, note in sorted(self.groups.items())}
