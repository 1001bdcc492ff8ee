"""Consumer group administration: list, describe and delete groups, read and alter their
committed offsets. Each call goes to the group's coordinator, found with FindCoordinator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetFetchRequest

from partita.client.cluster import Cluster
from partita.client.group_member import GroupError, find_coordinator, offset_commit_request
from partita.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptRecordError,
    NotCoordinatorError,
)
from partita.protocol.consumer_protocol import decode_assignment

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription] = field(default_factory=list)


# The group's coordinator is loading it, or moving (its broker failed over): asked again,
# as Kafka's admin client does, for up to default.api.timeout.ms.
_COORDINATOR_MOVING = {
    CoordinatorLoadInProgressError.code,
    CoordinatorNotAvailableError.code,
    NotCoordinatorError.code,
}
COORDINATOR_WAIT_S = 60.0
RETRY_BACKOFF_S = 0.2


async def _ask_coordinator(
    cluster: Cluster,
    group_id: str,
    request: Any,
    code_of: Callable[[Any], int] = lambda _response: 0,
) -> Any:
    """One request to the group's coordinator, on a connection used for it alone; asked
    again while the coordinator is moving (found by FindCoordinator, or answered by
    ``code_of(response)``)."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        try:
            coordinator = await find_coordinator(cluster, group_id)
        except GroupError as exc:
            if exc.code not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
        else:
            try:
                response = await coordinator.request(request)
            finally:
                await coordinator.close()
            if code_of(response) not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                return response
        await asyncio.sleep(RETRY_BACKOFF_S)


async def list_groups(cluster: Cluster) -> list[GroupListing]:
    """Every group on every broker (each broker lists the groups it coordinates)."""
    await cluster.refresh([])
    found: dict[str, GroupListing] = {}
    for node in sorted(cluster.brokers):
        connection = await cluster.connection(node)
        response = await connection.request(ListGroupsRequest(version=4, states_filter=[]))
        if response.error_code:
            raise GroupError(response.error_code, f"broker {node} cannot list groups")
        for group in response.groups:
            found[group.group_id] = GroupListing(
                group.group_id, group.protocol_type, group.group_state
            )
    return sorted(found.values(), key=lambda g: g.group_id)


def _assignment(raw: bytes | None, protocol_type: str) -> tuple[TopicPartition, ...]:
    if not raw or protocol_type != "consumer":
        return ()
    try:
        return decode_assignment(raw).partitions
    except CorruptRecordError:  # not the standard layout: show no partitions
        return ()


async def describe_group(cluster: Cluster, group_id: str) -> GroupDescription:
    response = await _ask_coordinator(
        cluster,
        group_id,
        DescribeGroupsRequest(version=5, groups=[group_id], include_authorized_operations=False),
        lambda r: r.groups[0].error_code,
    )
    group = response.groups[0]
    if group.error_code:
        raise GroupError(group.error_code, f"cannot describe group {group_id!r}")
    members = [
        MemberDescription(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            _assignment(m.member_assignment, group.protocol_type),
        )
        for m in group.members
    ]
    return GroupDescription(
        group_id, group.group_state, group.protocol_type, group.protocol_data, members
    )


async def delete_groups(cluster: Cluster, group_ids: list[str]) -> dict[str, int]:
    """Delete empty groups; returns the error code per group (0: deleted)."""
    out: dict[str, int] = {}
    for group_id in group_ids:
        response = await _ask_coordinator(
            cluster,
            group_id,
            DeleteGroupsRequest(version=2, groups_names=[group_id]),
            lambda r: r.results[0].error_code,
        )
        for result in response.results:
            out[result.group_id] = result.error_code
    return out


async def group_offsets(cluster: Cluster, group_id: str) -> dict[TopicPartition, int]:
    """Every committed offset of the group."""
    response = await _ask_coordinator(
        cluster,
        group_id,
        OffsetFetchRequest(
            version=8,
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)],
            require_stable=False,
        ),
        lambda r: r.groups[0].error_code,
    )
    group: Any = response.groups[0]
    if group.error_code:
        raise GroupError(group.error_code, f"cannot read offsets of group {group_id!r}")
    return {
        (topic.name, p.partition_index): p.committed_offset
        for topic in group.topics
        for p in topic.partitions
        if p.committed_offset >= 0
    }


async def alter_group_offsets(
    cluster: Cluster, group_id: str, offsets: dict[TopicPartition, int]
) -> None:
    """Commit ``offsets`` for a group with no active members, as Kafka's admin does
    (generation -1, no member id); an active group refuses with UNKNOWN_MEMBER_ID."""
    response = await _ask_coordinator(
        cluster,
        group_id,
        offset_commit_request(group_id, offsets),
        lambda r: next((p.error_code for t in r.topics for p in t.partitions), 0),
    )
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code:
                raise GroupError(
                    p.error_code,
                    f"cannot set the offset of {topic.name}-{p.partition_index} for group "
                    f"{group_id!r} (is the group still active?)",
                )
