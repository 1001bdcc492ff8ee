"""Produce: append each partition's record batches, as opaque bytes, and answer with
the assigned base offsets (or nothing at all for acks=0)."""

from __future__ import annotations

import logging
import time
from typing import Any

from kafka.protocol.producer import ProduceResponse

from partita.errors import (
    InvalidRecordError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaError,
    NotEnoughReplicasError,
    TransactionalIdNotSupportedError,
    UnknownServerError,
)
from partita.protocol.codec import RequestHeader
from partita.server.broker import Broker
from partita.server.closing import CloseConnectionError

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


def _append_one(
    broker: Broker, request: Any, topic: str, index: int, records: Any, internal_allowed: bool
) -> Any:
    try:
        if request.transactional_id is not None:
            raise TransactionalIdNotSupportedError("partita does not support transactions")
        if request.acks not in (-1, 0, 1):
            raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {request.acks}")
        if topic in INTERNAL_TOPICS and not internal_allowed:
            raise InvalidTopicError(f"cannot append to internal topic {topic}")
        partition = broker.topics.leader_partition(topic, index)
        if request.acks == -1:
            required = partition.log.config.min_insync_replicas
            if len(partition.isr) < required:
                raise NotEnoughReplicasError(
                    f"{topic}-{index} has {len(partition.isr)} in-sync replicas, "
                    f"min.insync.replicas={required}"
                )
        if not records:
            raise InvalidRecordError("no record batch in the produce request")
        info = partition.append(records)
        if info.batches:  # zero for a retried idempotent batch already in the log
            broker.metrics.appended(topic, info.last_offset - info.first_offset + 1, info.bytes)
        return _Partition(
            index=index,
            error_code=0,
            base_offset=info.first_offset,
            log_append_time_ms=info.log_append_time,
            log_start_offset=info.log_start_offset,
            record_errors=[],
            error_message=None,
        )
    except KafkaError as exc:
        code, message = exc.code, exc.message
        _rejections.warn(topic, index, code, message)
    except Exception as exc:
        log.exception("produce failed", extra={"partition": f"{topic}-{index}"})
        code, message = UnknownServerError.code, f"{type(exc).__name__}: {exc}"
    broker.metrics.produce_refused(topic, code)
    return _Partition(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=message,
    )


def handle(broker: Broker, header: RequestHeader, request: Any) -> Any | None:
    internal_allowed = header.client_id == ADMIN_CLIENT_ID
    responses = []
    for topic_data in request.topic_data:
        partitions = [
            _append_one(broker, request, topic_data.name, p.index, p.records, internal_allowed)
            for p in topic_data.partition_data
        ]
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
    return ProduceResponse(responses=responses, throttle_time_ms=0, node_endpoints=[])
