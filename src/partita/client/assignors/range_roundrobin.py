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

Members = list[MemberSubscription]  # in the Java client's order


class _EagerAssignor:
    """What both share: the eager protocol only, no user data, members in the Java
    client's order (``sorted_members``); each deals the partitions its own way."""

    name = ""
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
        self._deal(partitions_per_topic, sorted_members(subscriptions), assignment)
        return assignment

    def _deal(self, counts: dict[str, int], ordered: Members, assignment: Assignment) -> None:
        raise NotImplementedError


class RangeAssignor(_EagerAssignor):
    """Per topic: members in order get consecutive ranges; the first ``n % m`` members
    get one partition more."""

    name = "range"

    def _deal(self, counts: dict[str, int], ordered: Members, assignment: Assignment) -> None:
        for topic in sorted(counts):
            count = counts[topic]
            members = [m.member_id for m in ordered if topic in m.topics]
            if not members or count <= 0:
                continue
            per_member, extra = divmod(count, len(members))
            for i, member in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                assignment[member] += [(topic, p) for p in range(start, start + length)]


class RoundRobinAssignor(_EagerAssignor):
    """All partitions in (topic, partition) order dealt to members in order, skipping
    members not subscribed to the partition's topic."""

    name = "roundrobin"

    def _deal(self, counts: dict[str, int], ordered: Members, assignment: Assignment) -> None:
        if not ordered:
            return
        subscribed = {t for m in ordered for t in m.topics}
        partitions: list[TopicPartition] = [
            (topic, p) for topic in sorted(subscribed & set(counts)) for p in range(counts[topic])
        ]
        cursor = 0
        for topic, partition in partitions:
            while topic not in ordered[cursor % len(ordered)].topics:
                cursor += 1
            assignment[ordered[cursor % len(ordered)].member_id].append((topic, partition))
            cursor += 1
