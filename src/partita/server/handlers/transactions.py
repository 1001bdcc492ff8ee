"""The transaction APIs (KIP-98), transaction version 1: a producer's AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn go to its coordinator (server/transaction_service.py, the
rules in coordinator/transaction_machine.py); WriteTxnMarkers is how a coordinator on
another broker has this one's partitions append COMMIT/ABORT markers
(``Partition.write_marker``). InitProducerId with a transactional id is in
``admin.handle_init_producer_id``; FindCoordinator in ``groups``."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from partita.coordinator.group_machine import CommittedOffset
from partita.coordinator.offset_records import OFFSETS_TOPIC, group_partition
from partita.errors import KafkaError, UnknownServerError
from partita.protocol.control_records import TxnMarker
from partita.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from partita.server.broker import Broker
from partita.server.group_service import now_ms
from partita.server.request_context import RequestContext

log = logging.getLogger(__name__)

_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_TxnOffsetTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_TxnOffsetPartition = _TxnOffsetTopic.TxnOffsetCommitResponsePartition
_MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
_MarkerTopic = _MarkerResult.WritableTxnMarkerTopicResult
_MarkerPartition = _MarkerTopic.WritableTxnMarkerPartitionResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult
OPERATION_NOT_ATTEMPTED = 55


UNKNOWN_TOPIC_OR_PARTITION = 3


async def handle_add_partitions(
    broker: Broker, context: RequestContext, request: AddPartitionsToTxnRequest
) -> Any:
    """AddPartitionsToTxn v0-3 (a producer's): every partition gets the same answer,
    except those the principal may not write or that do not exist, which fail the whole
    request with the others OPERATION_NOT_ATTEMPTED, as Kafka answers."""
    wanted = [
        (topic.name, index) for topic in request.v3_and_below_topics for index in topic.partitions
    ]
    refused: dict[tuple[str, int], int] = {}
    denied_id = context.access.transactional_id(request.v3_and_below_transactional_id)
    for name, index in wanted:
        if denied_id:
            refused[(name, index)] = denied_id
            continue
        denied = context.access.topic(name)
        state = broker.store.topics.get(name)
        if denied:
            refused[(name, index)] = denied
        elif state is None or index not in state.partitions:
            refused[(name, index)] = UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        codes = {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
    else:
        error = await broker.transactions.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        codes = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(
            _PartitionResult(partition_index=index, partition_error_code=code)
        )
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            _TopicResult(name=name, results_by_partition=results)
            for name, results in by_topic.items()
        ],
    )


async def handle_add_offsets(
    broker: Broker, context: RequestContext, request: AddOffsetsToTxnRequest
) -> Any:
    """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the
    transaction (its offsets, sent with TxnOffsetCommit, commit with it)."""
    denied = context.access.group(request.group_id)
    if denied:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=denied)
    await broker.groups.ensure_offsets_topic()
    partition = group_partition(request.group_id, broker.groups.partitions)
    error = await broker.transactions.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [(OFFSETS_TOPIC, partition)],
    )
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error)


async def handle_end_txn(broker: Broker, context: RequestContext, request: EndTxnRequest) -> Any:
    error = await broker.transactions.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(throttle_time_ms=0, error_code=error)


async def handle_txn_offset_commit(
    broker: Broker, context: RequestContext, request: TxnOffsetCommitRequest
) -> Any:
    """TxnOffsetCommit: a consumer's offsets committed with a transaction (the producer's
    send_offsets_to_transaction, after AddOffsetsToTxn); the group sees them once the
    transaction commits. Its group coordinator answers; no top-level error, so a refusal
    is every partition's."""
    version = context.api_version
    denied = context.access.transactional_id(request.transactional_id) or context.access.group(
        request.group_id
    )
    offsets: list[tuple[str, int, CommittedOffset]] = []
    codes: dict[tuple[str, int], int] = {}
    now = now_ms()
    for topic in request.topics:
        topic_denied = denied or context.access.topic(topic.name)
        for p in topic.partitions:
            if topic_denied:
                codes[(topic.name, p.partition_index)] = topic_denied
                continue
            epoch = p.committed_leader_epoch if version >= 2 else -1
            value = CommittedOffset(p.committed_offset, epoch, p.committed_metadata or "", now)
            offsets.append((topic.name, p.partition_index, value))
    if offsets:
        error = broker.groups.commit_in_transaction(
            request.group_id, request.producer_id, request.producer_epoch, offsets
        )
        for name, index, _value in offsets:
            codes[(name, index)] = error
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(
            _TxnOffsetPartition(partition_index=index, error_code=code)
        )
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[_TxnOffsetTopic(name=name, partitions=parts) for name, parts in by_topic.items()],
    )


def handle_write_txn_markers(
    broker: Broker, context: RequestContext, request: WriteTxnMarkersRequest
) -> Any:
    """A coordinator's markers for partitions this broker leads (CLUSTER_ACTION)."""
    denied = context.access.cluster()
    results = []
    for marker in request.markers:
        txn_marker = TxnMarker(
            marker.producer_id,
            marker.producer_epoch,
            bool(marker.transaction_result),
            marker.coordinator_epoch,
        )
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                code = denied or _write_marker(broker, topic.name, index, txn_marker)
                partitions.append(_MarkerPartition(partition_index=index, error_code=code))
            topics.append(_MarkerTopic(name=topic.name, partitions=partitions))
        results.append(_MarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


def _write_marker(broker: Broker, topic: str, index: int, marker: TxnMarker) -> int:
    try:
        broker.replicas.write_marker(topic, index, marker)
    except KafkaError as exc:
        return exc.code
    except Exception:
        log.exception(
            "writing a transaction marker failed", extra={"partition": f"{topic}-{index}"}
        )
        return UnknownServerError.code
    return 0
