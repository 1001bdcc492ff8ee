"""Preferred and unclean elections, the automatic rebalance, and reassignment steps."""

from __future__ import annotations

import pytest

from partita.cluster import preferred, reassignment
from partita.cluster.model import PartitionState
from partita.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError


def test_preferred_election_moves_leadership_back() -> None:
    state = PartitionState([1, 2, 3], 2, 4, [2, 3, 1], 7)
    new, code = preferred.elect(state, preferred.PREFERRED, {1, 2, 3}, {1, 2, 3})
    assert code == preferred.NONE
    assert (new.leader, new.leader_epoch) == (1, 5)


def test_preferred_election_errors() -> None:
    led = PartitionState([1, 2, 3], 1, 4, [1, 2, 3], 7)
    assert preferred.elect(led, preferred.PREFERRED, {1, 2, 3}, {1, 2, 3})[1] == 84
    out_of_sync = PartitionState([1, 2, 3], 2, 4, [2, 3], 7)
    assert preferred.elect(out_of_sync, preferred.PREFERRED, {1, 2, 3}, {1, 2, 3})[1] == 80
    leaderless = PartitionState([1, 2, 3], -1, 4, [1], 7)
    new, code = preferred.elect(leaderless, preferred.UNCLEAN, {2, 3}, {2, 3})
    assert (code, new.leader, new.isr) == (0, 2, [2])
    assert preferred.elect(leaderless, preferred.UNCLEAN, set(), set())[1] == 83
    assert preferred.elect(led, preferred.UNCLEAN, {1, 2, 3}, {1, 2, 3})[1] == 84


def test_rebalance_picks_brokers_over_the_imbalance_threshold() -> None:
    states = [
        (("t", p), PartitionState([1 + p % 3, 1 + (p + 1) % 3], 2 if p % 3 == 0 else 1 + p % 3,
                                  0, [1 + p % 3, 1 + (p + 1) % 3]))
        for p in range(9)
    ]  # fmt: skip
    # Broker 1 should lead 3 partitions and leads none: 100% > 10%.
    chosen = preferred.imbalanced(states, {1, 2, 3}, 10)
    assert sorted(chosen) == [("t", 0), ("t", 3), ("t", 6)]
    assert preferred.imbalanced(states, {2, 3}, 10) == []


def test_a_reassignment_widens_then_settles_on_the_target() -> None:
    state = PartitionState([1, 2, 3], 1, 3, [1, 2, 3], 5)
    moving = reassignment.start(state, [4, 2, 3], {1, 2, 3, 4})
    assert (moving.replicas, moving.adding, moving.removing) == ([4, 2, 3, 1], [4], [1])
    assert reassignment.advance(moving, {1, 2, 3, 4}) is moving  # 4 not in the ISR yet
    caught_up = PartitionState(moving.replicas, 1, 3, [1, 2, 3, 4], 6, [4], [1])
    done = reassignment.advance(caught_up, {1, 2, 3, 4})
    assert (done.replicas, done.isr, done.adding, done.removing) == ([4, 2, 3], [2, 3, 4], [], [])
    assert (done.leader, done.leader_epoch) == (4, 4)  # the leader left: 4 leads (first in ISR)


def test_cancel_puts_the_original_replicas_back() -> None:
    state = PartitionState([1, 2, 3], 1, 3, [1, 2, 3], 5)
    moving = reassignment.start(state, [4, 5, 3], {1, 2, 3, 4, 5})
    back = reassignment.cancel(moving, {1, 2, 3, 4, 5})
    # As in Kafka, the original replicas come back in the order the move kept them in
    # (kept ones first); the leader stays.
    assert (back.replicas, back.leader, back.adding, back.removing) == ([3, 1, 2], 1, [], [])
    with pytest.raises(NoReassignmentInProgressError):
        reassignment.cancel(back, {1, 2, 3})


def test_bad_targets_are_refused() -> None:
    state = PartitionState([1, 2], 1, 0, [1, 2])
    with pytest.raises(InvalidReplicaAssignmentError):
        reassignment.start(state, [1, 1], {1, 2})
    with pytest.raises(InvalidReplicaAssignmentError):
        reassignment.start(state, [1, 9], {1, 2})
    reordered = reassignment.start(state, [2, 1], {1, 2})
    assert (reordered.replicas, reordered.reassigning) == ([2, 1], False)
