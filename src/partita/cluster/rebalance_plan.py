"""A reassignment plan that balances replicas and preferred leaders over a set of
brokers while moving as few replicas as possible (sans-IO).

Kafka's ``kafka-reassign-partitions --generate`` places every partition afresh, so most
replicas move. Here only what must move does: replicas on brokers leaving the set, then,
one at a time, a replica from the most loaded broker to the least loaded one that does
not hold the partition (keeping a partition's replicas on distinct racks where racks
allow), until every broker is within one replica of the others. Preferred leaders (the
first replica) are then balanced by reordering replicas, which copies no data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

Assignment = dict[tuple[str, int], list[int]]


def plan(
    current: Mapping[tuple[str, int], Sequence[int]],
    brokers: Sequence[int],
    racks: Mapping[int, str | None] | None = None,
) -> Assignment:
    racks = racks or {}
    targets = sorted(set(brokers))
    if not targets:
        raise ValueError("a plan needs at least one broker")
    assignment: Assignment = {tp: list(replicas) for tp, replicas in sorted(current.items())}
    for tp, replicas in assignment.items():
        if len(replicas) > len(targets):
            raise ValueError(
                f"{tp[0]}-{tp[1]} has {len(replicas)} replicas, more than {len(targets)} brokers"
            )
    load: Counter[int] = Counter({b: 0 for b in targets})
    for replicas in assignment.values():
        load.update(r for r in replicas if r in load)
    # 1. Replicas on brokers that leave.
    for replicas in assignment.values():
        for i, broker in enumerate(replicas):
            if broker not in load:
                new = _best_target(replicas, load, racks, exclude=broker)
                replicas[i] = new
                load[new] += 1
    # 2. Even out: from the most loaded broker to the least loaded, one replica at a time.
    while True:
        high = max(targets, key=lambda b: (load[b], -b))
        low = min(targets, key=lambda b: (load[b], b))
        if load[high] - load[low] <= 1:
            break
        move = _movable(assignment, high, low, racks)
        if move is None:
            break
        replicas = assignment[move]
        replicas[replicas.index(high)] = low
        load[high] -= 1
        load[low] += 1
    # 3. Preferred leaders: reorder so each broker leads its share.
    _balance_leaders(assignment, targets)
    return assignment


def moves(current: Mapping[tuple[str, int], Sequence[int]], planned: Assignment) -> int:
    """Replicas that must be copied to a new broker."""
    return sum(len(set(planned[tp]) - set(current[tp])) for tp in planned)


def _best_target(
    replicas: list[int], load: Counter[int], racks: Mapping[int, str | None], exclude: int
) -> int:
    used_racks = {racks.get(r) for r in replicas if r != exclude}
    candidates = [b for b in load if b not in replicas]
    distinct = [b for b in candidates if racks.get(b) is None or racks.get(b) not in used_racks]
    pool = distinct or candidates
    return min(pool, key=lambda b: (load[b], b))


def _movable(
    assignment: Assignment, high: int, low: int, racks: Mapping[int, str | None]
) -> tuple[str, int] | None:
    fallback = None
    for tp, replicas in assignment.items():
        if high not in replicas or low in replicas:
            continue
        others = {racks.get(r) for r in replicas if r != high}
        if (
            racks.get(low) is None
            or racks.get(low) not in others
            or racks.get(high) == racks.get(low)
        ):
            # Prefer a partition whose first replica is not the one moving: a moved
            # leader is one more leadership change.
            if replicas[0] != high:
                return tp
            fallback = fallback or tp
    return fallback


def _balance_leaders(assignment: Assignment, brokers: list[int]) -> None:
    leads: Counter[int] = Counter({b: 0 for b in brokers})
    for replicas in assignment.values():
        leads[replicas[0]] += 1
    fair = -(-len(assignment) // len(brokers))  # ceiling
    for replicas in assignment.values():
        first = replicas[0]
        if leads[first] <= fair:
            continue
        better = min(replicas[1:], key=lambda b: (leads[b], b), default=None)
        if better is not None and leads[better] + 1 < leads[first]:
            replicas.remove(better)
            replicas.insert(0, better)
            leads[first] -= 1
            leads[better] += 1
