"""A chaos run's history: what the clients did and saw, what the nemesis did, and what
each replica held on disk at the end. Plain records, written one JSON object a line.

Values are unique: ``p<producer>-<sequence>``, a producer's sequence numbers counting its
sends in the order it made them. A producer that had to be replaced (a fatal error)
comes back under a new producer number, so one number is one send order.

The transactional workload writes to a topic of its own, with values
``x<client>-<transaction>-<i>``: the transaction a value belongs to is in its name
(``transaction_of``). Its events are the Txn* and Committed* ones; the rules over them
are in tests/chaos/txn_checker.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
COMMITTED, ABORTED = "committed", "aborted"  # a transaction's outcome (or UNKNOWN)


def value_of(producer: int, seq: int) -> str:
    return f"p{producer}-{seq}"


def parse_value(value: str) -> tuple[int, int]:
    """(producer, sequence) of a value this workload wrote."""
    producer, _, seq = value[1:].partition("-")
    return int(producer), int(seq)


def transaction_name(client: int, number: int) -> str:
    return f"x{client}-{number}"


def transaction_of(value: str) -> str:
    """The transaction that wrote ``value`` (``x<client>-<transaction>-<i>``)."""
    return value.rpartition("-")[0]


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
    watermark and the log end of its segment files. ``topic`` "" is the plain
    workload's; the transactional workload's replicas name their topic."""

    kind: ClassVar[str] = "replica"
    broker: int
    partition: int
    hw: int
    log_end: int
    topic: str = ""


@dataclass(frozen=True, slots=True)
class Stored:
    """One record in a replica's segment files, with its batch's leader epoch and its
    producer id and sequence (a control batch's record too: its value is the marker's)."""

    kind: ClassVar[str] = "stored"
    broker: int
    partition: int
    offset: int
    value: str
    epoch: int
    producer_id: int
    sequence: int
    topic: str = ""


@dataclass(frozen=True, slots=True)
class TxnSend:
    """Transaction ``txn`` handed ``value`` to its producer for ``partition``."""

    kind: ClassVar[str] = "txn-send"
    t: float
    txn: str
    value: str
    partition: int


@dataclass(frozen=True, slots=True)
class TxnSaw:
    """Transaction ``txn`` read ``value`` (read_committed) before it wrote anything."""

    kind: ClassVar[str] = "txn-saw"
    t: float
    txn: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """How transaction ``txn`` ended: committed (commit_transaction returned), aborted
    (abort_transaction returned) or unknown (the producer failed fatally on the way).
    ``commit_asked``: when commit_transaction was first called (-1: never), before which
    no reader may see any of its values."""

    kind: ClassVar[str] = "txn-end"
    t: float
    txn: str
    status: str
    commit_asked: float = -1.0
    error: str = ""


@dataclass(frozen=True, slots=True)
class CommittedPoll:
    """One record a read_committed consumer's poll returned."""

    kind: ClassVar[str] = "committed-poll"
    t: float
    consumer: int
    partition: int
    offset: int
    value: str


@dataclass(frozen=True, slots=True)
class CommittedDrain:
    """After healing and every transaction's end, a read_committed drain of
    ``partition`` read up to ``stable`` (its last stable offset); ``end`` is its high
    watermark. Nothing is open any more, so the two must be equal."""

    kind: ClassVar[str] = "committed-drain"
    t: float
    partition: int
    stable: int
    end: int


@dataclass(frozen=True, slots=True)
class CommittedRead:
    """One record of the read_committed drain."""

    kind: ClassVar[str] = "committed-read"
    partition: int
    offset: int
    value: str


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
    | Fault | TxnSend | TxnSaw | TxnEnd | CommittedPoll | CommittedDrain | CommittedRead
)  # fmt: skip
EVENT_TYPES: dict[str, Any] = {
    cls.kind: cls
    for cls in (
        Send, Outcome, Assign, Poll, ConsumerError, LeaderSeen, Drain, Read, Replica, Stored,
        Fault, TxnSend, TxnSaw, TxnEnd, CommittedPoll, CommittedDrain, CommittedRead,
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
