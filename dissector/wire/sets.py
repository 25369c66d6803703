"""Capture sets: the files of one capture point that follow each other in time (a
rotated recording: ``tcpdump -C``/``-G``, ``dumpcap -b``, ``editcap -c``/``-i``), read
as one continuous capture.

Two steps, so that a distributed job can run the first where the files are and the
second on the driver:

* ``file_facts(source)``: what a file says about where and when it was recorded
  (``FileFacts``: link types, interfaces, first/last packet time), from a native walk
  over its record headers (no packet is decoded);
* ``group_sets(facts, rule)``: a pure function of those facts and the ``ChainRule``:
  which files form one capture, in which order.

``capture_sets(sources, rule)`` does both for files on hand; the native core reads a
``CaptureSet`` as one capture (``core.open_capture``).

The rule (``ChainRule.mode == "auto"``) chains file B after file A when

1. their names follow one pattern: the same base name once digits are left out
   (``part_00001_20250101120000.pcapng``, ``cap.pcap3``, ``kafka-10:00.pcap``): every
   rotation tool numbers or dates one name, and two recordings named apart are two
   captures even when one ended before the other began;
2. they were recorded alike: the same link types and, where the file says so, the same
   interfaces (pcapng ``if_name``, link type and snaplen; pcap snaplen);
3. B starts when A has ended: B's earliest packet is no earlier than A's latest (less
   ``overlap_s``, 1 s, for timestamps that jitter across a rotation), so two hosts
   recording at the same time stay apart whatever their names;
4. B starts at most ``max_gap_s`` (1 hour) after A ended: past that the core would have
   closed every connection as idle (``tcp_idle_close``), nothing carries over, and a
   later recording of the same point is a capture of its own.

Files are taken in order of their earliest packet (ties by natural name order, so
``cap.pcap2`` comes before ``cap.pcap10``); each joins the set whose last file it can
follow, preferring the set whose last file precedes it in name order, then the one
that ended latest. A file without a timed packet stands alone. ``mode="none"`` keeps
every file apart (as before sets existed), ``mode="all"`` makes the files one capture
in time order, whatever their facts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dissector.options import (
    AnySource,
    CaptureBytes,
    CaptureSet,
    CaptureSource,
    ChainRule,
    source_name,
)
from dissector.stages import CaptureError

NS_PER_S = 1_000_000_000
DEFAULT_RULE = ChainRule()


@dataclass(frozen=True, slots=True)
class Interface:
    """A capture interface as the file describes it (pcap: its header's snaplen)."""

    linktype: int
    snaplen: int
    name: str | None = None


@dataclass(frozen=True, slots=True)
class FileFacts:
    """What one capture file says about where and when it was recorded."""

    source: CaptureSource
    format: str  # "pcap" or "pcapng"
    link_types: tuple[int, ...]
    interfaces: tuple[Interface, ...]
    records: int  # packet records
    first_ns: int | None  # time of the first record, then the last, the earliest, the latest
    last_ns: int | None
    min_ns: int | None
    max_ns: int | None
    damaged: bool  # read only in part (cut short, a bad record, an I/O error)

    @property
    def name(self) -> str:
        return source_name(self.source)


def file_facts(source: CaptureSource) -> FileFacts:
    """The facts of a capture file (or ``CaptureBytes``): one native walk over its
    record headers. A file that is not a capture raises ``CaptureError`` (missing:
    ``FileNotFoundError``), as opening it for analysis would."""
    from dissector.wire.native import native

    _core = native()
    name = source_name(source)
    try:
        if isinstance(source, CaptureBytes):
            got = _core.scan_facts_bytes(bytes(source.data))
        else:
            got = _core.scan_facts(source)
    except (OSError, ValueError) as exc:
        if isinstance(source, str) and not os.path.exists(source):
            raise FileNotFoundError(f"{name}: no such file") from None
        if isinstance(source, str) and os.path.isdir(source):
            raise IsADirectoryError(f"{name}: is a directory") from None
        text = str(exc)
        raise CaptureError(text if text.startswith(name) else f"{name}: {text}") from None
    return FileFacts(
        source=source,
        format=got.format,
        link_types=tuple(got.link_types),
        interfaces=tuple(Interface(i.linktype, i.snaplen, i.name) for i in got.interfaces),
        records=got.records,
        first_ns=got.first_ts_ns,
        last_ns=got.last_ts_ns,
        min_ns=got.min_ts_ns,
        max_ns=got.max_ts_ns,
        damaged=got.damaged,
    )


# ---------------------------------------------------------------- the rule

_DIGITS = re.compile(r"\d+")


def name_pattern(name: str) -> str:
    """The base name without its digits: what the files of one rotation share."""
    return _DIGITS.sub("", _basename(name))


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Name order with numbers compared as numbers (``cap2`` before ``cap10``)."""
    parts = _DIGITS.split(_basename(name))
    numbers = _DIGITS.findall(_basename(name))
    key: list[tuple[int, int | str]] = []
    for i, text in enumerate(parts):
        key.append((1, text))
        if i < len(numbers):
            key.append((0, int(numbers[i])))
    return tuple(key)


def _basename(name: str) -> str:
    # Paths and URIs (file:/..., hdfs://...) alike: the part after the last slash.
    return name.rstrip("/").rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]


def recorded_alike(a: FileFacts, b: FileFacts) -> bool:
    """Rule 2: the same link types and, where both files describe them, interfaces."""
    if a.link_types != b.link_types:
        return False
    if a.interfaces and b.interfaces:
        return set(a.interfaces) == set(b.interfaces)
    return True


def follows(prev: FileFacts, nxt: FileFacts, rule: ChainRule) -> bool:
    """Rules 1-4: ``nxt`` can continue a capture whose last file is ``prev``."""
    if prev.max_ns is None or nxt.min_ns is None:
        return False
    if name_pattern(prev.name) != name_pattern(nxt.name):
        return False
    if not recorded_alike(prev, nxt):
        return False
    gap_ns = nxt.min_ns - prev.max_ns
    return -rule.overlap_s * NS_PER_S <= gap_ns <= rule.max_gap_s * NS_PER_S


def _time_order(facts: Sequence[FileFacts]) -> list[FileFacts]:
    return sorted(
        facts,
        key=lambda f: (f.min_ns is None, f.min_ns or 0, natural_key(f.name), f.name),
    )


def _preference(last: FileFacts, f: FileFacts) -> tuple[bool, tuple[object, ...], int]:
    """How well ``f`` continues a set ending with ``last``: the file numbered just
    before it first (the closest name before it in natural order), then the set that
    ended latest."""
    key = natural_key(last.name)
    before = key < natural_key(f.name)
    return before, key if before else (), last.max_ns or 0


def group_sets(facts: Sequence[FileFacts], rule: ChainRule = DEFAULT_RULE) -> list[CaptureSet]:
    """The capture sets the files form under ``rule`` (see the module docstring), in
    order of their first file's earliest packet. Pure: it reads only the facts."""
    if rule.mode == "none":
        return [CaptureSet((f.source,)) for f in facts]
    ordered = _time_order(facts)
    if rule.mode == "all":
        return [CaptureSet(tuple(f.source for f in ordered))] if ordered else []
    chains: list[list[FileFacts]] = []
    for f in ordered:
        open_chains = [c for c in chains if follows(c[-1], f, rule)]
        if not open_chains:
            chains.append([f])
            continue
        best = max(open_chains, key=lambda c: _preference(c[-1], f))
        best.append(f)
    return [CaptureSet(tuple(f.source for f in chain)) for chain in chains]


def capture_sets(
    sources: Iterable[AnySource],
    rule: ChainRule = DEFAULT_RULE,
    *,
    failures: list[tuple[str, str]] | None = None,
) -> list[CaptureSet]:
    """``sources`` as capture sets under ``rule``: a ``CaptureSet`` given is kept as it
    is (the caller's grouping wins), the other files are grouped by ``group_sets``.
    One file alone is not read ahead (single-file analysis costs nothing more).

    A file that cannot be read raises, or with ``failures`` is added there as (name,
    reason) and left out (the other files are still grouped)."""
    given = list(sources)
    loose = [s for s in given if not isinstance(s, CaptureSet)]
    if len(loose) <= 1 or rule.mode == "none":
        return [s if isinstance(s, CaptureSet) else CaptureSet((s,)) for s in given]
    facts = []
    for source in loose:
        try:
            facts.append(file_facts(source))
        except (CaptureError, OSError) as exc:
            if failures is None:
                raise
            failures.append((source_name(source), str(exc)))
    given = [s for s in given if isinstance(s, CaptureSet) or any(f.source is s for f in facts)]
    grouped = group_sets(facts, rule)
    # Captures come out in the order given (a set where its first-given file was).
    where = {id(s): i for i, s in enumerate(given)}
    placed = [(min(where[id(f)] for f in cs.files), cs) for cs in grouped]
    placed += [(where[id(s)], s) for s in given if isinstance(s, CaptureSet)]
    return [cs for _, cs in sorted(placed, key=lambda p: p[0])]
