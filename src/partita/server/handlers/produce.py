"""Produce: append each partition's record batches, as opaque bytes, and answer with
the assigned base offsets (or nothing at all for acks=0)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from kafka.protocol.producer import ProduceResponse

from partita.errors import (
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailedError,
    UnknownServerError,
)
from partita.protocol.produce_request_body import ProduceRequestBody
from partita.protocol.record_batch import ATTRIBUTES_POS, TRANSACTIONAL_BIT
from partita.server.broker import Broker
from partita.server.closing import CloseConnectionError
from partita.server.partition import Partition, wait_for_any
from partita.server.request_context import RequestContext

log = logging.getLogger(__name__)


class _RejectionLog:
    """Warn about refused produce requests, at most once a second per partition and error,
    so that a misbehaving producer cannot flood the log."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int, int], float] = {}

    def warn(self, topic: str, index: int, code: int, message: str) -> None:
        key = (topic, index, code)
        now = time.monotonic()
        if now - self._last.get(key, -1e9) < 1.0:
            return
        self._last[key] = now
        log.warning(
            "produce refused",
            extra={"partition": f"{topic}-{index}", "error_code": code, "reason": message},
        )


_rejections = _RejectionLog()

# Kafka's Topic.INTERNAL_TOPICS: only the broker writes them (the group coordinator
# appends to __consumer_offsets itself, not through Produce).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# Kafka lets a client with this id write them (AdminUtils.ADMIN_CLIENT_ID), for repairs.
ADMIN_CLIENT_ID = "__admin_client"

_Topic = ProduceResponse.TopicProduceResponse
_Partition = _Topic.PartitionProduceResponse


@dataclass(slots=True)
class _Replicating:
    """An acks=all append waiting for the high watermark to pass it."""

    partition: Partition
    leader_epoch: int
    required: int  # the high watermark that commits it: its last offset + 1
    topic: int = 0  # its answer's place in the response
    slot: int = 0


def _append_one(
    broker: Broker,
    request: Any,
    topic: str,
    index: int,
    records: Any,
    internal_allowed: bool,
) -> tuple[Any, _Replicating | None]:
    """The partition's answer, and what an acks=all answer still waits for (if any)."""
    try:
        if request.acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {request.acks}")
        if topic in INTERNAL_TOPICS and not internal_allowed:
            raise InvalidTopicError(f"cannot append to internal topic {topic}")
        if request.transactional_id is None and _transactional(records):
            # Kafka's rule: transactional batches need a transactional id the principal
            # may WRITE; without one no coordinator would ever end the transaction, and
            # it would hold the partition's last stable offset for good.
            raise TransactionalIdAuthorizationFailedError(
                "a transactional batch needs the produce request's transactional id"
            )
        partition = broker.replicas.leader_partition(topic, index)
        if request.acks == -1:
            partition.check_enough_replicas()
        if not records:
            raise InvalidRecordError("no record batch in the produce request")
        info = partition.append(records)
        if info.batches:  # zero for a retried idempotent batch already in the log
            broker.metrics.appended(topic, info.last_offset - info.first_offset + 1, info.bytes)
        pending = None
        if request.acks == -1 and partition.high_watermark <= info.last_offset:
            pending = _Replicating(partition, partition.leader_epoch, info.last_offset + 1)
        answer = _Partition(
            index=index,
            error_code=0,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=info.log_start_offset,
            record_errors=[],
            error_message=None,
        )
        return answer, pending
    except KafkaError as exc:
        code, message = exc.code, exc.message
        _rejections.warn(topic, index, code, message)
    except Exception as exc:
        log.exception("produce failed", extra={"partition": f"{topic}-{index}"})
        code, message = UnknownServerError.code, f"{type(exc).__name__}: {exc}"
    broker.metrics.produce_refused(topic, code)
    return _refused(index, code, message), None


def _transactional(records: Any) -> bool:
    """Whether the first batch has the transactional attribute (a producer sends one
    batch per partition; an idempotent one must)."""
    return (
        bool(records)
        and len(records) > ATTRIBUTES_POS + 1
        and bool(records[ATTRIBUTES_POS + 1] & TRANSACTIONAL_BIT)
    )


def _refused(index: int, code: int, message: str) -> Any:
    return _Partition(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=message,
    )


def handle(broker: Broker, context: RequestContext, request: ProduceRequestBody) -> Any:
    internal_allowed = context.client_id == ADMIN_CLIENT_ID
    responses = []
    replicating: list[_Replicating] = []
    for t, topic_data in enumerate(request.topic_data):
        partitions = []
        denied = context.access.topic(topic_data.name)
        message = f"not authorized to write to topic {topic_data.name}"
        if not denied and request.transactional_id is not None:
            denied = context.access.transactional_id(request.transactional_id)
            message = f"not authorized to use transactional id {request.transactional_id}"
        if denied:
            partitions = [_refused(p.index, denied, message) for p in topic_data.partition_data]
            responses.append(_Topic(name=topic_data.name, partition_responses=partitions))
            continue
        for slot, p in enumerate(topic_data.partition_data):
            answer, pending = _append_one(
                broker, request, topic_data.name, p.index, p.records, internal_allowed
            )
            partitions.append(answer)
            if pending is not None:
                pending.topic, pending.slot = t, slot
                replicating.append(pending)
        responses.append(_Topic(name=topic_data.name, partition_responses=partitions))
    if request.acks == 0:
        failed = [p for t in responses for p in t.partition_responses if p.error_code]
        if failed:
            # With acks=0 there is no response to carry the error; Kafka closes the
            # connection so that the producer notices.
            raise CloseConnectionError(
                f"acks=0 produce failed with error {failed[0].error_code}: "
                f"{failed[0].error_message}"
            )
        return None  # Kafka sends no response at all for acks=0
    response = ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=[])
    if replicating:
        # A delayed produce: answered when the ISR holds every batch, not by a blocked loop.
        return _await_replication(response, replicating, request.timeout_ms / 1000)
    return response


async def _await_replication(response: Any, pending: list[_Replicating], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while pending:
        still: list[_Replicating] = []
        for waiting in pending:
            try:
                if not waiting.partition.replication_outcome(
                    waiting.required, waiting.leader_epoch
                ):
                    still.append(waiting)
            except KafkaError as exc:
                _fail(response, waiting, exc.code, exc.message)
        pending = still
        remaining = deadline - time.monotonic()
        if not pending or remaining <= 0:
            break
        await wait_for_any([w.partition for w in pending], remaining)
    for waiting in pending:
        _fail(
            response,
            waiting,
            RequestTimedOutError.code,
            f"the in-sync replicas did not all have the batch within {timeout:.0f} s",
        )
    return response


def _fail(response: Any, waiting: _Replicating, code: int, message: str) -> None:
    partitions = response.responses[waiting.topic].partition_responses
    partitions[waiting.slot] = _refused(partitions[waiting.slot].index, code, message)
    _rejections.warn(waiting.partition.topic, waiting.partition.index, code, message)
