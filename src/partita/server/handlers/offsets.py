"""ListOffsets, DeleteRecords and OffsetForLeaderEpoch."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import DeleteRecordsResponse
from kafka.protocol.consumer import ListOffsetsResponse, OffsetForLeaderEpochResponse

from partita.errors import (
    KafkaError,
    LeaderNotAvailableError,
    OffsetNotAvailableError,
    UnknownServerError,
)
from partita.protocol.messages import (
    DeleteRecordsRequest,
    DeleteRecordsRequestDeleteRecordsPartition,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
)
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

log = logging.getLogger(__name__)

_LTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_LPartition = _LTopic.ListOffsetsPartitionResponse


def _list_one(
    context: RequestContext,
    broker: Broker,
    client: bool,
    read_committed: bool,
    topic: str,
    p: Any,
) -> Any:
    version = context.api_version
    try:
        context.access.require_topic(topic)
        epoch = p.current_leader_epoch if version >= 4 else -1
        partition = broker.replicas.leader_partition(topic, p.partition_index, epoch)
        listed = partition.offset_for(p.timestamp, for_client=client, read_committed=read_committed)
        return _LPartition(
            partition_index=p.partition_index,
            error_code=0,
            old_style_offsets=[],
            timestamp=listed.timestamp,
            offset=listed.offset,
            leader_epoch=listed.leader_epoch,
        )
    except OffsetNotAvailableError as exc:
        # Before v5 clients did not know the code; Kafka sends them LEADER_NOT_AVAILABLE.
        code = exc.code if version >= 5 else LeaderNotAvailableError.code
    except KafkaError as exc:
        code = exc.code
    except Exception:
        log.exception("list offsets failed", extra={"partition": f"{topic}-{p.partition_index}"})
        code = UnknownServerError.code
    return _LPartition(
        partition_index=p.partition_index,
        error_code=code,
        old_style_offsets=[],
        timestamp=-1,
        offset=-1,
        leader_epoch=-1,
    )


def handle_list_offsets(
    broker: Broker, context: RequestContext, request: ListOffsetsRequest
) -> Any:
    client = request.replica_id < 0  # followers ask too (their log start), and get the truth
    read_committed = client and context.api_version >= 2 and request.isolation_level == 1
    topics = [
        _LTopic(
            name=t.name,
            partitions=[
                _list_one(context, broker, client, read_committed, t.name, p) for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


_DTopic = DeleteRecordsResponse.DeleteRecordsTopicResult
_DPartition = _DTopic.DeleteRecordsPartitionResult


def _delete_one(
    context: RequestContext,
    broker: Broker,
    topic: str,
    p: DeleteRecordsRequestDeleteRecordsPartition,
) -> Any:
    try:
        context.access.require_topic(topic)
        partition = broker.replicas.leader_partition(topic, p.partition_index)
        low, code = partition.delete_records(p.offset), 0
    except KafkaError as exc:
        low, code = -1, exc.code
    return _DPartition(partition_index=p.partition_index, low_watermark=low, error_code=code)


def handle_delete_records(
    broker: Broker, context: RequestContext, request: DeleteRecordsRequest
) -> Any:
    topics = [
        _DTopic(
            name=t.name, partitions=[_delete_one(context, broker, t.name, p) for p in t.partitions]
        )
        for t in request.topics
    ]
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


_ETopic = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
_EPartition = _ETopic.EpochEndOffset


def _epoch_end(
    context: RequestContext,
    broker: Broker,
    topic: str,
    p: OffsetForLeaderEpochRequestOffsetForLeaderPartition,
) -> Any:
    try:
        context.access.require_topic(topic)
        partition = broker.replicas.leader_partition(topic, p.partition, p.current_leader_epoch)
        (epoch, end), code = partition.end_offset_for_epoch(p.leader_epoch), 0
    except KafkaError as exc:
        (epoch, end), code = (-1, -1), exc.code
    return _EPartition(error_code=code, partition=p.partition, leader_epoch=epoch, end_offset=end)


def handle_offset_for_leader_epoch(
    broker: Broker, context: RequestContext, request: OffsetForLeaderEpochRequest
) -> Any:
    topics = [
        _ETopic(
            topic=t.topic,
            partitions=[_epoch_end(context, broker, t.topic, p) for p in t.partitions],
        )
        for t in request.topics
    ]
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
