"""Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete.

A group's coordinator is the leader of its ``__consumer_offsets`` partition
(``server/group_service.py``); every request for a group this broker does not coordinate is
answered NOT_COORDINATOR, and clients find the coordinator again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from partita.coordinator.group_machine import (
    INVALID_GROUP_ID,
    NONE,
    CommittedOffset,
    GroupState,
    JoinRequest,
    SyncRequest,
)
from partita.errors import (
    GroupIdNotFoundError,
    InvalidRequestError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from partita.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from partita.security.acl import ResourceType
from partita.server.access import Access
from partita.server.broker import Broker
from partita.server.clocks import now_ms, steady_ms
from partita.server.handlers.metadata import reachable_brokers
from partita.server.request_context import RequestContext

MAX_METADATA_BYTES = 4096
GROUP_KEY, TRANSACTION_KEY = 0, 1


# -- FindCoordinator -------------------------------------------------------------------


async def handle_find_coordinator(
    broker: Broker, context: RequestContext, request: FindCoordinatorRequest
) -> Any:
    key_type = request.key_type if context.api_version >= 1 else GROUP_KEY
    found: list[tuple[str, int, tuple[str, int] | None, int]]
    message: str | None = None
    keys = _keys(context, request)
    denied_of: Callable[..., int] | None
    ensure: Callable[[], Awaitable[None]] | None
    coordinator_of: Callable[[str], int] | None
    if key_type == GROUP_KEY:
        denied_of = context.access.group
        ensure, coordinator_of = broker.groups.ensure_offsets_topic, broker.groups.coordinator_of
    elif key_type == TRANSACTION_KEY:
        denied_of = context.access.transactional_id
        ensure = broker.transactions.ensure_state_topic
        coordinator_of = broker.transactions.coordinator_of
    else:
        denied_of, ensure, coordinator_of = None, None, None
    if denied_of is None or ensure is None or coordinator_of is None:
        found = [(key, -1, None, InvalidRequestError.code) for key in keys]
        message = f"unknown coordinator key type {key_type}"
    else:
        if any(not denied_of(key, log_denied=False) for key in keys):
            # Only for a client that may use some key: nobody else makes the topic exist.
            await ensure()
        by_id = {b.node_id: address for b, address in reachable_brokers(broker, context.listener)}
        found = []
        for key in keys:
            denied = denied_of(key)
            if denied:
                found.append((key, -1, None, denied))
                continue
            coordinator = coordinator_of(key)
            node = by_id.get(coordinator)
            found.append((key, coordinator if node else -1, node, NONE if node else 15))
    if context.api_version >= 4:
        coordinators = [
            FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=node_id,
                host=node[0] if node else "",
                port=node[1] if node else -1,
                error_code=error,
                error_message=message if error else None,
            )
            for key, node_id, node, error in found
        ]
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    _key, node_id, node, error = found[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0,
        error_code=error,
        error_message=message if error else None,
        node_id=node_id,
        host=node[0] if node else "",
        port=node[1] if node else -1,
    )


def _keys(context: RequestContext, request: Any) -> list[str]:
    if context.api_version >= 4:
        return list(request.coordinator_keys)
    return [request.key]


# -- membership ------------------------------------------------------------------------


async def handle_join_group(
    broker: Broker, context: RequestContext, request: JoinGroupRequest
) -> Any:
    version = context.api_version
    join = JoinRequest(
        group_id=request.group_id or "",
        member_id=request.member_id or "",
        instance_id=request.group_instance_id if version >= 5 else None,
        client_id=context.client_id or "",
        client_host="/" + (context.client_host or "127.0.0.1"),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        ),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        version=version,
    )
    result = await broker.groups.join(join)
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # null is only valid from v7
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=False,
        member_id=result.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m, group_instance_id=i, metadata=meta
            )
            for m, i, meta in result.members
        ],
    )


async def handle_sync_group(
    broker: Broker, context: RequestContext, request: SyncGroupRequest
) -> Any:
    version = context.api_version
    assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
    result = await broker.groups.sync(
        SyncRequest(
            request.group_id or "",
            request.generation_id,
            request.member_id,
            request.group_instance_id if version >= 3 else None,
            request.protocol_type if version >= 5 else None,
            request.protocol_name if version >= 5 else None,
            assignments,
        )
    )
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def handle_heartbeat(broker: Broker, context: RequestContext, request: HeartbeatRequest) -> Any:
    if not broker.groups.coordinates(request.group_id or ""):
        return HeartbeatResponse(throttle_time_ms=0, error_code=NotCoordinatorError.code)
    error = broker.groups.core.heartbeat(
        request.group_id or "",
        request.generation_id,
        request.member_id,
        request.group_instance_id if context.api_version >= 3 else None,
        steady_ms(),
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


def handle_leave_group(broker: Broker, context: RequestContext, request: LeaveGroupRequest) -> Any:
    if context.api_version >= 3:
        members = [(m.member_id or "", m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id or "", None)]
    if not request.group_id:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=INVALID_GROUP_ID, members=[])
    if not broker.groups.coordinates(request.group_id):
        return LeaveGroupResponse(
            throttle_time_ms=0, error_code=NotCoordinatorError.code, members=[]
        )
    codes = broker.groups.core.leave(request.group_id, members, steady_ms())
    if context.api_version >= 3:
        return LeaveGroupResponse(
            throttle_time_ms=0,
            error_code=NONE,
            members=[
                LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=c)
                for (m, i), c in zip(members, codes, strict=True)
            ],
        )
    return LeaveGroupResponse(throttle_time_ms=0, error_code=codes[0], members=[])


# -- offsets -----------------------------------------------------------------------------

_CTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CPartition = _CTopic.OffsetCommitResponsePartition


def handle_offset_commit(
    broker: Broker, context: RequestContext, request: OffsetCommitRequest
) -> Any:
    version = context.api_version
    now = now_ms()
    retention = request.retention_time_ms if 2 <= version <= 4 else -1
    codes: dict[tuple[str, int], int] = {}
    valid: list[tuple[str, int, CommittedOffset]] = []
    access = context.access
    group_denied = access.group(request.group_id or "")
    for topic in request.topics:
        known = broker.store.topics.get(topic.name)
        denied = group_denied or access.topic(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if denied:
                codes[tp] = denied
            elif known is None or p.partition_index not in known.partitions:
                codes[tp] = UnknownTopicOrPartitionError.code
            elif len(metadata.encode()) > MAX_METADATA_BYTES:
                codes[tp] = OffsetMetadataTooLargeError.code
            else:
                epoch = p.committed_leader_epoch if version >= 6 else -1
                expire = now + retention if retention >= 0 else None
                valid.append(
                    (
                        tp[0],
                        tp[1],
                        CommittedOffset(p.committed_offset, epoch, metadata, now, expire),
                    )
                )
    # kafka-python decodes a string of length -1 as None even where the schema forbids it.
    group_id: str | None = request.group_id
    if group_denied:
        error, per = NONE, []
    elif group_id is None:
        error, per = INVALID_GROUP_ID, [INVALID_GROUP_ID] * len(valid)
    else:
        error, per = broker.groups.commit(
            group_id,
            request.generation_id_or_member_epoch,
            request.member_id or "",
            request.group_instance_id if version >= 7 else None,
            valid,
            version,
        )
    for (t, index, _), code in zip(valid, per, strict=True):
        codes[(t, index)] = code
    if error != NONE:
        codes = {
            tp: (c if c in (UnknownTopicOrPartitionError.code,) else error)
            for tp, c in codes.items()
        }
    topics: dict[str, list[Any]] = {}
    for (t, index), code in codes.items():
        topics.setdefault(t, []).append(_CPartition(partition_index=index, error_code=code))
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[_CTopic(name=t, partitions=parts) for t, parts in topics.items()],
    )


_Committed = list[tuple[str, list[tuple[int, CommittedOffset | None]]]]


def _fetch_group(access: Access, broker: Broker, group_id: str, topics: Any) -> _Committed:
    """A group's committed offsets, of the topics asked for or of all it has; topics
    the principal may not DESCRIBE are left out of "all", and refused when asked for
    (``_refused_topics``)."""
    committed = broker.groups.core.committed(group_id)
    if topics is None:
        by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
        for (t, p), value in sorted(committed.items()):
            if access.visible_topic(t):
                by_topic.setdefault(t, []).append((p, value))
        return list(by_topic.items())
    return [
        (t.name, [(p, committed.get((t.name, p))) for p in t.partition_indexes])
        for t in topics
        if not access.topic(t.name)
    ]


def _refused_topics(access: Access, topics: Any) -> dict[str, tuple[list[int], int]]:
    """The topics asked for that the principal may not DESCRIBE: partitions, code."""
    refused: dict[str, tuple[list[int], int]] = {}
    for t in topics or ():
        code = access.topic(t.name)
        if code:
            refused[t.name] = (list(t.partition_indexes), code)
    return refused


_FGroup = OffsetFetchResponse.OffsetFetchResponseGroup
_FGroupTopic = _FGroup.OffsetFetchResponseTopics
_FGroupPartition = _FGroupTopic.OffsetFetchResponsePartitions
_FTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FPartition = _FTopic.OffsetFetchResponsePartition


def _committed_entries(
    topic_cls: Any,
    partition_cls: Any,
    entries: _Committed,
    refused: dict[str, tuple[list[int], int]] | None = None,
    unstable: Callable[[str, int], bool] | None = None,
) -> list[Any]:
    """OffsetFetch topics; -1 and empty metadata where nothing is committed. With
    ``unstable`` (the request requires stable offsets, KIP-447), a partition an open
    transaction holds an offset for is answered UNSTABLE_OFFSET_COMMIT: the client asks
    again once that transaction ended, rather than resume from an offset about to move."""
    denied = [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=p,
                    committed_offset=-1,
                    committed_leader_epoch=-1,
                    metadata="",
                    error_code=code,
                )
                for p in indexes
            ],
        )
        for name, (indexes, code) in (refused or {}).items()
    ]
    return denied + [
        topic_cls(
            name=name,
            partitions=[
                _unstable_entry(partition_cls, p)
                if unstable is not None and unstable(name, p)
                else partition_cls(
                    partition_index=p,
                    committed_offset=v.offset if v else -1,
                    committed_leader_epoch=v.leader_epoch if v else -1,
                    metadata=v.metadata if v else "",
                    error_code=NONE,
                )
                for p, v in parts
            ],
        )
        for name, parts in entries
    ]


def _unstable_entry(partition_cls: Any, partition: int) -> Any:
    return partition_cls(
        partition_index=partition,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=UnstableOffsetCommitError.code,
    )


def _stability(broker: Broker, group_id: str, required: bool) -> Callable[[str, int], bool] | None:
    if not required:
        return None
    return lambda topic, partition: broker.groups.has_pending(group_id, topic, partition)


def handle_offset_fetch(
    broker: Broker, context: RequestContext, request: OffsetFetchRequest
) -> Any:
    access = context.access
    if context.api_version >= 8:
        groups = []
        for g in request.groups:
            code = access.group(g.group_id)
            if not code and not broker.groups.coordinates(g.group_id):
                code = NotCoordinatorError.code
            if code:
                groups.append(_FGroup(group_id=g.group_id, error_code=code, topics=[]))
                continue
            entries = _fetch_group(access, broker, g.group_id, g.topics)
            refused = _refused_topics(access, g.topics)
            groups.append(
                _FGroup(
                    group_id=g.group_id,
                    error_code=NONE,
                    topics=_committed_entries(
                        _FGroupTopic,
                        _FGroupPartition,
                        entries,
                        refused,
                        _stability(broker, g.group_id, request.require_stable),
                    ),
                )
            )
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    code = access.group(request.group_id)
    if code and context.api_version < 2:
        # Version 1 has no top-level error: every partition asked about carries it.
        refused = {t.name: (list(t.partition_indexes), code) for t in request.topics or ()}
        return OffsetFetchResponse(
            throttle_time_ms=0, topics=_committed_entries(_FTopic, _FPartition, [], refused)
        )
    if not code and not broker.groups.coordinates(request.group_id):
        code = NotCoordinatorError.code
    if code:
        return OffsetFetchResponse(throttle_time_ms=0, error_code=code, topics=[])
    entries = _fetch_group(access, broker, request.group_id, request.topics)
    refused = _refused_topics(access, request.topics)
    required = context.api_version >= 7 and request.require_stable
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=NONE,
        topics=_committed_entries(
            _FTopic, _FPartition, entries, refused, _stability(broker, request.group_id, required)
        ),
    )


# -- administration --------------------------------------------------------------------


def handle_list_groups(broker: Broker, context: RequestContext, request: ListGroupsRequest) -> Any:
    version = context.api_version
    states = {s.strip().lower() for s in request.states_filter} if version >= 4 else set()
    types = {t.strip().lower() for t in request.types_filter} if version >= 5 else set()
    access = context.access
    # DESCRIBE on the cluster lists every group; else those the principal may DESCRIBE.
    every_group = not access.cluster(log_denied=False)
    listed = []
    for group in broker.groups.core.groups.values():
        if states and group.state.value.lower() not in states:
            continue
        if not every_group and access.group(group.group_id, log_denied=False):
            continue
        if types and "classic" not in types:
            continue
        listed.append(
            ListGroupsResponse.ListedGroup(
                group_id=group.group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
                group_type="classic",
            )
        )
    return ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=listed)


_Described = DescribeGroupsResponse.DescribedGroup
_DescribedMember = _Described.DescribedGroupMember


def handle_describe_groups(
    broker: Broker, context: RequestContext, request: DescribeGroupsRequest
) -> Any:
    out = []
    access = context.access
    with_operations = context.api_version >= 3 and request.include_authorized_operations
    for group_id in request.groups:
        denied = access.group(group_id)
        group = broker.groups.core.groups.get(group_id)
        if denied:
            out.append(
                _Described(
                    error_code=denied,
                    error_message=None,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=None,
                )
            )
            continue
        operations = (
            access.authorized_operations(ResourceType.GROUP, group_id) if with_operations else None
        )
        if group is None:
            # A group nobody knows is Dead; from v6 on Kafka also says GROUP_ID_NOT_FOUND
            # (KIP-1043), and kafka-consumer-groups reports it as such.
            if not broker.groups.coordinates(group_id):
                code, message = NotCoordinatorError.code, None
            elif context.api_version >= 6:
                code, message = GroupIdNotFoundError.code, f"Group {group_id} not found."
            else:
                code, message = NONE, None
            out.append(
                _Described(
                    error_code=code,
                    error_message=message,
                    group_id=group_id,
                    group_state=GroupState.DEAD.value,
                    protocol_type="",
                    protocol_data="",
                    members=[],
                    authorized_operations=operations,
                )
            )
            continue
        stable = group.state is GroupState.STABLE
        members = [
            _DescribedMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(group.protocol_name) if stable else b"",
                member_assignment=m.assignment,
            )
            for m in group.members.values()
        ]
        out.append(
            _Described(
                error_code=NONE,
                error_message=None,
                group_id=group_id,
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=members,
                authorized_operations=operations,
            )
        )
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)


def handle_delete_groups(
    broker: Broker, context: RequestContext, request: DeleteGroupsRequest
) -> Any:
    def deleted(group_id: str) -> int:
        if not group_id:
            return INVALID_GROUP_ID
        return context.access.group(group_id) or broker.groups.delete_group(group_id)

    results = [
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=deleted(g))
        for g in request.groups_names
    ]
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)


_DelTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
_DelPartition = _DelTopic.OffsetDeleteResponsePartition


def handle_offset_delete(
    broker: Broker, context: RequestContext, request: OffsetDeleteRequest
) -> Any:
    refused = {
        (t.name, p.partition_index): code
        for t in request.topics
        if (code := context.access.topic(t.name))
        for p in t.partitions
    }
    wanted = [
        (t.name, p.partition_index)
        for t in request.topics
        for p in t.partitions
        if (t.name, p.partition_index) not in refused
    ]
    error, results = broker.groups.delete_offsets(request.group_id, wanted)
    if error != NONE:
        return OffsetDeleteResponse(error_code=error, throttle_time_ms=0, topics=[])
    results = {**refused, **results}
    topics: dict[str, list[Any]] = {}
    for (t, p), code in results.items():
        topics.setdefault(t, []).append(_DelPartition(partition_index=p, error_code=code))
    return OffsetDeleteResponse(
        error_code=NONE,
        throttle_time_ms=0,
        topics=[_DelTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )
