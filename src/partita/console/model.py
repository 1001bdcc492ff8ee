"""What the console shows, computed from one sample of the cluster (sans-IO).

A ``Snapshot`` is what one poll learned (Metadata, ListOffsets, DescribeLogDirs, the
groups and their offsets); the functions here turn it into what a page draws: the broker x
partition grid, leaders per broker and the imbalance, the partitions in trouble, each
partition's share of records and bytes. Nothing here does I/O, so every rule is tested
with plain values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

TopicPartition = tuple[str, int]
T = TypeVar("T")

# A partition holding at least this multiple of its fair share of a topic's records (or
# traffic) is flagged hot, once the topic holds enough records for shares to mean anything.
HOT_SHARE_FACTOR = 2.0
MIN_RECORDS_FOR_SKEW = 100
MIN_RATE_FOR_SKEW = 1.0  # records/s over the topic: below it, traffic shares are noise


@dataclass(frozen=True, slots=True)
class Broker:
    """A live broker, as Metadata lists it (a dead one is only named by replica lists)."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    log_start: int | None = None
    log_end: int | None = None
    # Bytes on disk per replica (broker id -> bytes), from DescribeLogDirs.
    sizes: dict[int, int] = field(default_factory=dict)

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def records(self) -> int:
        if self.log_start is None or self.log_end is None:
            return 0
        return max(0, self.log_end - self.log_start)

    @property
    def leader_size(self) -> int:
        """Bytes on the leader (else on any replica): the partition's size."""
        if self.leader in self.sizes:
            return self.sizes[self.leader]
        return max(self.sizes.values(), default=0)

    def role(self, broker: int) -> str:
        """``leader``, ``follower``, ``out-of-sync`` or ``""`` (holds no replica)."""
        if broker == self.leader:
            return "leader"
        if broker in self.replicas:
            return "follower" if broker in self.isr else "out-of-sync"
        return ""


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    internal: bool
    partitions: tuple[PartitionState, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def size(self) -> int:
        return sum(p.leader_size for p in self.partitions)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    owner: str | None

    @property
    def lag(self) -> int | None:
        if self.log_end is None:
            return None
        if self.committed is None or self.committed < 0:
            return None
        return max(0, self.log_end - self.committed)


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    state: str
    protocol: str
    members: tuple[Member, ...]
    partitions: tuple[PartitionLag, ...]
    error: str | None = None

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def lag_complete(self) -> bool:
        """Whether every committed partition's log end is known (its leader answered):
        otherwise ``lag`` leaves those partitions out."""
        return all(p.log_end is not None for p in self.partitions if (p.committed or -1) >= 0)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One poll of the cluster. ``error`` says why the poll fell short (the cluster is
    unreachable, or half of it is); what it did learn is kept."""

    taken_at: float  # time.time() of the poll
    cluster_id: str = ""
    controller: int = -1
    brokers: tuple[Broker, ...] = ()
    topics: tuple[Topic, ...] = ()
    groups: tuple[Group, ...] = ()
    reassignments: dict[TopicPartition, tuple[list[int], list[int], list[int]]] = field(
        default_factory=dict
    )
    error: str | None = None
    warnings: tuple[str, ...] = ()

    def topic(self, name: str) -> Topic | None:
        return next((t for t in self.topics if t.name == name), None)

    def group(self, group_id: str) -> Group | None:
        return next((g for g in self.groups if g.group_id == group_id), None)

    @property
    def user_topics(self) -> tuple[Topic, ...]:
        return tuple(t for t in self.topics if not t.internal)

    @property
    def broker_ids(self) -> list[int]:
        """Every broker named: alive ones, and any a replica list still names (dead)."""
        named = {b.node_id for b in self.brokers}
        for t in self.topics:
            for p in t.partitions:
                named.update(p.replicas)
        return sorted(named)

    @property
    def dead_brokers(self) -> list[int]:
        alive = {b.node_id for b in self.brokers}
        return [b for b in self.broker_ids if b not in alive]


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    node_id: int
    leaders: int
    replicas: int
    preferred: int  # partitions whose preferred (first) replica is this broker
    not_preferred_leader: int  # of those, how many it does not lead right now
    bytes: int

    @property
    def imbalance(self) -> float:
        """Kafka's leader imbalance ratio for this broker (what
        ``leader.imbalance.per.broker.percentage`` is compared with), in percent."""
        return 100.0 * self.not_preferred_leader / self.preferred if self.preferred else 0.0


def broker_loads(snapshot: Snapshot, topics: tuple[Topic, ...] | None = None) -> list[BrokerLoad]:
    chosen = snapshot.user_topics if topics is None else topics
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    preferred: Counter[int] = Counter()
    astray: Counter[int] = Counter()
    stored: Counter[int] = Counter()
    for t in chosen:
        for p in t.partitions:
            if p.leader >= 0:
                leaders[p.leader] += 1
            replicas.update(p.replicas)
            if p.replicas:
                preferred[p.replicas[0]] += 1
                if p.leader != p.replicas[0]:
                    astray[p.replicas[0]] += 1
            for broker, size in p.sizes.items():
                stored[broker] += size
    return [
        BrokerLoad(b, leaders[b], replicas[b], preferred[b], astray[b], stored[b])
        for b in snapshot.broker_ids
    ]


def leader_spread(loads: list[BrokerLoad], alive: set[int]) -> float:
    """How uneven leadership is over the live brokers: the busiest broker's leaders over
    the mean, minus one, in percent (0: even)."""
    counts = [load.leaders for load in loads if load.node_id in alive]
    if not counts or sum(counts) == 0:
        return 0.0
    mean = sum(counts) / len(counts)
    return 100.0 * (max(counts) / mean - 1.0)


@dataclass(frozen=True, slots=True)
class Share:
    partition: int
    records: int
    record_share: float
    bytes: int
    byte_share: float
    hot: bool


def shares(topic: Topic, rates: dict[int, float] | None = None) -> list[Share]:
    """Each partition's share of the topic's records and bytes. A partition is hot when it
    holds (or, given ``rates``, receives) at least HOT_SHARE_FACTOR times its fair share."""
    count = len(topic.partitions)
    total_records = topic.records
    total_bytes = topic.size
    total_rate = sum(rates.values()) if rates else 0.0
    out = []
    for p in topic.partitions:
        record_share = p.records / total_records if total_records else 0.0
        byte_share = p.leader_size / total_bytes if total_bytes else 0.0
        fair = 1.0 / count if count else 1.0
        hot = False
        if count > 1 and total_records >= MIN_RECORDS_FOR_SKEW:
            hot = record_share >= HOT_SHARE_FACTOR * fair
        if count > 1 and rates and total_rate >= MIN_RATE_FOR_SKEW:
            hot = hot or rates.get(p.partition, 0.0) / total_rate >= HOT_SHARE_FACTOR * fair
        out.append(Share(p.partition, p.records, record_share, p.leader_size, byte_share, hot))
    return out


def page_of(items: Sequence[T], page: int, per_page: int) -> tuple[Sequence[T], int, int]:
    """One page of ``items`` (pages count from 1; past the end, the last page), the page
    shown and the page count: at 10,000 partitions a grid or table shows one page."""
    pages = max(1, -(-len(items) // per_page))
    page = min(max(page, 1), pages)
    return items[(page - 1) * per_page : page * per_page], page, pages
