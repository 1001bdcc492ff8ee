"""Kafka's classic consumer-group protocol as a sans-IO state machine.

The coordinator never blocks: a JoinGroup or SyncGroup that must wait is *parked* with
an opaque handle supplied by the caller, and answered later through the ``deliver``
callback when the rebalance moves on. Time is passed in (``now`` in milliseconds) and
deadlines are enforced by ``tick(now)``, which the network shell calls periodically.

    Empty ──join──► PreparingRebalance ──all joined / timeout──► CompletingRebalance
      ▲                    ▲   │                                        │ leader's SyncGroup
      │ last member leaves │   └──no members left──► Empty              ▼
      └──────────── Stable ◄──────────────────────────────────────── Stable
                    (join with new metadata, leave, expiry → PreparingRebalance)

The rules follow Kafka's GroupCoordinator (classic protocol): member-id-required first
joins (JoinGroup v4+), the initial rebalance delay, static membership (KIP-345),
generation checks on heartbeats, syncs and offset commits.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from partita.coordinator.consumer_protocol import subscription_topics

# Rebalances are logged at INFO, as Kafka's GroupCoordinator logs them: a stuck or
# looping rebalance is the first thing an operator needs to see, and says who it waits for.
log = logging.getLogger(__name__)

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation: int
    member_id: str
    instance_id: str | None
    protocol_type: str | None  # checked against the group's when given (v5+)
    protocol_name: str | None
    assignments: dict[str, bytes]  # the leader's, by member id; empty from the others


@dataclass(slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    version: int = 5


@dataclass(slots=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_waiter: Any = None
    sync_waiter: Any = None
    heartbeat_deadline: int = 0
    is_new: bool = True
    new_member_deadline: int = 0

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    pending_sync: set[str] = field(default_factory=set)
    state_timestamp: int = 0
    join_deadline: int | None = None
    sync_deadline: int | None = None
    initial_delay_active: bool = False
    initial_delay_remaining: int = 0
    new_member_added: bool = False
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str | None:
        candidates = self.candidate_protocols()
        if not candidates:
            return None
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
            if choice not in order:
                order.append(choice)
        return max(order, key=lambda name: votes[name])  # ties: the earliest member's pick

    def subscribed_topics(self) -> set[str] | None:
        """Topics of the consumer protocol subscriptions; None when they cannot be read."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics


Deliver = Callable[[Any, JoinResult | SyncResult], None]


class GroupCoordinator:
    def __init__(
        self,
        deliver: Deliver,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
    ) -> None:
        self.deliver = deliver
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.groups: dict[str, Group] = {}

    # -- helpers -----------------------------------------------------------------

    def _transition(self, group: Group, state: GroupState, now: int) -> None:
        group.state = state
        group.state_timestamp = now

    @staticmethod
    def _validate_member(group: Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if known != member_id:
                return FENCED_INSTANCE_ID
        return NONE if member_id in group.members else UNKNOWN_MEMBER_ID

    def _supports(
        self, group: Group, protocol_type: str, protocols: list[tuple[str, bytes]]
    ) -> bool:
        names = {name for name, _ in protocols}
        if not group.members:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == group.protocol_type and bool(names & group.candidate_protocols())

    def _join_result(self, group: Group, member: Member, leader: str | None = None) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        members = (
            [
                (m.member_id, m.instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            ]
            if is_leader
            else []
        )
        return JoinResult(
            NONE,
            group.generation,
            group.protocol_type,
            group.protocol_name,
            leader if leader is not None else (group.leader_id or ""),
            member.member_id,
            members,
        )

    # -- JoinGroup ---------------------------------------------------------------

    def join(self, req: JoinRequest, handle: Any, now: int) -> JoinResult | None:
        """Answer now (a JoinResult) or park the request and answer through ``deliver``."""
        if not req.group_id:
            return JoinResult(INVALID_GROUP_ID, member_id=req.member_id)
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return JoinResult(INVALID_SESSION_TIMEOUT, member_id=req.member_id)
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return JoinResult(UNKNOWN_MEMBER_ID, member_id=req.member_id)
            group = Group(req.group_id, state_timestamp=now)
            self.groups[req.group_id] = group
        if group.state is GroupState.DEAD:
            return JoinResult(COORDINATOR_NOT_AVAILABLE, member_id=req.member_id)
        if not self._supports(group, req.protocol_type, req.protocols):
            return JoinResult(INCONSISTENT_GROUP_PROTOCOL, member_id=req.member_id)
        if not req.member_id:
            return self._join_unknown(group, req, handle, now)
        return self._join_known(group, req, handle, now)

    def _join_unknown(
        self, group: Group, req: JoinRequest, handle: Any, now: int
    ) -> JoinResult | None:
        if req.instance_id is not None:
            old_id = group.static_members.get(req.instance_id)
            new_id = f"{req.instance_id}-{uuid.uuid4()}"
            if old_id is not None and old_id in group.members:
                return self._replace_static_member(group, req, old_id, new_id, handle, now)
            self._add_member(group, req, new_id, handle, now)
            return None
        new_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.version >= 4:
            # KIP-394: hand out an id first, so that a client that never comes back
            # leaves no member behind to wait for.
            group.pending_members[new_id] = now + req.session_timeout_ms
            return JoinResult(MEMBER_ID_REQUIRED, member_id=new_id)
        self._add_member(group, req, new_id, handle, now)
        return None

    def _join_known(
        self, group: Group, req: JoinRequest, handle: Any, now: int
    ) -> JoinResult | None:
        if req.member_id in group.pending_members:
            del group.pending_members[req.member_id]
            self._add_member(group, req, req.member_id, handle, now)
            return None
        error = self._validate_member(group, req.member_id, req.instance_id)
        if error:
            return JoinResult(error, member_id=req.member_id)
        member = group.members[req.member_id]
        same = member.protocols == req.protocols
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, req, handle)
            self._maybe_complete_join(group, now)
            return None
        if group.state is GroupState.COMPLETING_REBALANCE:
            if same:
                return self._join_result(group, member)
            self._update_member(member, req, handle)
            self._prepare_rebalance(
                group, now, f"member {member.member_id} rejoined with new metadata"
            )
            return None
        if group.state is GroupState.STABLE:
            if member.member_id == group.leader_id or not same:
                self._update_member(member, req, handle)
                why = "the leader rejoined" if same else "a member rejoined with new metadata"
                self._prepare_rebalance(group, now, f"{why} ({member.member_id})")
                return None
            member.heartbeat_deadline = now + member.session_timeout_ms
            return self._join_result(group, member)
        return JoinResult(UNKNOWN_MEMBER_ID, member_id=req.member_id)

    @staticmethod
    def _update_member(member: Member, req: JoinRequest, handle: Any) -> None:
        member.protocols = list(req.protocols)
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.join_waiter = handle

    def _add_member(
        self, group: Group, req: JoinRequest, member_id: str, handle: Any, now: int
    ) -> None:
        member = Member(
            member_id,
            req.instance_id,
            req.client_id,
            req.client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            join_waiter=handle,
            heartbeat_deadline=now + req.session_timeout_ms,
            new_member_deadline=now + NEW_MEMBER_JOIN_TIMEOUT_MS,
        )
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static_members[req.instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        if group.state is GroupState.PREPARING_REBALANCE and group.initial_delay_active:
            group.new_member_added = True
        self._prepare_rebalance(group, now, f"member {member_id} joined")

    def _replace_static_member(
        self, group: Group, req: JoinRequest, old_id: str, new_id: str, handle: Any, now: int
    ) -> JoinResult | None:
        member = group.members.pop(old_id)
        if member.join_waiter is not None:
            self.deliver(member.join_waiter, JoinResult(FENCED_INSTANCE_ID, member_id=old_id))
        if member.sync_waiter is not None:
            self.deliver(member.sync_waiter, SyncResult(FENCED_INSTANCE_ID))
        member.join_waiter = member.sync_waiter = None
        old_leader = group.leader_id
        member.member_id = new_id
        group.members[new_id] = member
        group.static_members[req.instance_id or ""] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._update_member(member, req, None)
        member.heartbeat_deadline = now + member.session_timeout_ms
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            # KIP-345: a static member that restarts gets its old assignment back without
            # a rebalance. It is told the leader from before the restart, so a restarted
            # leader does not run the assignor.
            result = self._join_result(group, member, leader=old_leader)
            result.members = []
            return result
        member.join_waiter = handle
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
        else:
            self._prepare_rebalance(group, now, f"static member {new_id} replaced {old_id}")
        return None

    # -- rebalancing -------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, now: int, reason: str) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            log.info(
                "preparing to rebalance group",
                extra={
                    "group": group.group_id,
                    "state": group.state.value,
                    "generation": group.generation,
                    "reason": reason,
                },
            )
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    self.deliver(member.sync_waiter, SyncResult(REBALANCE_IN_PROGRESS))
                    member.sync_waiter = None
        if group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)
            return
        if group.state is GroupState.EMPTY:
            delay = self.initial_rebalance_delay_ms
            group.initial_delay_active = delay > 0
            group.initial_delay_remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.new_member_added = False
            group.join_deadline = now + delay
        else:
            group.initial_delay_active = False
            group.join_deadline = now + group.rebalance_timeout_ms
        group.pending_sync.clear()
        group.sync_deadline = None
        self._transition(group, GroupState.PREPARING_REBALANCE, now)
        self._maybe_complete_join(group, now)

    def _maybe_complete_join(self, group: Group, now: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.initial_delay_active:
            return
        everyone = all(m.join_waiter is not None for m in group.members.values())
        if everyone and not group.pending_members:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: int) -> None:
        for member in list(group.members.values()):
            if member.join_waiter is None and member.instance_id is None:
                self._remove_member(
                    group, member.member_id, now, "did not rejoin in time", rebalance=False
                )
        leader = group.members.get(group.leader_id or "")
        if group.members and (leader is None or leader.join_waiter is None):
            joined = [m for m in group.members.values() if m.join_waiter is not None]
            if not joined:
                group.join_deadline = now + group.rebalance_timeout_ms
                return
            group.leader_id = joined[0].member_id
        group.generation += 1
        group.join_deadline = None
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            self._transition(group, GroupState.EMPTY, now)
            return
        group.protocol_name = group.select_protocol()
        self._transition(group, GroupState.COMPLETING_REBALANCE, now)
        log.info(
            "stabilized group",
            extra={
                "group": group.group_id,
                "generation": group.generation,
                "protocol": group.protocol_name,
                "leader": group.leader_id,
                "members": len(group.members),
            },
        )
        for member in group.members.values():
            if member.join_waiter is not None:
                waiter, member.join_waiter = member.join_waiter, None
                member.is_new = False
                member.heartbeat_deadline = now + member.session_timeout_ms
                self.deliver(waiter, self._join_result(group, member))
        group.pending_sync = set(group.members)
        group.sync_deadline = now + group.rebalance_timeout_ms

    def _remove_member(
        self, group: Group, member_id: str, now: int, reason: str, *, rebalance: bool = True
    ) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        log.info(
            "removing member from group",
            extra={"group": group.group_id, "member": member_id, "reason": reason},
        )
        if member.join_waiter is not None:
            self.deliver(member.join_waiter, JoinResult(UNKNOWN_MEMBER_ID, member_id=member_id))
        if member.sync_waiter is not None:
            self.deliver(member.sync_waiter, SyncResult(UNKNOWN_MEMBER_ID))
        if (
            member.instance_id is not None
            and group.static_members.get(member.instance_id) == member_id
        ):
            del group.static_members[member.instance_id]
        group.pending_sync.discard(member_id)
        if group.leader_id == member_id:
            group.leader_id = next(iter(group.members), None)
        if not rebalance:
            return
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, f"member {member_id} left: {reason}")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)

    # -- SyncGroup and Heartbeat -------------------------------------------------

    def sync(self, request: SyncRequest, handle: Any, now: int) -> SyncResult | None:
        group_id, member_id, generation = request.group_id, request.member_id, request.generation
        instance_id, assignments = request.instance_id, request.assignments
        protocol_type, protocol_name = request.protocol_type, request.protocol_name
        if not group_id:
            return SyncResult(INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(UNKNOWN_MEMBER_ID)
        if group.state is GroupState.DEAD:
            return SyncResult(COORDINATOR_NOT_AVAILABLE)
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return SyncResult(error)
        if generation != group.generation:
            return SyncResult(ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return SyncResult(UNKNOWN_MEMBER_ID)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(REBALANCE_IN_PROGRESS)
        member.heartbeat_deadline = now + member.session_timeout_ms
        if group.state is GroupState.STABLE:
            return SyncResult(NONE, member.assignment, group.protocol_type, group.protocol_name)
        member.sync_waiter = handle
        group.pending_sync.discard(member_id)
        if member_id == group.leader_id:
            log.info(
                "assignment received from the leader",
                extra={"group": group_id, "generation": generation, "members": len(group.members)},
            )
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._transition(group, GroupState.STABLE, now)
            group.sync_deadline = None
            group.pending_sync.clear()
            for m in group.members.values():
                if m.sync_waiter is not None:
                    waiter, m.sync_waiter = m.sync_waiter, None
                    self.deliver(
                        waiter,
                        SyncResult(NONE, m.assignment, group.protocol_type, group.protocol_name),
                    )
        return None

    def heartbeat(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None, now: int
    ) -> int:
        group = self.groups.get(group_id)
        if not group_id:
            return INVALID_GROUP_ID
        if group is None:
            return UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation:
            return ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        return NONE

    def leave(self, group_id: str, members: list[tuple[str, str | None]], now: int) -> list[int]:
        group = self.groups.get(group_id)
        if group is None:
            return [UNKNOWN_MEMBER_ID] * len(members)
        results = []
        for given_id, instance_id in members:
            member_id = given_id
            if not member_id and instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append(UNKNOWN_MEMBER_ID)
                    continue
                member_id = known
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                self._maybe_complete_join(group, now)
                results.append(NONE)
                continue
            else:
                error = self._validate_member(group, member_id, instance_id)
                if error:
                    results.append(error)
                    continue
            self._remove_member(group, member_id, now, "LeaveGroup")
            results.append(NONE)
        return results

    # -- time --------------------------------------------------------------------

    def tick(self, now: int) -> None:
        """Enforce every deadline that has passed."""
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now >= deadline:
                    del group.pending_members[member_id]
                    self._maybe_complete_join(group, now)
            for member in list(group.members.values()):
                waiting = member.join_waiter is not None or member.sync_waiter is not None
                expired = (
                    member.is_new
                    and member.join_waiter is not None
                    and now >= member.new_member_deadline
                )
                if expired:
                    self._remove_member(group, member.member_id, now, "new member join timed out")
                elif not waiting and now >= member.heartbeat_deadline:
                    self._remove_member(group, member.member_id, now, "session timed out")
            if (
                group.state is GroupState.PREPARING_REBALANCE
                and group.join_deadline is not None
                and now >= group.join_deadline
            ):
                if (
                    group.initial_delay_active
                    and group.new_member_added
                    and group.initial_delay_remaining > 0
                ):
                    delay = min(self.initial_rebalance_delay_ms, group.initial_delay_remaining)
                    group.initial_delay_remaining = max(group.initial_delay_remaining - delay, 0)
                    group.new_member_added = False
                    group.join_deadline = now + delay
                else:
                    group.initial_delay_active = False
                    self._complete_join(group, now)
            if (
                group.state is GroupState.COMPLETING_REBALANCE
                and group.sync_deadline is not None
                and now >= group.sync_deadline
            ):
                for member_id in list(group.pending_sync):
                    self._remove_member(
                        group, member_id, now, "no SyncGroup in time", rebalance=False
                    )
                group.pending_sync.clear()
                self._prepare_rebalance(group, now, "members missed the sync deadline")

    # -- offsets -----------------------------------------------------------------

    def validate_offset_commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        now: int,
        version: int,
    ) -> int:
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                self.groups[group_id] = Group(group_id, state_timestamp=now)
                return NONE
            return GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is GroupState.EMPTY:
            return NONE
        if generation >= 0 or member_id or instance_id is not None:
            error = self._validate_member(group, member_id, instance_id)
            if error:
                return error
            if generation != group.generation:
                return ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            return REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is not None:
            member.heartbeat_deadline = now + member.session_timeout_ms
        return NONE

    def store_offset(
        self, group_id: str, topic: str, partition: int, value: CommittedOffset
    ) -> None:
        group = self.groups.get(group_id)
        if group is None:
            group = Group(group_id, state_timestamp=value.commit_timestamp)
            self.groups[group_id] = group
        group.offsets[(topic, partition)] = value

    def forget_offset(self, group_id: str, topic: str, partition: int) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            group.offsets.pop((topic, partition), None)

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return dict(group.offsets) if group else {}

    def delete_group(self, group_id: str, now: int) -> tuple[int, list[tuple[str, int]]]:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, []
        if group.state is not GroupState.EMPTY:
            return NON_EMPTY_GROUP, []
        removed = list(group.offsets)
        self._transition(group, GroupState.DEAD, now)
        del self.groups[group_id]
        return NONE, removed

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, {}
        if group.state is not GroupState.EMPTY and group.protocol_type != "consumer":
            return NON_EMPTY_GROUP, {}
        subscribed = set() if group.state is GroupState.EMPTY else group.subscribed_topics()
        results: dict[tuple[str, int], int] = {}
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                results[tp] = GROUP_SUBSCRIBED_TO_TOPIC
            else:
                group.offsets.pop(tp, None)
                results[tp] = NONE
        return NONE, results

    def expire_offsets(self, now: int, retention_ms: int) -> list[tuple[str, str, int]]:
        """Drop offsets past offsets.retention.minutes (KIP-211); return (group, topic,
        partition) of each, so that tombstones can be written. Empty groups with no
        offsets left are removed."""
        expired: list[tuple[str, str, int]] = []
        for group in list(self.groups.values()):
            if group.state is GroupState.EMPTY:
                simple = group.protocol_type is None
                for tp, value in list(group.offsets.items()):
                    base = (
                        value.commit_timestamp
                        if simple
                        else max(group.state_timestamp, value.commit_timestamp)
                    )
                    due = (
                        value.expire_timestamp
                        if value.expire_timestamp is not None
                        else base + retention_ms
                    )
                    if now >= due:
                        del group.offsets[tp]
                        expired.append((group.group_id, tp[0], tp[1]))
                if not group.offsets and not group.members and not group.pending_members:
                    del self.groups[group.group_id]
            elif group.state is GroupState.STABLE and group.protocol_type == "consumer":
                subscribed = group.subscribed_topics()
                if subscribed is None:
                    continue
                for tp, value in list(group.offsets.items()):
                    if tp[0] not in subscribed and now >= value.commit_timestamp + retention_ms:
                        del group.offsets[tp]
                        expired.append((group.group_id, tp[0], tp[1]))
        return expired
