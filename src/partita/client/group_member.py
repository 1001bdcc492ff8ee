"""A consumer's membership in a group: join, sync, heartbeat, commit, leave.

The leader runs the chosen assignor on every member's subscription; eager assignors
revoke everything before a rebalance, cooperative ones revoke only what moves and rejoin
once more so the moved partitions can be handed out (KIP-429).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from partita.client.assignors.base import Assignor, MemberSubscription, RebalanceProtocol
from partita.client.assignors.range_roundrobin import RangeAssignor, RoundRobinAssignor
from partita.client.cluster import Cluster
from partita.client.connection import BrokerConnection
from partita.client.error_names import describe_error_code
from partita.errors import KafkaError
from partita.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION = 79, 25, 22
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID = 27, 82
COORDINATOR_ERRORS = {14, 15, 16}


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> Any: ...

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> Any: ...

    def on_partitions_lost(self, lost: list[TopicPartition]) -> Any: ...


def assignor_for(name: str) -> Assignor:
    if name == "range":
        return RangeAssignor()
    if name == "roundrobin":
        return RoundRobinAssignor()
    if name in ("sticky", "cooperative-sticky"):
        from partita.client.assignors import sticky  # noqa: PLC0415 - large, loaded on use

        return sticky.StickyAssignor() if name == "sticky" else sticky.CooperativeStickyAssignor()
    raise ValueError(
        f"unknown assignor {name!r}: use range, roundrobin, sticky or cooperative-sticky"
    )


class GroupError(KafkaError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator's key types


async def find_coordinator(
    cluster: Cluster, key: str, key_type: int = GROUP_KEY
) -> BrokerConnection:
    """A connection to the broker that coordinates ``key``, a group id or (``key_type``
    TRANSACTION_KEY) a transactional id (FindCoordinator)."""
    connection = await cluster.any_connection()
    response = await connection.request(
        FindCoordinatorRequest(version=3, key=key, key_type=key_type)
    )
    if response.error_code:
        kind = "group" if key_type == GROUP_KEY else "transactional id"
        # The reason, not only "none yet": a refused principal must read that it was.
        raise GroupError(
            response.error_code,
            f"no coordinator for {kind} {key!r}: {describe_error_code(response.error_code)}",
        )
    coordinator = BrokerConnection(
        response.host,
        response.port,
        cluster.client_id,
        security=cluster.security,
        tally=cluster.tally,
    )
    await coordinator.connect()
    return coordinator


def offset_commit_request(
    group_id: str,
    offsets: dict[TopicPartition, int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
) -> Any:
    """OffsetCommit v8; generation -1 and no member id is the admin form, for a group
    without active members."""
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
        )
    return OffsetCommitRequest(
        version=8,
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
            for t, ps in topics.items()
        ],
    )


class GroupMember:
    def __init__(
        self,
        cluster: Cluster,
        group_id: str,
        *,
        assignors: Sequence[str] = ("range",),
        session_timeout_ms: int = 45_000,
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 3_000,
        group_instance_id: str | None = None,
        listener: RebalanceListener | None = None,
        rack: str | None = None,
    ) -> None:
        self.cluster = cluster
        self.rack = rack
        self.group_id = group_id
        self.assignors = [assignor_for(n) for n in assignors]
        self.cooperative = all(
            RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in self.assignors
        )
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.instance_id = group_instance_id
        self.listener = listener
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.owned: list[TopicPartition] = []
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None
        self.needs_rejoin = True
        self._coordinator: BrokerConnection | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._leaving = False

    # -- subscription --------------------------------------------------------------

    def subscribe(self, topics: Sequence[str] | None = None, pattern: str | None = None) -> None:
        self.topics = list(topics or [])
        self.pattern = re.compile(pattern) if pattern else None
        self.needs_rejoin = True

    async def _subscribed_topics(self) -> list[str]:
        if self.pattern is None:
            return sorted(self.topics)
        await self.cluster.refresh(None, auto_create=False)
        return sorted(
            t for t in self.cluster.topics if self.pattern.fullmatch(t) and not t.startswith("__")
        )

    # -- coordinator ---------------------------------------------------------------

    async def coordinator(self) -> BrokerConnection:
        if self._coordinator is not None and not self._coordinator.closed:
            return self._coordinator
        self._coordinator = await find_coordinator(self.cluster, self.group_id)
        return self._coordinator

    # -- join / sync ---------------------------------------------------------------

    async def ensure_joined(self) -> list[TopicPartition] | None:
        """Rejoin if needed; returns the new assignment, or None if nothing changed."""
        if not self.needs_rejoin:
            return None
        while True:
            try:
                assignment = await self._join_and_sync()
            except GroupError as exc:
                if exc.code in COORDINATOR_ERRORS:
                    self._coordinator = None
                elif exc.code in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION):
                    self._lose_partitions()
                    if exc.code == UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                elif exc.code == FENCED_INSTANCE_ID or exc.code != REBALANCE_IN_PROGRESS:
                    raise
                await asyncio.sleep(0.1)
                continue
            self.needs_rejoin = False
            self._start_heartbeat()
            return assignment

    async def _join_and_sync(self) -> list[TopicPartition]:
        topics = await self._subscribed_topics()
        previous = list(self.owned)  # what the sticky assignors' user data remembers
        if not self.cooperative and self.owned:
            self._revoke(list(self.owned))
        coordinator = await self.coordinator()
        protocols = [
            JoinGroupRequest.JoinGroupRequestProtocol(
                name=a.name,
                metadata=encode_subscription(
                    Subscription(
                        tuple(topics),
                        a.subscription_user_data(previous, self.generation),
                        tuple(self.owned),
                        self.generation,
                        self.rack,
                    )
                ),
            )
            for a in self.assignors
        ]
        while True:
            join = await coordinator.request(
                JoinGroupRequest(
                    version=7,
                    group_id=self.group_id,
                    session_timeout_ms=self.session_timeout_ms,
                    rebalance_timeout_ms=self.rebalance_timeout_ms,
                    member_id=self.member_id,
                    group_instance_id=self.instance_id,
                    protocol_type="consumer",
                    protocols=protocols,
                )
            )
            if join.error_code == MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code:
                raise GroupError(join.error_code, f"JoinGroup failed with {join.error_code}")
            break
        self.member_id, self.generation = join.member_id, join.generation_id
        self.protocol = join.protocol_name
        assignments = []
        if join.leader == self.member_id and join.members:
            plan = await self._assign(join.protocol_name, join.members)
            assignments = [
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=m, assignment=encode_assignment(Assignment(tuple(parts)))
                )
                for m, parts in plan.items()
            ]
        sync = await coordinator.request(
            SyncGroupRequest(
                version=5,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type="consumer",
                protocol_name=self.protocol,
                assignments=assignments,
            )
        )
        if sync.error_code:
            raise GroupError(sync.error_code, f"SyncGroup failed with {sync.error_code}")
        new = list(decode_assignment(bytes(sync.assignment)).partitions)
        return self._apply(new)

    async def _assign(self, protocol: str, members: Any) -> dict[str, list[TopicPartition]]:
        assignor = next(a for a in self.assignors if a.name == protocol)
        subscriptions: dict[str, MemberSubscription] = {}
        for member in members:
            sub = decode_subscription(bytes(member.metadata))
            subscriptions[member.member_id] = MemberSubscription(
                member.member_id,
                sub.topics,
                sub.owned_partitions,
                sub.generation,
                sub.rack,
                member.group_instance_id,
                sub.user_data,
            )
        wanted = sorted({t for s in subscriptions.values() for t in s.topics})
        await self.cluster.refresh(wanted, auto_create=False)
        counts = {
            t: self.cluster.topics[t].partitions
            for t in wanted
            if t in self.cluster.topics and not self.cluster.topics[t].error_code
        }
        # Replica racks make the sticky assignors rack-aware for members with a rack.
        racks = self.cluster.replica_racks(list(counts))
        return assignor.assign(counts, subscriptions, partition_racks=racks)

    def _apply(self, new: list[TopicPartition]) -> list[TopicPartition]:
        if self.cooperative:
            revoked = [tp for tp in self.owned if tp not in new]
            added = [tp for tp in new if tp not in self.owned]
            if revoked:
                self._revoke(revoked)
                self.needs_rejoin = True  # KIP-429: rejoin so the revoked ones can move
            self.owned = list(new)
            if added and self.listener is not None:
                self.listener.on_partitions_assigned(added)
        else:
            self.owned = list(new)
            if self.listener is not None:
                self.listener.on_partitions_assigned(list(new))
        return list(self.owned)

    def _revoke(self, partitions: list[TopicPartition]) -> None:
        if self.listener is not None and partitions:
            self.listener.on_partitions_revoked(partitions)
        self.owned = [tp for tp in self.owned if tp not in partitions]

    def _lose_partitions(self) -> None:
        lost, self.owned = self.owned, []
        self.generation = -1
        if self.listener is not None and lost:
            self.listener.on_partitions_lost(lost)

    # -- heartbeats ----------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        self._leaving = False
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._heartbeat_forever())

    async def _heartbeat_forever(self) -> None:
        # Stops on cancel, and also on ``_leaving``: a cancel can still be lost inside a
        # library call, and a heartbeat that outlives leave() would keep stop() waiting.
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if self._leaving:
                return
            if self.needs_rejoin:
                continue
            try:
                coordinator = await self.coordinator()
                response = await coordinator.request(
                    HeartbeatRequest(
                        version=4,
                        group_id=self.group_id,
                        generation_id=self.generation,
                        member_id=self.member_id,
                        group_instance_id=self.instance_id,
                    )
                )
            except Exception:
                self._coordinator = None
                continue
            if response.error_code in (
                REBALANCE_IN_PROGRESS,
                ILLEGAL_GENERATION,
                UNKNOWN_MEMBER_ID,
            ):
                if response.error_code != REBALANCE_IN_PROGRESS:
                    self._lose_partitions()
                    if response.error_code == UNKNOWN_MEMBER_ID:
                        self.member_id = ""
                self.needs_rejoin = True
            elif response.error_code in COORDINATOR_ERRORS:
                self._coordinator = None

    # -- offsets -------------------------------------------------------------------

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        coordinator = await self.coordinator()
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions:
            topics.setdefault(topic, []).append(partition)
        response = await coordinator.request(
            OffsetFetchRequest(
                version=8,
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(
                        group_id=self.group_id,
                        topics=[
                            OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                                name=t, partition_indexes=ps
                            )
                            for t, ps in topics.items()
                        ],
                    )
                ],
                require_stable=False,
            )
        )
        out = {}
        for topic in response.groups[0].topics:
            for p in topic.partitions:
                if p.committed_offset >= 0:
                    out[(topic.name, p.partition_index)] = p.committed_offset
        return out

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        coordinator = await self.coordinator()
        response = await coordinator.request(
            offset_commit_request(
                self.group_id,
                offsets,
                generation=self.generation,
                member_id=self.member_id,
                instance_id=self.instance_id,
            )
        )
        errors = [p.error_code for t in response.topics for p in t.partitions if p.error_code]
        if errors:
            if errors[0] in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID):
                self.needs_rejoin = True
            raise GroupError(errors[0], f"offset commit failed with error {errors[0]}")

    async def leave(self) -> None:
        self._leaving = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
        if self.member_id and self.instance_id is None:
            with contextlib.suppress(Exception):
                coordinator = await self.coordinator()
                await coordinator.request(
                    LeaveGroupRequest(
                        version=4,
                        group_id=self.group_id,
                        members=[
                            LeaveGroupRequest.MemberIdentity(
                                member_id=self.member_id, group_instance_id=None
                            )
                        ],
                    )
                )
        if self._coordinator is not None:
            await self._coordinator.close()
