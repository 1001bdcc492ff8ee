"""Where a new partition's replicas go: Kafka's replica placement, rack-aware or not.

The rules are those of Kafka's ``AdminUtils.assignReplicasToBrokers`` (read for their
semantics): brokers are taken in id order (or, with racks, in an order that alternates
racks), each partition's first replica -- its preferred leader -- walks round-robin from a
random start, and its followers sit at a shift from the first replica that grows by one
every time the partitions have gone once round the brokers. So leaders and replicas
spread evenly, and two topics created one after the other do not pile their leaders on
the same broker. With racks, a partition's replicas land on distinct racks as long as
there are racks enough.

Pure functions: the controller's callers pass the live brokers and a random source.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from partita.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError

Assignment = dict[int, list[int]]


def assign_replicas(
    brokers: Mapping[int, str | None],
    num_partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start_index: int | None = None,
    rng: random.Random | None = None,
) -> Assignment:
    """Replicas for partitions ``first_partition .. first_partition + num_partitions - 1``.

    ``brokers`` maps each live broker id to its rack (None when it has none). When every
    broker has a rack the placement is rack-aware; when none has, it is not; a mix is
    refused, as Kafka refuses it, because "spread over racks" would then mean nothing.
    ``start_index`` fixes the walk's start (Kafka fixes it when partitions are added, so
    that new ones continue the existing pattern); otherwise it is random.
    """
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be larger than 0, got {replication_factor}"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} available broker{'s' if len(brokers) != 1 else ''}"
        )
    if num_partitions <= 0:
        return {}
    racks = {b: r for b, r in brokers.items() if r}
    if racks and len(racks) != len(brokers):
        without = sorted(set(brokers) - set(racks))
        raise InvalidReplicaAssignmentError(
            f"brokers {without} have no broker.rack while others have one: set it on "
            f"every broker or on none"
        )
    ordered = _rack_alternated(racks) if racks else sorted(brokers)
    rng = rng or random.Random()
    fixed = start_index is not None
    start = start_index if fixed else rng.randrange(len(ordered))
    assert start is not None
    shift = start if fixed else rng.randrange(len(ordered))
    num_racks = len(set(racks.values())) if racks else 1
    result: Assignment = {}
    for partition in range(first_partition, first_partition + num_partitions):
        if partition > 0 and partition % len(ordered) == 0:
            shift += 1
        first = (partition + start) % len(ordered)
        if racks:
            result[partition] = _rack_aware_replicas(
                ordered, racks, first, shift * num_racks, replication_factor
            )
        else:
            result[partition] = [ordered[first]] + [
                ordered[_follower_index(first, shift, j, len(ordered))]
                for j in range(replication_factor - 1)
            ]
    return result


def start_index_for(brokers: Mapping[int, str | None], existing_first_replica: int) -> int:
    """Kafka's start for added partitions: the position of partition 0's first replica
    (or the next broker up) in the broker order, so that the walk carries on."""
    racks = {b: r for b, r in brokers.items() if r}
    ordered = _rack_alternated(racks) if racks and len(racks) == len(brokers) else sorted(brokers)
    for index, broker in enumerate(ordered):
        if broker >= existing_first_replica:
            return index
    return 0


def check_explicit_assignment(
    assignment: Mapping[int, Sequence[int]], known_brokers: Sequence[int]
) -> None:
    """An operator's own ``replica_assignment``: honoured as given, but every partition
    needs the same number of distinct, registered brokers."""
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) > 1:
        raise InvalidReplicaAssignmentError(
            "every partition of a topic must have the same number of replicas"
        )
    known = set(known_brokers)
    for partition, replicas in assignment.items():
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"partition {partition} names a broker twice: {list(replicas)}"
            )
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} is assigned to unknown brokers {unknown}"
            )


def _follower_index(first: int, shift: int, replica: int, num_brokers: int) -> int:
    # The shift is never a multiple of the broker count, so a follower never lands on
    # the first replica's broker.
    return (first + 1 + (shift + replica) % (num_brokers - 1)) % num_brokers


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks and brokers sorted): a1, b1, c1, a2...
    Consecutive positions then sit on different racks wherever the racks allow."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    ordered: list[int] = []
    depth = 0
    while len(ordered) < len(racks):
        for queue in queues:
            if depth < len(queue):
                ordered.append(queue[depth])
        depth += 1
    return ordered


def _rack_aware_replicas(
    ordered: Sequence[int], racks: Mapping[int, str], first: int, shift: int, rf: int
) -> list[int]:
    leader = ordered[first]
    replicas = [leader]
    used_racks = {racks[leader]}
    all_racks = len(set(racks.values()))
    k = 0
    while len(replicas) < rf:
        broker = ordered[_follower_index(first, shift, k, len(ordered))]
        k += 1
        # A rack already used is skipped until every rack holds a replica; a broker
        # already used is skipped until every broker does (then repeats are the only way).
        if racks[broker] in used_racks and len(used_racks) < all_racks:
            continue
        if broker in replicas:
            continue
        replicas.append(broker)
        used_racks.add(racks[broker])
    return replicas
