"""The controller's rule for a partition when brokers come and go (sans-IO).

Kafka's rules (``PartitionChangeBuilder``, read for their semantics):

- A broker that is no longer registered leaves every ISR, except that the last member
  is kept: it is the only replica known to hold every committed record, so the partition
  waits for it (leader -1) rather than forgetting who could lead it.
- The leader stays while it is registered, in the ISR and not shutting down.
- Otherwise the new leader is the first replica, in assignment order, that is in the ISR
  and electable (registered, not shutting down). With
  ``unclean.leader.election.enable`` and no such replica, the first electable replica
  leads with an ISR of itself: availability bought with possible loss, as in Kafka.
- A broker shutting down keeps a leadership nobody else can take.
- Every change bumps the partition epoch; a new leader bumps the leader epoch, which
  fences the old one and makes clients discard older metadata.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence, Set

from partita.cluster.model import PartitionState

NO_LEADER = -1


def next_state(
    state: PartitionState,
    registered: Set[int],
    electable: Set[int],
    *,
    unclean: bool = False,
) -> PartitionState:
    """The partition's state after the registered/electable broker sets changed; the
    same object when nothing needs to change."""
    isr = [b for b in state.isr if b in registered and b in electable]
    if not isr:
        # Keep the last in-sync member(s) that are at least registered; failing that,
        # the ISR as it was: one of them must come back before the partition can lead.
        isr = [b for b in state.isr if b in registered] or list(state.isr)
    leader = state.leader
    if not (leader in electable and leader in isr):
        leader = first_eligible(state.replicas, electable, isr)
        if leader == NO_LEADER and state.leader in registered and state.leader in isr:
            leader = state.leader  # shutting down, but nobody else can take over
        elif leader == NO_LEADER and unclean:
            leader = first_eligible(state.replicas, electable)
            if leader != NO_LEADER:
                isr = [leader]
    return changed(state, leader=leader, isr=isr)


def first_eligible(
    replicas: Sequence[int], electable: Set[int], in_sync: Collection[int] | None = None
) -> int:
    """Kafka's choice of leader: the first replica, in assignment order, that is electable
    (and in sync, unless the election is unclean); NO_LEADER if none is."""
    for replica in replicas:
        if replica in electable and (in_sync is None or replica in in_sync):
            return replica
    return NO_LEADER


def changed(
    state: PartitionState,
    *,
    leader: int | None = None,
    isr: list[int] | None = None,
    replicas: list[int] | None = None,
    adding: list[int] | None = None,
    removing: list[int] | None = None,
) -> PartitionState:
    """``state`` with the given fields replaced and its epochs bumped as Kafka bumps
    them; the same object when nothing differs."""
    new = PartitionState(
        list(state.replicas if replicas is None else replicas),
        state.leader if leader is None else leader,
        state.leader_epoch,
        list(state.isr if isr is None else isr),
        state.partition_epoch,
        list(state.adding if adding is None else adding),
        list(state.removing if removing is None else removing),
    )
    if new == state:
        return state
    if new.leader != state.leader:
        new.leader_epoch += 1
    new.partition_epoch += 1
    return new
