"""Metadata and DescribeCluster: brokers, topics, partitions, leaders."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import MetadataResponse

from partita.cluster.model import TopicState, valid_topic_name
from partita.errors import KafkaError, TopicAlreadyExistsError, error_code
from partita.protocol.codec import RequestHeader
from partita.server.broker import Broker

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition
NO_AUTHORIZED_OPERATIONS = -(2**31)
LEADER_NOT_AVAILABLE = 5
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC = 17
ZERO_UUID = uuid.UUID(int=0)


def offline_replicas(
    broker: Broker,
    topic: TopicState,
    index: int,
    live: set[int],
    reported: dict[tuple[uuid.UUID, int], set[int]],
) -> list[int]:
    """A partition's offline replicas: those whose broker is not registered, those their
    broker reports offline (a full disk), and (for this broker's own) one whose log
    could not be loaded."""
    gone = reported.get((topic.topic_id, index), set())
    return [
        r
        for r in topic.partitions[index].replicas
        if r not in live
        or r in gone
        or (r == broker.node_id and (topic.name, index) not in broker.topics.partitions)
    ]


def _topic_entry(
    broker: Broker,
    topic: TopicState,
    live: set[int],
    reported: dict[tuple[uuid.UUID, int], set[int]],
) -> Any:
    """A topic as the metadata image has it."""
    partitions = []
    for index, state in sorted(topic.partitions.items()):
        offline = offline_replicas(broker, topic, index, live, reported)
        leader = state.leader if state.leader not in offline else -1
        partitions.append(
            _Partition(
                error_code=0 if leader >= 0 else LEADER_NOT_AVAILABLE,
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


async def handle(broker: Broker, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    requested = request.topics
    all_topics = requested is None or (version == 0 and not requested)
    auto_create = broker.config.get_bool("auto.create.topics.enable") and (
        version < 4 or bool(request.allow_auto_topic_creation)
    )
    entries: list[Any] = []
    brokers = broker.store.brokers()
    live = {b.node_id for b in brokers}
    reported = broker.store.offline_replicas()
    if all_topics:
        entries = [
            _topic_entry(broker, t, live, reported) for _, t in sorted(broker.store.topics.items())
        ]
    else:
        for wanted in requested:
            name = wanted.name
            if name is None:
                try:
                    name = broker.topics.name_for_id(wanted.topic_id)
                except KafkaError as exc:
                    entries.append(_error_entry(None, error_code(exc), wanted.topic_id))
                    continue
            topic = broker.store.topics.get(name)
            if topic is None:
                if valid_topic_name(name) is not None:
                    entries.append(_error_entry(name, INVALID_TOPIC))
                    continue
                if not auto_create:
                    entries.append(_error_entry(name, UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                try:
                    topic = await broker.topics.create(name)
                except TopicAlreadyExistsError:
                    # Another client's request created it first (on this broker or
                    # another). Kafka answers LEADER_NOT_AVAILABLE until the topic is
                    # ready, and clients ask again; never the create's own error.
                    existing = broker.store.topics.get(name)
                    if existing is None:
                        entries.append(_error_entry(name, LEADER_NOT_AVAILABLE))
                        continue
                    topic = existing
                except KafkaError as exc:
                    entries.append(_error_entry(name, error_code(exc)))
                    continue
            entries.append(_topic_entry(broker, topic, live, reported))
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[
            _Broker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack) for b in brokers
        ],
        cluster_id=broker.cluster_id,
        controller_id=broker.store.controller_id,
        topics=entries,
        authorized_operations=None,
        error_code=0,
    )


def handle_describe_cluster(broker: Broker, _header: RequestHeader, _request: Any) -> Any:
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
                host=b.host,
                port=b.port,
                rack=b.rack,
                is_fenced=False,
            )
            for b in broker.store.brokers()
        ],
        authorized_operations=None,
    )
