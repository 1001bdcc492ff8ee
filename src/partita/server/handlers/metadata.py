"""Metadata and DescribeCluster: brokers, topics, partitions, leaders."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import MetadataResponse

from partita.cluster.model import BrokerInfo, TopicState, valid_topic_name
from partita.errors import (
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    error_code,
)
from partita.protocol.messages import DescribeClusterRequest, MetadataRequest
from partita.security.acl import CLUSTER_NAME, ResourceType
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
NO_AUTHORIZED_OPERATIONS = -(2**31)
OfflineReplicas = Callable[[TopicState, int], list[int]]
ZERO_UUID = uuid.UUID(int=0)


def reachable_brokers(broker: Broker, listener: str) -> list[tuple[BrokerInfo, tuple[str, int]]]:
    """The live brokers with an address on ``listener`` (the one the request came in
    on: a client of the TLS listener is told TLS addresses), as Kafka answers; a broker
    without that listener is left out."""
    out = []
    for info in broker.store.brokers():
        address = info.endpoint(listener)
        if address is not None:
            out.append((info, address))
    return out


def _topic_entry(topic: TopicState, offline_replicas: OfflineReplicas) -> Any:
    """A topic as the metadata image has it."""
    partitions = []
    for index, state in sorted(topic.partitions.items()):
        offline = offline_replicas(topic, index)
        leader = state.leader if state.leader not in offline else -1
        partitions.append(
            _Partition(
                error_code=0 if leader >= 0 else LeaderNotAvailableError.code,
                partition_index=index,
                leader_id=leader,
                leader_epoch=state.leader_epoch,
                replica_nodes=list(state.replicas),
                isr_nodes=list(state.isr) if leader >= 0 else [],
                offline_replicas=offline,
            )
        )
    return _Topic(
        error_code=0,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        authorized_operations=None,
    )


def _error_entry(name: str | None, code: int, topic_id: uuid.UUID = ZERO_UUID) -> Any:
    return _Topic(
        error_code=code,
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=[],
        authorized_operations=None,
    )


async def handle(broker: Broker, context: RequestContext, request: MetadataRequest) -> Any:
    version = context.api_version
    requested = request.topics
    all_topics = requested is None or (version == 0 and not requested)
    auto_create = broker.config.get_bool("auto.create.topics.enable") and (
        version < 4 or bool(request.allow_auto_topic_creation)
    )
    entries: list[Any] = []
    brokers = reachable_brokers(broker, context.listener)
    offline = broker.replicas.offline_replicas()
    access = context.access
    if all_topics or requested is None:
        # Topics the principal may not DESCRIBE are left out, as if they did not exist.
        entries = [
            _topic_entry(t, offline)
            for name, t in sorted(broker.store.topics.items())
            if access.visible_topic(name)
        ]
    else:
        for wanted in requested:
            name = wanted.name
            by_id = name is None
            if name is None:
                try:
                    name = broker.replicas.name_for_id(wanted.topic_id)
                except KafkaError as exc:
                    entries.append(_error_entry(None, error_code(exc), wanted.topic_id))
                    continue
            denied = access.topic(name)
            if denied:  # exists or not: an unauthorized client learns neither (nor the
                # name of a topic it asked for by id)
                entries.append(_error_entry(None if by_id else name, denied, wanted.topic_id))
                continue
            topic = broker.store.topics.get(name)
            if topic is None:
                if valid_topic_name(name) is not None:
                    entries.append(_error_entry(name, InvalidTopicError.code))
                    continue
                if not auto_create:
                    entries.append(_error_entry(name, UnknownTopicOrPartitionError.code))
                    continue
                if not access.may_create_topic(name):
                    entries.append(_error_entry(name, TopicAuthorizationFailedError.code))
                    continue
                try:
                    topic = await broker.topic_admin.create(name)
                except TopicAlreadyExistsError:
                    # Another client's request created it first (on this broker or
                    # another). Kafka answers LEADER_NOT_AVAILABLE until the topic is
                    # ready, and clients ask again; never the create's own error.
                    existing = broker.store.topics.get(name)
                    if existing is None:
                        entries.append(_error_entry(name, LeaderNotAvailableError.code))
                        continue
                    topic = existing
                except KafkaError as exc:
                    entries.append(_error_entry(name, error_code(exc)))
                    continue
            entries.append(_topic_entry(topic, offline))
    if version >= 8 and request.include_topic_authorized_operations:
        for entry in entries:
            if not entry.error_code:
                entry.authorized_operations = access.authorized_operations(
                    ResourceType.TOPIC, entry.name
                )
    cluster_operations = None  # not asked: the field's default, -2^31
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            _Broker(node_id=b.node_id, host=host, port=port, rack=b.rack)
            for b, (host, port) in brokers
        ],
        cluster_id=broker.cluster_id,
        controller_id=broker.store.controller_id,
        topics=entries,
        authorized_operations=cluster_operations,
        error_code=0,
    )


def handle_describe_cluster(
    broker: Broker, context: RequestContext, request: DescribeClusterRequest
) -> Any:
    operations = None
    if request.include_cluster_authorized_operations:
        operations = context.access.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=broker.cluster_id,
        controller_id=broker.store.controller_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.node_id,
                host=host,
                port=port,
                rack=b.rack,
                is_fenced=False,
            )
            for b, (host, port) in reachable_brokers(broker, context.listener)
        ],
        authorized_operations=operations,
    )
