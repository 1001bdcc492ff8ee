"""A chaos run's history: what the clients did and saw, what the nemesis did, and what
each replica held on disk at the end. Plain records, written one JSON object a line.

Values are unique: ``p<producer>-<sequence>``, a producer's sequence numbers counting its
sends in the order it made them. A producer that had to be replaced (a fatal error)
comes back under a new producer number, so one number is one send order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"


def value_of(producer: int, seq: int) -> str:
    return f"p{producer}-{seq}"


def parse_value(value: str) -> tuple[int, int]:
    """(producer, sequence) of a value this workload wrote."""
    producer, _, seq = value[1:].partition("-")
    return int(producer), int(seq)


@dataclass(frozen=True, slots=True)
class Send:
    """A producer handed ``value`` to its client for ``partition``."""

    kind: ClassVar[str] = "send"
    t: float
    value: str
    partition: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the producer was told: ok (at ``offset``), failed (a definite error before the
    append) or unknown (a timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND, a lost connection)."""

    kind: ClassVar[str] = "outcome"
    t: float
    value: str
    partition: int
    status: str
    offset: int = -1
    error: str = ""


@dataclass(frozen=True, slots=True)
class Assign:
    """A consumer was assigned ``partition`` starting at ``offset``."""

    kind: ClassVar[str] = "assign"
    t: float
    consumer: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Poll:
    """One record a consumer's poll returned, with the record's leader epoch and the
    partition's high watermark as the client knew it then (-1: not known)."""

    kind: ClassVar[str] = "poll"
    t: float
    consumer: int
    partition: int
    offset: int
    value: str
    epoch: int = -1
    hw: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerError:
    kind: ClassVar[str] = "consumer-error"
    t: float
    consumer: int
    partition: int
    error: str


@dataclass(frozen=True, slots=True)
class LeaderSeen:
    """Broker ``observer`` answered Metadata: ``partition`` is led by ``leader`` at
    ``epoch`` with ``isr``."""

    kind: ClassVar[str] = "leader"
    t: float
    observer: int
    partition: int
    leader: int
    epoch: int
    isr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Drain:
    """After healing, every record of ``partition`` in [start, end) was read."""

    kind: ClassVar[str] = "drain"
    t: float
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Read:
    """One record of the final drain."""

    kind: ClassVar[str] = "read"
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica's state after every broker stopped cleanly: its checkpointed high
    watermark and the log end of its segment files."""

    kind: ClassVar[str] = "replica"
    broker: int
    partition: int
    hw: int
    log_end: int


@dataclass(frozen=True, slots=True)
class Stored:
    """One record in a replica's segment files, with its batch's leader epoch and its
    producer id and sequence."""

    kind: ClassVar[str] = "stored"
    broker: int
    partition: int
    offset: int
    value: str
    epoch: int
    producer_id: int
    sequence: int


@dataclass(frozen=True, slots=True)
class Fault:
    """The nemesis started (``phase`` "start") or healed ("heal") a fault."""

    kind: ClassVar[str] = "fault"
    t: float
    fault: str
    phase: str
    target: str = ""
    detail: str = ""


Event = (
    Send | Outcome | Assign | Poll | ConsumerError | LeaderSeen | Drain | Read | Replica | Stored
    | Fault
)  # fmt: skip
EVENT_TYPES: dict[str, Any] = {
    cls.kind: cls
    for cls in (
        Send, Outcome, Assign, Poll, ConsumerError, LeaderSeen, Drain, Read, Replica, Stored,
        Fault,
    )
}  # fmt: skip


def to_json(event: Event) -> str:
    return json.dumps({"type": event.kind, **asdict(event)}, separators=(",", ":"))


def from_json(line: str) -> Event:
    data = json.loads(line)
    cls = EVENT_TYPES[data.pop("type")]
    names = {f.name for f in fields(cls)}
    if "isr" in data:
        data["isr"] = tuple(data["isr"])
    event: Event = cls(**{k: v for k, v in data.items() if k in names})
    return event


def write(path: Path, events: Iterable[Event]) -> None:
    with open(path, "w") as out:
        for event in events:
            out.write(to_json(event) + "\n")


def read(path: Path) -> Iterator[Event]:
    with open(path) as lines:
        for line in lines:
            if line.strip():
                yield from_json(line)


def describe(event: Event) -> str:
    """One readable line."""
    parts = [f"{f.name}={getattr(event, f.name)!r}" for f in fields(event)]
    return f"{event.kind:<14} " + " ".join(parts)
