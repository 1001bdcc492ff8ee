"""Preferred and unclean leader election on request (ElectLeaders), and the automatic
rebalance of leadership after a broker returns (``auto.leader.rebalance.enable``), by
Kafka's rules; sans-IO.

A partition's preferred leader is the first replica of its assignment. A preferred
election moves leadership there when it is alive and in the ISR; an unclean one elects a
live replica, even out of the ISR, for a partition that has no leader. The automatic
rebalance looks at each broker's share of partitions it should lead but does not; above
``leader.imbalance.per.broker.percentage`` it runs preferred elections for them.
"""

from __future__ import annotations

from collections.abc import Iterable, Set

from partita.cluster.elections import NO_LEADER, changed, first_eligible
from partita.cluster.model import PartitionState

NONE = 0
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
PREFERRED, UNCLEAN = 0, 1


def elect(
    state: PartitionState, kind: int, registered: Set[int], electable: Set[int]
) -> tuple[PartitionState, int]:
    """(new state, Kafka error code); the state is unchanged with any error."""
    if kind == PREFERRED:
        preferred = state.replicas[0]
        if state.leader == preferred:
            return state, ELECTION_NOT_NEEDED
        if preferred not in state.isr or preferred not in electable:
            return state, PREFERRED_LEADER_NOT_AVAILABLE
        return changed(state, leader=preferred), NONE
    if state.leader != NO_LEADER and state.leader in registered:
        return state, ELECTION_NOT_NEEDED
    in_sync = first_eligible(state.replicas, electable, state.isr)
    if in_sync != NO_LEADER:
        return changed(state, leader=in_sync), NONE
    alive = first_eligible(state.replicas, electable)
    if alive == NO_LEADER:
        return state, ELIGIBLE_LEADERS_NOT_AVAILABLE
    return changed(state, leader=alive, isr=[alive]), NONE


def imbalanced(
    states: Iterable[tuple[object, PartitionState]], electable: Set[int], percentage: int
) -> list[object]:
    """Keys of partitions to move back to their preferred leader: those of each broker
    whose share of not-led preferred partitions exceeds ``percentage``."""
    preferred_of: dict[int, list[tuple[object, PartitionState]]] = {}
    for key, state in states:
        if state.replicas:
            preferred_of.setdefault(state.replicas[0], []).append((key, state))
    chosen: list[object] = []
    for broker, owned in preferred_of.items():
        if broker not in electable:
            continue
        not_led = [(k, s) for k, s in owned if s.leader != broker]
        if len(not_led) * 100 > percentage * len(owned):
            chosen.extend(k for k, s in not_led if broker in s.isr)
    return chosen
