"""The Java client's RangeAssignor ("range") and RoundRobinAssignor ("roundrobin")."""

from __future__ import annotations

from collections.abc import Sequence

from partita.client.assignors.base import (
    Assignment,
    MemberSubscription,
    PartitionRacks,
    RebalanceProtocol,
    TopicPartition,
    sorted_members,
)


class RangeAssignor:
    """Per topic: members in order get consecutive ranges; the first ``n % m`` members
    get one partition more."""

    name = "range"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, MemberSubscription],
        *,
        partition_racks: PartitionRacks | None = None,  # not rack-aware (Java's is, since 3.5)
    ) -> Assignment:
        assignment: Assignment = {member: [] for member in subscriptions}
        ordered = sorted_members(subscriptions)
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            members = [m.member_id for m in ordered if topic in m.topics]
            if not members or count <= 0:
                continue
            per_member, extra = divmod(count, len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                assignment[member] += [(topic, p) for p in range(start, start + length)]
        return assignment


class RoundRobinAssignor:
    """All partitions in (topic, partition) order dealt to members in order, skipping
    members not subscribed to the partition's topic."""

    name = "roundrobin"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, owned: Sequence[TopicPartition], generation: int
    ) -> bytes | None:
        return None

    def assign(
        self,
        partitions_per_topic: dict[str, int],
        subscriptions: dict[str, MemberSubscription],
        *,
        partition_racks: PartitionRacks | None = None,  # not rack-aware (Java's is, since 3.5)
    ) -> Assignment:
        assignment: Assignment = {member: [] for member in subscriptions}
        ordered = sorted_members(subscriptions)
        if not ordered:
            return assignment
        subscribed = {t for m in ordered for t in m.topics}
        partitions: list[TopicPartition] = [
            (topic, p)
            for topic in sorted(subscribed & set(partitions_per_topic))
            for p in range(partitions_per_topic[topic])
        ]
        cursor = 0
        for topic, partition in partitions:
            while topic not in ordered[cursor % len(ordered)].topics:
                cursor += 1
            assignment[ordered[cursor % len(ordered)].member_id].append((topic, partition))
            cursor += 1
        return assignment
