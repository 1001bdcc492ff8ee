"""The Java client's StickyAssignor ("sticky") and CooperativeStickyAssignor ("cooperative-sticky").

A port of the semantics of Kafka's ``AbstractStickyAssignor`` (with KIP-881 rack awareness),
``StickyAssignor`` and ``CooperativeStickyAssignor``:

* when every member subscribes to the same topics, the "constrained" algorithm: members keep
  owned partitions up to their quota, the rest is dealt round-robin (rack-aligned first when
  rack-aware);
* otherwise the "general" algorithm: keep valid owned partitions, give each unassigned
  partition to the least loaded subscriber, then move partitions until balanced, reverting
  if the moves did not improve the balance score;
* owned partitions claimed by several members: the higher generation keeps it, equal
  generations lose it (the partition then counts as changing owner);
* cooperative-sticky removes from the new owner every partition that changes owner in this
  rebalance, so that its previous owner can revoke it first.

Java's results depend on the iteration order of its ``HashMap``s and ``HashSet``s (which
member is considered first, which moved partition is moved back). ``_JavaHashTable`` replays
that order: the members map is the one Java's leader builds (``new HashMap<>()`` filled in
JoinGroup order, which is the order of the ``subscriptions`` dict here). String order and
string hashes are Java's (UTF-16 code units).

The semantics are those of kafka-clients 3.8 and later (the last change to the algorithm was
KAFKA-15170). Java's own quirks are reproduced on purpose, since a group must get the same
assignment whichever client leads it:

* the "all members subscribe to the same topics" test takes its topic set from the first
  member (in HashMap order) with a non-empty subscription, so a first member subscribed to
  nothing is handed partitions;
* in the general algorithm a partition goes back to a member that claimed it in an older
  generation whenever the current owner has 2+ more partitions, even if that member no longer
  subscribes to its topic; if that member was set aside (it cannot take part in the balancing)
  Java fails with a NullPointerException, and ``StickyAssignmentError`` is raised here.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Generic, TypeVar

from partita.client.assignors.base import (
    Assignment,
    MemberSubscription,
    PartitionRacks,
    RebalanceProtocol,
    TopicPartition,
)

DEFAULT_GENERATION = -1


class StickyAssignmentError(RuntimeError):
    """Where Java's assignor throws (IllegalStateException, or a null dereference on
    inconsistent input): the assignment cannot be computed."""


# --------------------------------------------------------------------------------------------
# Java's String order and hashes, and HashMap/HashSet iteration order


@lru_cache(maxsize=65536)
def _jkey(text: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


@lru_cache(maxsize=65536)
def _string_hash(text: str) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit int."""
    units = _jkey(text)
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _tp_hash(tp: TopicPartition) -> int:
    """Java's ``TopicPartition.hashCode``: ``31 * (31 + partition) + topic.hashCode()``."""
    return (31 * (31 + tp[1]) + _string_hash(tp[0])) & 0xFFFFFFFF


K = TypeVar("K")

_INITIAL_CAPACITY = 16
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


class _JavaHashTable(Generic[K]):
    """The key order of a ``java.util.HashMap``/``HashSet`` created with the default capacity.

    Keys sit in buckets chosen by the spread hash; ``put`` appends to its bucket, resizing
    doubles the table and splits each bucket keeping order; ``compute_if_absent`` (as Java's
    ``HashMap.computeIfAbsent``) resizes before inserting and inserts at the bucket's head.
    A bucket that Java would turn into a red-black tree (9+ colliding keys in a table of 64+)
    is kept as a list; ``approximate`` records that this happened.
    """

    __slots__ = ("_hash", "_members", "_table", "_threshold", "approximate")

    def __init__(self, hash_fn: Callable[[K], int]) -> None:
        self._hash = hash_fn
        self._table: list[list[tuple[int, K]]] = []
        self._members: dict[K, int] = {}
        self._threshold = 0
        self.approximate = False

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self) -> Iterator[K]:
        for bucket in self._table:
            for _, key in bucket:
                yield key

    def first(self) -> K:
        for bucket in self._table:
            if bucket:
                return bucket[0][1]
        raise KeyError("empty")

    def _spread(self, key: K) -> int:
        h = self._hash(key) & 0xFFFFFFFF
        return h ^ (h >> 16)

    def _resize(self) -> None:
        old = self._table
        if not old:
            capacity = _INITIAL_CAPACITY
            table: list[list[tuple[int, K]]] = [[] for _ in range(capacity)]
        else:
            old_capacity = len(old)
            capacity = old_capacity * 2
            table = [[] for _ in range(capacity)]
            for index, bucket in enumerate(old):
                for entry in bucket:
                    table[index + old_capacity if entry[0] & old_capacity else index].append(entry)
        self._table = table
        self._threshold = capacity * 3 // 4

    def _treeify_bin(self) -> None:
        if len(self._table) < _MIN_TREEIFY_CAPACITY:
            self._resize()
        else:
            self.approximate = True

    def put(self, key: K) -> None:
        if key in self._members:
            return
        if not self._table:
            self._resize()
        spread = self._spread(key)
        bucket = self._table[spread & (len(self._table) - 1)]
        existing = len(bucket)
        bucket.append((spread, key))
        self._members[key] = spread
        if existing >= _TREEIFY_THRESHOLD:
            self._treeify_bin()
        if len(self._members) > self._threshold:
            self._resize()

    def compute_if_absent(self, key: K) -> None:
        if not self._table or len(self._members) > self._threshold:
            self._resize()
        if key in self._members:
            return
        spread = self._spread(key)
        bucket = self._table[spread & (len(self._table) - 1)]
        existing = len(bucket)
        bucket.insert(0, (spread, key))
        self._members[key] = spread
        if existing >= _TREEIFY_THRESHOLD - 1:
            self._treeify_bin()

    def remove(self, key: K) -> None:
        spread = self._members.pop(key, None)
        if spread is None:
            return
        bucket = self._table[spread & (len(self._table) - 1)]
        for i, (_, other) in enumerate(bucket):
            if other == key:
                del bucket[i]
                return


def _java_string_map_order(keys: Iterator[str] | Sequence[str]) -> list[str]:
    """The iteration order of a ``new HashMap<String, ?>()`` after ``put`` of ``keys``."""
    table: _JavaHashTable[str] = _JavaHashTable(_string_hash)
    for key in keys:
        table.put(key)
    return list(table)


def _list_remove(items: list[TopicPartition], item: TopicPartition) -> None:
    """Java's ``List.remove(Object)``: drop the first occurrence if any."""
    if item in items:
        items.remove(item)


# --------------------------------------------------------------------------------------------
# StickyAssignor's user data ("StickyAssignorUserData" v1: previous_assignment, generation)


def encode_user_data(assigned: Sequence[TopicPartition], generation: int) -> bytes:
    """What Java's ``StickyAssignor.subscriptionUserData`` sends: the member's last assignment
    grouped by topic (topics in Java's ``HashMap`` order, as ``groupPartitionsByTopic``
    leaves them) and the generation it was assigned in (schema v1)."""
    by_topic: dict[str, list[int]] = {}
    order: _JavaHashTable[str] = _JavaHashTable(_string_hash)
    for topic, partition in assigned:
        order.compute_if_absent(topic)
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(struct.pack(">i", len(by_topic)))
    for topic in order:
        name = topic.encode("utf-8", "surrogatepass")
        if len(name) > 0x7FFF:
            raise ValueError(f"topic name too long: {len(name)} bytes")
        out += struct.pack(">h", len(name)) + name
        numbers = by_topic[topic]
        out += struct.pack(f">i{len(numbers)}i", len(numbers), *numbers)
    out += struct.pack(">i", generation)
    return bytes(out)


class _TruncatedError(Exception):
    pass


def _read_assignment(data: bytes, with_generation: bool) -> tuple[list[TopicPartition], int | None]:
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        size = struct.calcsize(fmt)
        if pos + size > len(data):
            raise _TruncatedError
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += size
        return int(value)

    partitions: list[TopicPartition] = []
    topics = take(">i")
    if topics < 0:
        raise _TruncatedError
    for _ in range(topics):
        length = take(">h")
        if length < 0 or pos + length > len(data):
            raise _TruncatedError
        topic = data[pos : pos + length].decode("utf-8", "replace")
        pos += length
        count = take(">i")
        if count < 0:
            raise _TruncatedError
        partitions.extend((topic, take(">i")) for _ in range(count))
    return partitions, (take(">i") if with_generation else None)


def _decode_user_data(data: bytes) -> tuple[list[TopicPartition], int | None]:
    """Java's ``deserializeTopicPartitionAssignment``: v1, else v0 (no generation), else the
    data is ignored (no partitions, generation -1)."""
    try:
        return _read_assignment(data, with_generation=True)
    except _TruncatedError:
        pass
    try:
        return _read_assignment(data, with_generation=False)
    except _TruncatedError:
        return [], DEFAULT_GENERATION


def decode_user_data(data: bytes) -> tuple[list[TopicPartition], int]:
    """Previous assignment and generation from a sticky member's user data. Like Java, v0
    data (no generation) gives generation -1, and data that cannot be parsed is ignored
    (no partitions, generation -1)."""
    partitions, generation = _decode_user_data(data)
    return partitions, DEFAULT_GENERATION if generation is None else generation


def encode_cooperative_user_data(generation: int) -> bytes:
    """What Java's ``CooperativeStickyAssignor.subscriptionUserData`` sends: the generation."""
    return struct.pack(">i", generation)


def decode_cooperative_user_data(data: bytes) -> int:
    """The generation in a cooperative-sticky member's user data (-1 if unreadable)."""
    if len(data) < 4:
        return DEFAULT_GENERATION
    return int(struct.unpack_from(">i", data)[0])


# --------------------------------------------------------------------------------------------
# Assignment


@dataclass(slots=True)
class _MemberData:
    partitions: list[TopicPartition]
    generation: int | None


def _protocol_generation(sub: MemberSubscription) -> int:
    return sub.generation if sub.generation >= 0 else DEFAULT_GENERATION


class _RackInfo:
    """Java's ``AbstractStickyAssignor.RackInfo``."""

    def __init__(
        self,
        partitions: list[TopicPartition],
        replica_racks: PartitionRacks | None,
        members: list[MemberSubscription],
        prefer_rack_aware_logic: bool,
    ) -> None:
        consumers_by_rack: dict[str, list[str]] = {}
        for sub in members:
            if sub.rack:
                consumers_by_rack.setdefault(sub.rack, []).append(sub.member_id)
        racks_of: dict[TopicPartition, set[str]] = {}
        all_partition_racks: set[str] = set()
        if consumers_by_rack:
            for tp in partitions:
                replicas = replica_racks.get(tp, ()) if replica_racks is not None else ()
                racks = {rack for rack in replicas if rack is not None}
                racks_of[tp] = racks
                all_partition_racks |= racks
        consumer_rack_set = set(consumers_by_rack)
        if not consumer_rack_set or consumer_rack_set.isdisjoint(all_partition_racks):
            use = False
        elif prefer_rack_aware_logic:
            use = True
        else:
            use = not all(racks == all_partition_racks for racks in racks_of.values())
        self.consumer_racks: dict[str, str] = {}
        self.partition_racks: dict[TopicPartition, set[str]] = {}
        if use:
            for rack, consumers in consumers_by_rack.items():
                for consumer in consumers:
                    self.consumer_racks[consumer] = rack
            self.partition_racks = racks_of
        # Java computes this from every partition's racks even when rack-aware assignment is off
        self.num_consumers_by_partition = {
            tp: sum(len(consumers_by_rack.get(rack, ())) for rack in racks)
            for tp, racks in racks_of.items()
        }

    def racks_mismatch(self, consumer: str, tp: TopicPartition) -> bool:
        consumer_rack = self.consumer_racks.get(consumer)
        if consumer_rack is None:
            return False
        replica_racks = self.partition_racks.get(tp)
        return replica_racks is None or consumer_rack not in replica_racks

    def sort_partitions_by_rack_consumers(
        self, partitions: list[TopicPartition]
    ) -> list[TopicPartition]:
        if not self.num_consumers_by_partition:
            return partitions
        counts = self.num_consumers_by_partition
        return sorted(partitions, key=lambda tp: counts.get(tp, 0))

    def next_rack_consumer(self, tp: TopicPartition, consumers: list[str], first: int) -> int:
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        for i in range(len(consumers)):
            index = (first + i) % len(consumers)
            rack = self.consumer_racks.get(consumers[index])
            if rack is not None and rack in racks:
                return index
        return -1


class _ConstrainedBuilder:
    """Java's ``ConstrainedAssignmentBuilder`` (all members subscribe to the same topics)."""

    def __init__(
        self,
        partitions_per_topic: dict[str, int],
        rack_info: _RackInfo,
        owned_in_order: list[tuple[str, list[TopicPartition]]],
        multiple_previous_owners: set[TopicPartition],
        transferring: dict[TopicPartition, str],
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.rack_info = rack_info
        self.owned_in_order = owned_in_order
        self.multiple_previous_owners = multiple_previous_owners
        self.transferring = transferring
        self.maybe_revoked: dict[TopicPartition, str] = {}
        self.under_min: list[str] = []
        self.exactly_min: list[str] = []
        total = sum(partitions_per_topic.values())
        members = len(owned_in_order)
        self.total = total
        self.min_quota = total // members
        self.max_quota = -(-total // members)
        self.expected_over_min = total % members
        self.current_over_min = 0
        self.assignment: dict[str, list[TopicPartition]] = {c: [] for c, _ in owned_in_order}
        self.assigned: list[TopicPartition] = []

    def build(self) -> dict[str, list[TopicPartition]]:
        self._assign_owned_partitions()
        unassigned = self._unassigned_partitions()
        self.under_min.sort(key=_jkey)
        self.exactly_min.sort(key=_jkey)
        unassigned = self.rack_info.sort_partitions_by_rack_consumers(unassigned)
        self._assign_rack_aware_round_robin(unassigned)
        self._assign_round_robin(unassigned)
        self._verify_unfilled_members()
        return self.assignment

    def _assign_owned_partitions(self) -> None:
        min_quota, max_quota = self.min_quota, self.max_quota
        for consumer, owned_all in self.owned_in_order:
            owned: list[TopicPartition] = []
            for tp in owned_all:
                if self.rack_info.racks_mismatch(consumer, tp):
                    self.maybe_revoked[tp] = consumer
                else:
                    owned.append(tp)
            owned.sort(key=lambda tp: (tp[1], _jkey(tp[0])))
            if self.multiple_previous_owners:
                owned = [tp for tp in owned if tp not in self.multiple_previous_owners]
            target = self.assignment[consumer]
            if len(owned) < min_quota:
                target.extend(owned)
                self.assigned.extend(owned)
                self.under_min.append(consumer)
            elif len(owned) >= max_quota and self.current_over_min < self.expected_over_min:
                self.current_over_min += 1
                if self.current_over_min == self.expected_over_min:
                    self.exactly_min.clear()
                target.extend(owned[:max_quota])
                self.assigned.extend(owned[:max_quota])
                for tp in owned[max_quota:]:
                    self.maybe_revoked[tp] = consumer
            else:
                target.extend(owned[:min_quota])
                self.assigned.extend(owned[:min_quota])
                for tp in owned[min_quota:]:
                    self.maybe_revoked[tp] = consumer
                if self.current_over_min < self.expected_over_min:
                    self.exactly_min.append(consumer)

    def _unassigned_partitions(self) -> list[TopicPartition]:
        topics = sorted(self.partitions_per_topic, key=_jkey)
        if not self.assigned:
            return [(t, p) for t in topics for p in range(self.partitions_per_topic[t])]
        assigned = sorted(self.assigned, key=lambda tp: (_jkey(tp[0]), tp[1]))
        unassigned: list[TopicPartition] = []
        add_directly = False
        it = iter(assigned)
        next_assigned = next(it)
        for topic in topics:
            for p in range(self.partitions_per_topic[topic]):
                if add_directly or next_assigned != (topic, p):
                    unassigned.append((topic, p))
                else:
                    following = next(it, None)
                    if following is None:
                        add_directly = True
                    else:
                        next_assigned = following
        return unassigned

    def _assign_new_partition(self, tp: TopicPartition, consumer: str) -> int:
        target = self.assignment[consumer]
        target.append(tp)
        previous = self.maybe_revoked.get(tp)
        if (previous is not None and previous != consumer) or tp in self.multiple_previous_owners:
            self.transferring[tp] = consumer
        return len(target)

    def _assign_rack_aware_round_robin(self, unassigned: list[TopicPartition]) -> None:
        rack_info = self.rack_info
        if not rack_info.consumer_racks:
            return
        under, exactly = self.under_min, self.exactly_min
        next_index_start = 0
        i = 0
        while i < len(unassigned):
            tp = unassigned[i]
            consumer: str | None = None
            next_index = rack_info.next_rack_consumer(tp, under, next_index_start)
            if next_index >= 0:
                consumer = under[next_index]
                count = len(self.assignment[consumer]) + 1
                if count >= self.min_quota:
                    under.remove(consumer)
                    if count < self.max_quota and self.current_over_min < self.expected_over_min:
                        exactly.append(consumer)
                else:
                    next_index += 1
                next_index_start = next_index % len(under) if under else 0
            elif exactly:
                first = rack_info.next_rack_consumer(tp, exactly, 0)
                if first >= 0:
                    consumer = exactly[first]
                    if len(self.assignment[consumer]) + 1 == self.max_quota:
                        del exactly[first]
                        self.current_over_min += 1
                        if self.current_over_min == self.expected_over_min:
                            exactly.clear()
            if consumer is not None:
                self._assign_new_partition(tp, consumer)
                del unassigned[i]
            else:
                i += 1

    def _assign_round_robin(self, unassigned: list[TopicPartition]) -> None:
        under, exactly = self.under_min, self.exactly_min
        # a java.util.LinkedList iterator over ``under``: next position and last returned
        position = 0
        last: int | None = None
        for tp in unassigned:
            if position < len(under):
                consumer = under[position]
                last = position
                position += 1
            elif not under and not exactly:
                raise StickyAssignmentError("No more unfilled consumers to be assigned.")
            elif not under:
                consumer = exactly.pop(0)
            else:
                consumer = under[0]
                last = 0
                position = 1
            count = self._assign_new_partition(tp, consumer)
            if count == self.min_quota:
                if last is None:
                    raise StickyAssignmentError("iterator remove without a current element")
                del under[last]
                position = last
                last = None
                exactly.append(consumer)
            elif count == self.max_quota:
                self.current_over_min += 1

    def _verify_unfilled_members(self) -> None:
        if not self.under_min:
            return
        if self.current_over_min != self.expected_over_min:
            raise StickyAssignmentError(
                "We haven't reached the expected number of members with more than the "
                "minQuota partitions, but no more partitions to be assigned"
            )
        for member in self.under_min:
            if len(self.assignment[member]) != self.min_quota:
                raise StickyAssignmentError(
                    f"Consumer: [{member}] doesn't reach minQuota partitions, "
                    "and no more partitions to be assigned"
                )


class _PartitionMovements:
    """Java's ``PartitionMovements``: where each moved partition came from, per topic and
    (source, destination) pair, so that a partition moving back undoes an earlier move."""

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], _JavaHashTable[TopicPartition]]] = {}
        self.movements: dict[TopicPartition, tuple[str, str]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[str, str]:
        pair = self.movements.pop(tp)
        topic_moves = self.by_topic[tp[0]]
        moved = topic_moves[pair]
        moved.remove(tp)
        if not len(moved):
            del topic_moves[pair]
        if not topic_moves:
            del self.by_topic[tp[0]]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[str, str]) -> None:
        self.movements[tp] = pair
        topic_moves = self.by_topic.setdefault(tp[0], {})
        moved = topic_moves.get(pair)
        if moved is None:
            moved = topic_moves[pair] = _JavaHashTable(_tp_hash)
        moved.put(tp)

    def move_partition(self, tp: TopicPartition, old: str, new: str) -> None:
        if tp in self.movements:
            source, _ = self._remove_record(tp)
            if source != new:
                self._add_record(tp, (source, new))
        else:
            self._add_record(tp, (old, new))

    def partition_to_be_moved(self, tp: TopicPartition, old: str, new: str) -> TopicPartition:
        topic_moves = self.by_topic.get(tp[0])
        if topic_moves is None:
            return tp
        if tp in self.movements:
            old = self.movements[tp][0]
        reverse = topic_moves.get((new, old))
        if reverse is None:
            return tp
        return reverse.first()

    def is_sticky(self) -> bool:
        """No partitions of one topic moved both ways between two members."""
        for topic_moves in self.by_topic.values():
            for source, destination in topic_moves:
                if (destination, source) in topic_moves:
                    return False
        return True


class _SortedMembers:
    """Java's ``TreeSet<String>`` ordered by (assigned partition count, member id)."""

    def __init__(self, sizes: dict[str, list[TopicPartition]]) -> None:
        self._sizes = sizes
        self._keys: list[tuple[int, bytes, str]] = []

    def _key(self, member: str) -> tuple[int, bytes, str]:
        return (len(self._sizes[member]), _jkey(member), member)

    def add(self, member: str) -> None:
        key = self._key(member)
        i = bisect_left(self._keys, key)
        if i == len(self._keys) or self._keys[i] != key:
            insort(self._keys, key)

    def remove(self, member: str) -> None:
        key = self._key(member)
        i = bisect_left(self._keys, key)
        if i < len(self._keys) and self._keys[i] == key:
            del self._keys[i]

    def __iter__(self) -> Iterator[str]:
        return (key[2] for key in self._keys)

    def first(self) -> str:
        return self._keys[0][2]

    def last(self) -> str:
        return self._keys[-1][2]


class _GeneralBuilder:
    """Java's ``GeneralAssignmentBuilder`` (members subscribe to different topics)."""

    def __init__(
        self,
        partitions_per_topic: dict[str, int],
        rack_info: _RackInfo,
        current: dict[str, list[TopicPartition]],
        member_order: list[str],
        subscriptions: Mapping[str, MemberSubscription],
        member_data: dict[str, _MemberData],
        max_generation: int,
        movements: _PartitionMovements,
    ) -> None:
        self.partitions_per_topic = partitions_per_topic
        self.total = sum(partitions_per_topic.values())
        self.rack_info = rack_info
        self.current = current
        self.member_order = member_order
        self.subscriptions = subscriptions
        self.member_data = member_data
        self.max_generation = max_generation
        self.movements = movements
        self.revocation_required = False

        self.topic_consumers: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        self.consumer_topics: dict[str, list[str]] = {}
        self.consumer_topic_sets: dict[str, set[str]] = {}
        for consumer in member_order:
            topics = [t for t in subscriptions[consumer].topics if t in partitions_per_topic]
            self.consumer_topics[consumer] = topics
            self.consumer_topic_sets[consumer] = set(topics)
            for topic in topics:
                self.topic_consumers[topic].append(consumer)
            current.setdefault(consumer, [])

        self.partition_consumer: dict[TopicPartition, str] = {}
        for consumer, partitions in current.items():
            for tp in partitions:
                self.partition_consumer[tp] = consumer

        topics_sorted = sorted(
            self.topic_consumers, key=lambda t: (len(self.topic_consumers[t]), _jkey(t))
        )
        self.sorted_all_partitions: list[TopicPartition] = [
            (t, p) for t in topics_sorted for p in range(partitions_per_topic[t])
        ]
        self.sorted_members = _SortedMembers(current)

    def build(self) -> dict[str, list[TopicPartition]]:
        previous = self._previous_assignment()
        assigned = self._assign_owned_partitions()
        unassigned = self._unassigned_partitions(assigned)
        for consumer in self.current:
            self.sorted_members.add(consumer)
        self._balance(previous, unassigned)
        return self.current

    def _previous_assignment(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partitions claimed by members of an older generation than the newest one."""
        previous: dict[TopicPartition, tuple[str, int]] = {}
        for consumer in self.member_order:
            data = self.member_data[consumer]
            generation = DEFAULT_GENERATION if data.generation is None else data.generation
            if generation < self.max_generation:
                for tp in data.partitions:
                    known = previous.get(tp)
                    if known is None or generation > known[1]:
                        previous[tp] = (consumer, generation)
        return previous

    def _assign_owned_partitions(self) -> list[TopicPartition]:
        assigned: list[TopicPartition] = []
        for consumer, partitions in self.current.items():
            subscribed = self.subscriptions[consumer].topics
            kept: list[TopicPartition] = []
            for tp in partitions:
                if tp[0] not in self.topic_consumers:
                    self.partition_consumer.pop(tp, None)
                elif tp[0] not in subscribed or self.rack_info.racks_mismatch(consumer, tp):
                    self.revocation_required = True
                else:
                    kept.append(tp)
                    assigned.append(tp)
            partitions[:] = kept
        return assigned

    def _unassigned_partitions(self, assigned: list[TopicPartition]) -> list[TopicPartition]:
        if not assigned:
            return self.sorted_all_partitions
        consumers = self.topic_consumers
        assigned.sort(key=lambda tp: (len(consumers[tp[0]]), _jkey(tp[0]), tp[1]))
        unassigned: list[TopicPartition] = []
        add_directly = False
        it = iter(assigned)
        next_assigned = next(it)
        for tp in self.sorted_all_partitions:
            if add_directly or next_assigned != tp:
                unassigned.append(tp)
            else:
                following = next(it, None)
                if following is None:
                    add_directly = True
                else:
                    next_assigned = following
        return unassigned

    def _max_assignment_size(self, topics: list[str]) -> int:
        if len(topics) == len(self.partitions_per_topic):
            return self.total
        return sum(self.partitions_per_topic[t] for t in topics)

    def _size(self, consumer: str | None) -> int:
        if consumer is None or consumer not in self.current:
            raise StickyAssignmentError(f"no current assignment for consumer {consumer!r}")
        return len(self.current[consumer])

    def _is_balanced(self) -> bool:
        current = self.current
        if (
            len(current[self.sorted_members.first()])
            >= len(current[self.sorted_members.last()]) - 1
        ):
            return True
        owner: dict[TopicPartition, str] = {}
        for consumer, partitions in current.items():
            for tp in partitions:
                owner[tp] = consumer
        for consumer in self.sorted_members:
            partitions = current[consumer]
            count = len(partitions)
            topics = self.consumer_topics[consumer]
            if count == self._max_assignment_size(topics):
                continue
            mine = set(partitions)
            for topic in topics:
                for p in range(self.partitions_per_topic[topic]):
                    tp = (topic, p)
                    if tp not in mine and count + 1 < self._size(owner.get(tp)):
                        return False
        return True

    @staticmethod
    def _balance_score(assignment: dict[str, list[TopicPartition]]) -> int:
        sizes = sorted(len(partitions) for partitions in assignment.values())
        # sum over pairs of |a - b| for sorted sizes
        return sum(size * (2 * i - len(sizes) + 1) for i, size in enumerate(sizes))

    def _maybe_assign_partition(self, tp: TopicPartition, rack_info: _RackInfo | None) -> bool:
        for consumer in self.sorted_members:
            if tp[0] in self.consumer_topic_sets[consumer] and (
                rack_info is None or not rack_info.racks_mismatch(consumer, tp)
            ):
                self.sorted_members.remove(consumer)
                self.current[consumer].append(tp)
                self.partition_consumer[tp] = consumer
                self.sorted_members.add(consumer)
                return True
        return False

    def _maybe_assign(
        self,
        unassigned: list[TopicPartition],
        rack_info: _RackInfo | None,
        remove_assigned: bool,
    ) -> None:
        kept: list[TopicPartition] = []
        for tp in unassigned:
            if not self.topic_consumers[tp[0]]:
                kept.append(tp)
                continue
            if not (self._maybe_assign_partition(tp, rack_info) and remove_assigned):
                kept.append(tp)
        if remove_assigned:
            unassigned[:] = kept

    def _can_consumer_participate(self, consumer: str) -> bool:
        partitions = self.current[consumer]
        if len(partitions) < self._max_assignment_size(self.consumer_topics[consumer]):
            return True
        return any(len(self.topic_consumers[tp[0]]) >= 2 for tp in partitions)

    def _balance(
        self,
        previous: dict[TopicPartition, tuple[str, int]],
        unassigned: list[TopicPartition],
    ) -> None:
        initializing = not self.current[self.sorted_members.last()]

        to_assign = unassigned
        if self.rack_info.consumer_racks:
            to_assign = list(unassigned)
            self._maybe_assign(to_assign, self.rack_info, True)
        self._maybe_assign(to_assign, None, False)

        fixed_topics = {t for t, consumers in self.topic_consumers.items() if len(consumers) < 2}
        if fixed_topics:
            self.sorted_all_partitions[:] = [
                tp for tp in self.sorted_all_partitions if tp[0] not in fixed_topics
            ]
            unassigned[:] = [tp for tp in unassigned if tp[0] not in fixed_topics]

        fixed_assignments: dict[str, list[TopicPartition]] = {}
        for consumer in self.member_order:
            if not self._can_consumer_participate(consumer):
                self.sorted_members.remove(consumer)
                fixed_assignments[consumer] = self.current.pop(consumer)

        pre_balance = {c: list(partitions) for c, partitions in self.current.items()}
        pre_balance_owners = dict(self.partition_consumer)

        if not self.revocation_required:
            self._perform_reassignments(unassigned, previous)
        performed = self._perform_reassignments(self.sorted_all_partitions, previous)

        if (
            not initializing
            and performed
            and self._balance_score(self.current) >= self._balance_score(pre_balance)
        ):
            self.current.clear()
            self.current.update(pre_balance)
            self.partition_consumer = pre_balance_owners

        self.current.update(fixed_assignments)

    def _perform_reassignments(
        self,
        partitions: list[TopicPartition],
        previous: dict[TopicPartition, tuple[str, int]],
    ) -> bool:
        performed = False
        rack_info = self.rack_info
        while True:
            modified = False
            for tp in partitions:
                if self._is_balanced():
                    break
                consumer = self.partition_consumer.get(tp)
                size = self._size(consumer)
                prior = previous.get(tp)
                if prior is not None and size > self._size(prior[0]) + 1:
                    self._reassign_partition_to(tp, prior[0])
                    performed = modified = True
                    continue
                found_rack_consumer = False
                consumer_rack = rack_info.consumer_racks.get(consumer) if consumer else None
                partition_racks = rack_info.partition_racks.get(tp)
                if (
                    consumer_rack is not None
                    and partition_racks
                    and consumer_rack in partition_racks
                ):
                    for other in self.topic_consumers[tp[0]]:
                        other_rack = rack_info.consumer_racks.get(other)
                        if other_rack is None or other_rack not in partition_racks:
                            continue
                        if size > self._size(other) + 1:
                            self._reassign_partition(tp)
                            performed = modified = found_rack_consumer = True
                            break
                if not found_rack_consumer:
                    for other in self.topic_consumers[tp[0]]:
                        if size > self._size(other) + 1:
                            self._reassign_partition(tp)
                            performed = modified = True
                            break
            if not modified:
                return performed

    def _reassign_partition(self, tp: TopicPartition) -> None:
        for candidate in self.sorted_members:
            if tp[0] in self.consumer_topic_sets[candidate]:
                self._reassign_partition_to(tp, candidate)
                return
        raise StickyAssignmentError(f"no consumer for {tp}")

    def _reassign_partition_to(self, tp: TopicPartition, new_consumer: str) -> None:
        consumer = self.partition_consumer[tp]
        to_move = self.movements.partition_to_be_moved(tp, consumer, new_consumer)
        self._process_partition_movement(to_move, new_consumer)

    def _process_partition_movement(self, tp: TopicPartition, new_consumer: str) -> None:
        old_consumer = self.partition_consumer[tp]
        if old_consumer not in self.current or new_consumer not in self.current:
            raise StickyAssignmentError(f"cannot move {tp} to {new_consumer}")
        self.sorted_members.remove(old_consumer)
        self.sorted_members.remove(new_consumer)
        self.movements.move_partition(tp, old_consumer, new_consumer)
        _list_remove(self.current[old_consumer], tp)
        self.current[new_consumer].append(tp)
        self.partition_consumer[tp] = new_consumer
        self.sorted_members.add(new_consumer)
        self.sorted_members.add(old_consumer)


class _AbstractStickyAssignor:
    """Shared by both assignors. Like Java's, an instance remembers the highest member
    generation it has seen in earlier assignments (``max_generation``); Java keeps one
    assignor instance per consumer, so keep one instance per member (not one per process)
    to reproduce its results exactly."""

    name: str
    supported_protocols: tuple[RebalanceProtocol, ...]

    def __init__(self, *, prefer_rack_aware_logic: bool = False) -> None:
        # Java's package-private test switch: rack-aware even when every partition has
        # replicas on every rack
        self.prefer_rack_aware_logic = prefer_rack_aware_logic
        self.max_generation = DEFAULT_GENERATION
        # Java's ``partitionsTransferringOwnership`` of the last assignment: None after the
        # general algorithm (the cooperative assignor then computes it from the result)
        self.partitions_transferring_ownership: dict[TopicPartition, str] | None = {}
        self._movements: _PartitionMovements | None = None

    def _member_data(self, sub: MemberSubscription) -> _MemberData:
        raise NotImplementedError

    def is_sticky(self) -> bool:
        """After the general algorithm: whether no partitions of a topic moved both ways
        between two members (Java's ``isSticky``, used by its tests)."""
        return self._movements is None or self._movements.is_sticky()

    def _assign_sticky(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: Mapping[str, MemberSubscription],
        partition_racks: PartitionRacks | None,
    ) -> dict[str, list[TopicPartition]]:
        # the leader's AbstractPartitionAssignor.assign(Cluster, ...): subscribed topics that
        # have partitions
        subscribed = {t for sub in subscriptions.values() for t in sub.topics}
        per_topic = {t: n for t, n in partitions_per_topic.items() if n > 0 and t in subscribed}
        if not subscriptions:
            self.partitions_transferring_ownership = {}
            return {}
        order = _java_string_map_order(list(subscriptions))
        member_data = {m: self._member_data(subscriptions[m]) for m in order}

        all_partitions = [(t, p) for t, n in per_topic.items() for p in range(n)]
        rack_info = _RackInfo(
            all_partitions,
            partition_racks,
            [subscriptions[m] for m in order],
            self.prefer_rack_aware_logic,
        )
        owned: dict[str, list[TopicPartition]] = {}
        multiple_owners: set[TopicPartition] = set()
        if self._all_subscriptions_equal(
            set(per_topic), order, subscriptions, member_data, owned, multiple_owners
        ):
            transferring: dict[TopicPartition, str] = {}
            self.partitions_transferring_ownership = transferring
            self._movements = None
            owned_order = _java_string_map_order(order)
            return _ConstrainedBuilder(
                per_topic,
                rack_info,
                [(m, owned[m]) for m in owned_order],
                multiple_owners,
                transferring,
            ).build()
        self.partitions_transferring_ownership = None
        self._movements = _PartitionMovements()
        return _GeneralBuilder(
            per_topic,
            rack_info,
            owned,
            order,
            subscriptions,
            member_data,
            self.max_generation,
            self._movements,
        ).build()

    def _all_subscriptions_equal(
        self,
        all_topics: set[str],
        order: list[str],
        subscriptions: Mapping[str, MemberSubscription],
        member_data: dict[str, _MemberData],
        owned: dict[str, list[TopicPartition]],
        multiple_owners: set[TopicPartition],
    ) -> bool:
        """Java's ``allSubscriptionsEqual``: also collects each member's valid owned
        partitions, settling partitions claimed by several members by generation."""
        equal = True
        subscribed: set[str] = set()
        previous_owner: dict[TopicPartition, str] = {}
        for consumer in order:
            topics = subscriptions[consumer].topics
            if not subscribed:
                # Java initialises the set from the first non-empty subscription
                subscribed.update(topics)
            elif equal and not (len(topics) == len(subscribed) and subscribed.issuperset(topics)):
                equal = False
            data = member_data[consumer]
            generation = DEFAULT_GENERATION if data.generation is None else data.generation
            self.max_generation = max(self.max_generation, generation)
            mine: list[TopicPartition] = []
            owned[consumer] = mine
            for tp in data.partitions:
                if tp[0] not in all_topics:
                    continue
                other = previous_owner.get(tp)
                if other is None:
                    mine.append(tp)
                    previous_owner[tp] = consumer
                    continue
                other_generation = _protocol_generation(subscriptions[other])
                if generation == other_generation:
                    multiple_owners.add(tp)
                    _list_remove(owned[other], tp)
                    previous_owner[tp] = consumer
                elif generation > other_generation:
                    mine.append(tp)
                    _list_remove(owned[other], tp)
                    previous_owner[tp] = consumer
        return equal


def _in_member_order(
    subscriptions: Mapping[str, MemberSubscription], result: dict[str, list[TopicPartition]]
) -> Assignment:
    return {member: list(result.get(member, [])) for member in subscriptions}


class StickyAssignor(_AbstractStickyAssignor):
    """Java's ``StickyAssignor`` (eager). A member's previous assignment and generation come
    from its user data (``encode_user_data``) as in Java; a member without user data
    (``user_data is None``) is taken to carry them already decoded in
    ``owned_partitions``/``generation``."""

    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """The previous assignment and its generation: all an eager leader (of any client)
        has to stay sticky, since an eager member owns nothing when it joins."""
        return encode_user_data(owned, generation)

    def _member_data(self, sub: MemberSubscription) -> _MemberData:
        if sub.user_data is not None:
            if not sub.user_data:
                return _MemberData([], None)
            partitions, generation = _decode_user_data(sub.user_data)
            return _MemberData(partitions, generation)
        return _MemberData(
            list(sub.owned_partitions), sub.generation if sub.generation >= 0 else None
        )

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, MemberSubscription],
        *,
        partition_racks: PartitionRacks | None = None,
    ) -> Assignment:
        """``partition_racks`` (replica racks per partition) enables KIP-881 rack-aware
        assignment for members that have a rack; without it racks are unknown, as in Java's
        ``assign(Map<String, Integer>, ...)``."""
        result = self._assign_sticky(partitions_per_topic, subscriptions, partition_racks)
        return _in_member_order(subscriptions, result)


class CooperativeStickyAssignor(_AbstractStickyAssignor):
    """Java's ``CooperativeStickyAssignor``: the sticky assignment, less the partitions that
    change owner in this rebalance (their previous owner revokes them first; a follow-up
    rebalance assigns them)."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(
        self, owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """Only the generation: owned partitions travel in the subscription itself."""
        return encode_cooperative_user_data(generation)

    def _member_data(self, sub: MemberSubscription) -> _MemberData:
        if sub.generation >= 0:
            return _MemberData(list(sub.owned_partitions), sub.generation)
        generation = None if sub.user_data is None else decode_cooperative_user_data(sub.user_data)
        return _MemberData(list(sub.owned_partitions), generation)

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, MemberSubscription],
        *,
        partition_racks: PartitionRacks | None = None,
    ) -> Assignment:
        """See ``StickyAssignor.assign``."""
        result = self._assign_sticky(partitions_per_topic, subscriptions, partition_racks)
        transferring = self.partitions_transferring_ownership
        if transferring is None:
            transferring = _transferring_ownership(subscriptions, result)
        for tp, consumer in transferring.items():
            if consumer in result:
                _list_remove(result[consumer], tp)
        return _in_member_order(subscriptions, result)


def _transferring_ownership(
    subscriptions: Mapping[str, MemberSubscription], result: dict[str, list[TopicPartition]]
) -> dict[TopicPartition, str]:
    """Partitions newly assigned to a member while another member still owns them."""
    added: dict[TopicPartition, str] = {}
    revoked: set[TopicPartition] = set()
    for consumer, assigned in result.items():
        owned = subscriptions[consumer].owned_partitions
        owned_set = set(owned)
        for tp in assigned:
            if tp not in owned_set:
                added[tp] = consumer
        assigned_set = set(assigned)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    return {tp: consumer for tp, consumer in added.items() if tp in revoked}
