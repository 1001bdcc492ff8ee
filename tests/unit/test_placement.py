"""Replica placement: balance, racks, explicit assignments, Kafka's refusals."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from partita.cluster.placement import (
    assign_replicas,
    check_explicit_assignment,
    start_index_for,
)
from partita.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError


def _counts(assignment: dict[int, list[int]]) -> tuple[Counter[int], Counter[int]]:
    leaders = Counter(replicas[0] for replicas in assignment.values())
    replicas = Counter(b for rs in assignment.values() for b in rs)
    return leaders, replicas


@pytest.mark.parametrize("seed", range(20))
def test_six_partitions_rf3_over_three_racks_lead_two_each_on_distinct_racks(seed: int) -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    assignment = assign_replicas(racks, 6, 3, rng=random.Random(seed))
    leaders, replicas = _counts(assignment)
    assert leaders == {1: 2, 2: 2, 3: 2}
    assert replicas == {1: 6, 2: 6, 3: 6}
    for rs in assignment.values():
        assert len({racks[b] for b in rs}) == 3


@pytest.mark.parametrize("seed", range(20))
def test_rack_unaware_balances_leaders_and_replicas(seed: int) -> None:
    brokers: dict[int, str | None] = {b: None for b in (1, 2, 3, 4, 5)}
    assignment = assign_replicas(brokers, 10, 3, rng=random.Random(seed))
    leaders, replicas = _counts(assignment)
    assert set(leaders.values()) == {2}
    assert set(replicas.values()) == {6}
    for rs in assignment.values():
        assert len(set(rs)) == 3


def test_followers_shift_after_each_round_of_brokers() -> None:
    # Kafka's shifting follower offset: partitions p and p + n must not share a layout,
    # or a broker's death would load one other broker with all its followers.
    brokers: dict[int, str | None] = {0: None, 1: None, 2: None, 3: None}
    assignment = assign_replicas(brokers, 8, 2, start_index=0)
    assert assignment[0] == [0, 1]
    assert assignment[4] == [0, 2]


def test_uneven_racks_still_spread_over_every_rack() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "c"}
    assignment = assign_replicas(racks, 12, 3, rng=random.Random(7))
    for rs in assignment.values():
        assert {racks[b] for b in rs} == {"a", "b", "c"}


def test_more_replicas_than_racks_uses_every_rack_then_repeats() -> None:
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    assignment = assign_replicas(racks, 4, 3, rng=random.Random(1))
    for rs in assignment.values():
        assert len(set(rs)) == 3
        assert {racks[b] for b in rs} == {"a", "b"}


def test_replication_factor_above_the_broker_count_is_refused() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available"):
        assign_replicas({1: None, 2: None}, 3, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas({1: None}, 3, 0)


def test_a_mix_of_racked_and_unracked_brokers_is_refused() -> None:
    with pytest.raises(InvalidReplicaAssignmentError, match=r"\[2\]"):
        assign_replicas({1: "a", 2: None}, 3, 2)


def test_added_partitions_continue_the_walk() -> None:
    brokers: dict[int, str | None] = {1: None, 2: None, 3: None}
    first = assign_replicas(brokers, 3, 2, start_index=1)
    start = start_index_for(brokers, first[0][0])
    more = assign_replicas(brokers, 3, 2, first_partition=3, start_index=start)
    leaders, _ = _counts({**first, **more})
    assert set(leaders.values()) == {2}
    assert sorted(more) == [3, 4, 5]


def test_explicit_assignments_are_checked() -> None:
    check_explicit_assignment({0: [1, 2], 1: [2, 3]}, [1, 2, 3])
    with pytest.raises(InvalidReplicaAssignmentError, match="same number"):
        check_explicit_assignment({0: [1, 2], 1: [2]}, [1, 2, 3])
    with pytest.raises(InvalidReplicaAssignmentError, match="twice"):
        check_explicit_assignment({0: [1, 1]}, [1, 2])
    with pytest.raises(InvalidReplicaAssignmentError, match="unknown brokers"):
        check_explicit_assignment({0: [1, 9]}, [1, 2])
