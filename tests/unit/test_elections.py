"""The controller's per-partition rule: who leads when brokers come and go."""

from __future__ import annotations

from partita.cluster.elections import NO_LEADER, changed, next_state
from partita.cluster.model import PartitionState


def _state(leader: int, isr: list[int], replicas: list[int] | None = None) -> PartitionState:
    return PartitionState(replicas or [1, 2, 3], leader, 5, isr, 9)


def test_nothing_changes_while_everyone_is_alive() -> None:
    state = _state(1, [1, 2, 3])
    assert next_state(state, {1, 2, 3}, {1, 2, 3}) is state


def test_a_dead_leader_is_replaced_by_the_first_isr_replica_in_assignment_order() -> None:
    new = next_state(_state(1, [3, 1, 2]), {2, 3}, {2, 3})
    assert new.leader == 2
    assert new.isr == [3, 2]
    assert (new.leader_epoch, new.partition_epoch) == (6, 10)


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    new = next_state(_state(1, [1, 2, 3]), {1, 3}, {1, 3})
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (1, [1, 3], 5, 10)


def test_a_replica_out_of_the_isr_never_leads_cleanly() -> None:
    new = next_state(_state(1, [1]), {2, 3}, {2, 3})
    assert new.leader == NO_LEADER
    assert new.isr == [1]  # the last in-sync replica is remembered
    assert new.leader_epoch == 6


def test_the_last_isr_member_leads_again_when_it_returns() -> None:
    waiting = PartitionState([1, 2, 3], NO_LEADER, 6, [1], 10)
    new = next_state(waiting, {1, 2, 3}, {1, 2, 3})
    assert (new.leader, new.isr, new.leader_epoch) == (1, [1], 7)


def test_unclean_election_takes_the_first_live_replica_with_an_isr_of_itself() -> None:
    new = next_state(_state(1, [1]), {2, 3}, {2, 3}, unclean=True)
    assert (new.leader, new.isr) == (2, [2])


def test_a_shutting_down_leader_hands_over_to_an_isr_replica() -> None:
    new = next_state(_state(1, [1, 2, 3]), {1, 2, 3}, {2, 3})
    assert new.leader == 2
    assert 1 not in new.isr


def test_a_shutting_down_sole_isr_member_keeps_leading() -> None:
    state = _state(1, [1])
    assert next_state(state, {1, 2, 3}, {2, 3}) is state


def test_a_starting_broker_is_not_elected() -> None:
    new = next_state(_state(1, [1, 2]), {2, 3}, {3})
    # 2 is registered but still recovering: it stays the ISR's last member, and 3, out of
    # the ISR, cannot lead; so nobody leads until 2 is ready.
    assert (new.leader, new.isr) == (NO_LEADER, [2])


def test_changed_bumps_epochs_only_for_real_changes() -> None:
    state = _state(1, [1, 2, 3])
    assert changed(state, isr=[1, 2, 3]) is state
    assert changed(state, isr=[1, 2]).leader_epoch == 5
    assert changed(state, leader=2).leader_epoch == 6
