"""The transaction APIs (KIP-98), transaction version 1: a producer's AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn go to its coordinator (server/transaction_service.py, the
rules in coordinator/transaction_machine.py); WriteTxnMarkers is how a coordinator on
another broker has this one's partitions append COMMIT/ABORT markers
(``Partition.write_marker``). InitProducerId with a transactional id is in
``admin.handle_init_producer_id``; FindCoordinator in ``groups``."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.admin import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    WriteTxnMarkersResponse,
)

from partita.coordinator.group_machine import CommittedOffset
from partita.coordinator.offset_records import OFFSETS_TOPIC, group_partition
from partita.coordinator.transaction_machine import TxnState
from partita.errors import (
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    TransactionalIdNotFoundError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from partita.protocol.control_records import TxnMarker
from partita.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    ListTransactionsRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from partita.server.broker import Broker
from partita.server.clocks import now_ms
from partita.server.request_context import RequestContext

log = logging.getLogger(__name__)

_TopicResult = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_TxnOffsetTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
_TxnOffsetPartition = _TxnOffsetTopic.TxnOffsetCommitResponsePartition
_MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
_MarkerTopic = _MarkerResult.WritableTxnMarkerTopicResult
_MarkerPartition = _MarkerTopic.WritableTxnMarkerPartitionResult
_PartitionResult = _TopicResult.AddPartitionsToTxnPartitionResult
_DescribedState = DescribeTransactionsResponse.TransactionState
_DescribedTopic = _DescribedState.TopicData
_ProducersTopic = DescribeProducersResponse.TopicResponse
_ProducersPartition = _ProducersTopic.PartitionResponse
_ProducerState = _ProducersPartition.ProducerState


async def handle_add_partitions(
    broker: Broker, context: RequestContext, request: AddPartitionsToTxnRequest
) -> Any:
    """AddPartitionsToTxn v0-3 (a producer's): every partition gets the same answer,
    except those the principal may not write or that do not exist, which fail the whole
    request with the others OPERATION_NOT_ATTEMPTED, as Kafka answers."""
    wanted = [
        (topic.name, index) for topic in request.v3_and_below_topics for index in topic.partitions
    ]
    denied_id = context.access.transactional_id(request.v3_and_below_transactional_id)
    refused: dict[tuple[str, int], int] = {}
    for topic in request.v3_and_below_topics:
        denied = denied_id or context.access.topic(topic.name)
        state = broker.store.topics.get(topic.name)
        for index in topic.partitions:
            if denied:
                refused[(topic.name, index)] = denied
            elif state is None or index not in state.partitions:
                refused[(topic.name, index)] = UnknownTopicOrPartitionError.code
    if refused:
        codes = {tp: refused.get(tp, OperationNotAttemptedError.code) for tp in wanted}
    else:
        error = await broker.transactions.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        codes = dict.fromkeys(wanted, error)
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            _TopicResult(
                name=name,
                results_by_partition=[
                    _PartitionResult(partition_index=index, partition_error_code=code)
                    for index, code in results
                ],
            )
            for name, results in _by_topic(codes).items()
        ],
    )


def _by_topic(codes: dict[tuple[str, int], int]) -> dict[str, list[tuple[int, int]]]:
    """Per-partition error codes grouped by topic, as responses list them."""
    grouped: dict[str, list[tuple[int, int]]] = {}
    for (name, index), code in codes.items():
        grouped.setdefault(name, []).append((index, code))
    return grouped


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
        error = await broker.groups.commit_in_transaction(
            request.group_id, request.producer_id, request.producer_epoch, offsets
        )
        for name, index, _value in offsets:
            codes[(name, index)] = error
    return TxnOffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            _TxnOffsetTopic(
                name=name,
                partitions=[
                    _TxnOffsetPartition(partition_index=index, error_code=code)
                    for index, code in results
                ],
            )
            for name, results in _by_topic(codes).items()
        ],
    )


async def handle_write_txn_markers(
    broker: Broker, context: RequestContext, request: WriteTxnMarkersRequest
) -> Any:
    """A coordinator's markers for partitions this broker leads (CLUSTER_ACTION), each
    answered once the ISR has it."""
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
            codes = await asyncio.gather(
                *(
                    _write_marker(broker, topic.name, index, txn_marker, denied)
                    for index in topic.partition_indexes
                )
            )
            partitions = [
                _MarkerPartition(partition_index=index, error_code=code)
                for index, code in zip(topic.partition_indexes, codes, strict=True)
            ]
            topics.append(_MarkerTopic(name=topic.name, partitions=partitions))
        results.append(_MarkerResult(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


async def _write_marker(
    broker: Broker, topic: str, index: int, marker: TxnMarker, denied: int
) -> int:
    if denied:
        return denied
    try:
        await broker.replicas.write_marker(topic, index, marker)
    except KafkaError as exc:
        return exc.code
    except Exception:
        log.exception("writing a marker failed", extra={"partition": f"{topic}-{index}"})
        return UnknownServerError.code
    return 0


# -- what kafka-transactions reads ------------------------------------------------------


def handle_list_transactions(
    broker: Broker, context: RequestContext, request: ListTransactionsRequest
) -> Any:
    """ListTransactions: the ids this broker coordinates that the principal may DESCRIBE,
    filtered by state name, producer id and (v1) how long the transaction has run."""
    by_label = {state.label: state for state in TxnState}
    unknown = [name for name in request.state_filters if name not in by_label]
    wanted = [by_label[name] for name in request.state_filters if name in by_label]
    if request.state_filters and not wanted:
        listed = []
    else:
        listed = broker.transactions.machine.listing(wanted, request.producer_id_filters)
    duration = request.duration_filter if context.api_version >= 1 else -1
    now = now_ms()
    states = [
        ListTransactionsResponse.TransactionState(
            transactional_id=meta.transactional_id,
            producer_id=meta.producer_id,
            transaction_state=meta.state.label,
        )
        for meta in listed
        if (duration < 0 or (meta.start_ms >= 0 and now - meta.start_ms > duration))
        and not context.access.transactional_id(meta.transactional_id, log_denied=False)
    ]
    return ListTransactionsResponse(
        throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=states
    )


def handle_describe_transactions(
    broker: Broker, context: RequestContext, request: DescribeTransactionsRequest
) -> Any:
    states = []
    for tid in request.transactional_ids:
        meta = broker.transactions.machine.describe(tid)
        error = context.access.transactional_id(tid)
        if not error and not broker.transactions.coordinates(tid):
            error = NotCoordinatorError.code
        elif not error and meta is None:
            error = TransactionalIdNotFoundError.code
        if error or meta is None:
            states.append(
                _DescribedState(
                    error_code=error,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            if not context.access.topic(topic, log_denied=False):  # only what it may see
                by_topic.setdefault(topic, []).append(index)
        states.append(
            _DescribedState(
                error_code=0,
                transactional_id=tid,
                transaction_state=meta.state.label,
                transaction_timeout_ms=meta.timeout_ms,
                transaction_start_time_ms=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[_DescribedTopic(topic=t, partitions=p) for t, p in by_topic.items()],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)


def handle_describe_producers(
    broker: Broker, context: RequestContext, request: DescribeProducersRequest
) -> Any:
    """DescribeProducers (KIP-664): each partition's active producers as its leader knows
    them, with the first offset of a transaction each has open there."""
    topics = []
    for topic in request.topics:
        denied = context.access.topic(topic.name)
        partitions = []
        for index in topic.partition_indexes:
            producers: list[Any] = []
            error, message = denied, None
            if not denied:
                try:
                    partition = broker.replicas.leader_partition(topic.name, index)
                    producers = [
                        _ProducerState(
                            producer_id=pid,
                            producer_epoch=epoch,
                            last_sequence=last_sequence,
                            last_timestamp=-1,  # not kept
                            coordinator_epoch=coordinator_epoch,
                            current_txn_start_offset=txn_start,
                        )
                        for pid, epoch, last_sequence, coordinator_epoch, txn_start in (
                            partition.describe_producers()
                        )
                    ]
                except KafkaError as exc:
                    error, message = exc.code, exc.message
            partitions.append(
                _ProducersPartition(
                    partition_index=index,
                    error_code=error,
                    error_message=message,
                    active_producers=producers,
                )
            )
        topics.append(_ProducersTopic(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
