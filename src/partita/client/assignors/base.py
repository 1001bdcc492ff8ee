"""What every assignor sees and returns (sans-IO).

The group leader's client runs the assignor: it gets every member's subscription
(decoded from ConsumerProtocolSubscription) and the partition count of each subscribed
topic, and returns the partitions each member should own. Results must be identical to
the Java client's assignor of the same name, so that mixed groups agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

TopicPartition = tuple[str, int]
Assignment = dict[str, list[TopicPartition]]
# The racks of each partition's replicas (None for a broker without broker.rack).
PartitionRacks = Mapping[TopicPartition, Sequence[str | None]]


class RebalanceProtocol(Enum):
    EAGER = "EAGER"
    COOPERATIVE = "COOPERATIVE"


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1
    rack: str | None = None
    group_instance_id: str | None = None
    user_data: bytes | None = field(default=None, compare=False)


class Assignor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]: ...

    def subscription_user_data(
        self, owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        """What this assignor adds to a member's subscription (Java's
        ``subscriptionUserData``): ``owned`` is what the member was last assigned."""
        ...

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, MemberSubscription],
        *,
        partition_racks: PartitionRacks | None = None,
    ) -> Assignment:
        """``partition_racks``: the racks of each partition's replicas; assignors that are
        not rack-aware ignore them."""
        ...


def sorted_members(subscriptions: dict[str, MemberSubscription]) -> list[MemberSubscription]:
    """Java orders members by group.instance.id when set, else by member id."""
    return sorted(
        subscriptions.values(),
        key=lambda m: (m.group_instance_id is None, m.group_instance_id or "", m.member_id),
    )
