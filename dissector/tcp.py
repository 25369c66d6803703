"""Stage 2: TCP packets -> in-order byte chunks per connection direction.

Contract used by the later stages:

* ``Reassembler(counters).feed(packet)`` returns the events that packet
  releases; ``flush()`` releases what is left at the end of the capture.
* Events are ``StreamOpen``, ``Chunk`` and ``StreamClose``.
"""

from __future__ import annotations

from dataclasses import dataclass

Endpoint = tuple[str, int]


@dataclass(slots=True)
class StreamOpen:
    stream: int  # connection index in this capture, like tshark's tcp.stream
    initiator: Endpoint  # SYN sender if the SYN was seen, else the first packet's source
    responder: Endpoint
    syn_seen: bool


@dataclass(slots=True)
class Chunk:
    stream: int
    src: Endpoint
    dst: Endpoint
    data: bytes  # in-order payload bytes for this direction
    ts_ns: int  # time of the packet that delivered (the last of) these bytes
    frame: int  # frame number of that packet
    resync: bool  # data does not continue the previous bytes of this direction
    lost: int = 0  # bytes known to be missing just before ``data`` (0 if unknown)


@dataclass(slots=True)
class StreamClose:
    stream: int
    reason: str  # fin | rst | reused | end_of_capture


Event = StreamOpen | Chunk | StreamClose
