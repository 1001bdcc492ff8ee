"""Moving a partition's replicas (KIP-455, as Kafka's controller does it), sans-IO.

A reassignment from replicas R to target T first widens the replica set to T followed by
the members of R not in T, with ``adding`` = T - R and ``removing`` = R - T. The new
replicas then fetch like any follower and the leader adds them to the ISR once they have
caught up. When every adding replica is in the ISR the controller completes the move:
replicas become T, the ISR keeps only members of T, and if the leader is leaving,
leadership passes to the first replica of T in the ISR (a new leader epoch). Brokers that
are no longer replicas then drop their copies. Cancelling puts the original replicas back
the same way. Producers and consumers keep working throughout: only the last step moves
leadership, exactly as a preferred election does.
"""

from __future__ import annotations

from collections.abc import Sequence, Set

from partita.cluster.elections import NO_LEADER, changed, first_eligible
from partita.cluster.model import PartitionState
from partita.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError


def start(state: PartitionState, target: Sequence[int], known: Set[int]) -> PartitionState:
    """The state that begins moving ``state`` to ``target`` (replacing a move in flight,
    as Kafka does, from the replicas it started with)."""
    target = list(target)
    if not target:
        raise InvalidReplicaAssignmentError("a reassignment needs at least one replica")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"target replicas {target} name a broker twice")
    unknown = sorted(set(target) - set(known))
    if unknown:
        raise InvalidReplicaAssignmentError(f"target replicas name unknown brokers {unknown}")
    original = state.original_replicas
    adding = [r for r in target if r not in original]
    removing = [r for r in original if r not in target]
    if not adding and not removing:
        # Only the order changes (a new preferred leader): nothing to copy.
        return changed(state, replicas=target, adding=[], removing=[])
    replicas = target + [r for r in original if r not in target]
    isr = [r for r in state.isr if r in replicas]
    return changed(state, replicas=replicas, isr=isr, adding=adding, removing=removing)


def cancel(state: PartitionState, electable: Set[int]) -> PartitionState:
    if not state.reassigning:
        raise NoReassignmentInProgressError("no reassignment in progress for this partition")
    return _settle(state, state.original_replicas, electable)


def advance(state: PartitionState, electable: Set[int]) -> PartitionState:
    """Complete the move once every adding replica is in the ISR; else unchanged."""
    if not state.reassigning or not set(state.adding) <= set(state.isr):
        return state
    return _settle(state, state.target_replicas, electable)


def _settle(state: PartitionState, replicas: list[int], electable: Set[int]) -> PartitionState:
    isr = [r for r in state.isr if r in replicas]
    leader = state.leader
    if leader not in replicas or leader not in isr:
        leader = first_eligible(replicas, electable, isr)
    if not isr:
        isr = [leader] if leader != NO_LEADER else state.isr[:1]
    return changed(state, replicas=replicas, isr=isr, leader=leader, adding=[], removing=[])
