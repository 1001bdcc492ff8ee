"""DescribeTopicPartitions (API 75, KIP-966): topics and their partitions a page at a
time, what `kafka-topics --describe` and Kafka 4's admin client ask for instead of
Metadata.

Kafka's paging: topics in name order (all of them when none are named), from the
cursor's topic and partition on, at most ``ResponsePartitionLimit`` partitions (capped at
2000, Kafka's ``max.request.partition.size.limit``, at least 1). A topic cut short is
answered in part, with the cursor pointing at its first partition left out; a limit
reached exactly at a topic's end points at the next topic's partition 0. Unknown topics
named in the request are answered with UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC for an
illegal name); when all topics are asked for, there are none. A cursor outside the named
topics or with a negative partition is INVALID_REQUEST for every topic.

partita has no eligible leader replicas (KIP-966's ELR): both lists are empty, as Kafka's
are while every ISR is healthy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsResponse

from partita.cluster.model import valid_topic_name
from partita.errors import InvalidRequestError, InvalidTopicError, UnknownTopicOrPartitionError
from partita.protocol.messages import DescribeTopicPartitionsRequest
from partita.server.broker import Broker
from partita.server.handlers.metadata import NO_AUTHORIZED_OPERATIONS, ZERO_UUID
from partita.server.request_context import RequestContext

MAX_PARTITIONS_PER_RESPONSE = 2000  # Kafka's max.request.partition.size.limit default

_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = _Topic.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor


@dataclass(frozen=True)
class PageEntry:
    """One topic of a page: the partition indexes it carries, or None if unknown."""

    topic: str
    partitions: range | None


def plan_page(
    names: list[str],
    partition_count: Callable[[str], int | None],
    cursor: tuple[str, int] | None,
    limit: int,
) -> tuple[list[PageEntry], tuple[str, int] | None]:
    """The topics and partitions of one response, and the next cursor (None: done).
    ``names`` are the topics asked for, already in name order; ``partition_count`` is
    None for a topic that does not exist."""
    remaining = max(1, min(limit, MAX_PARTITIONS_PER_RESPONSE))
    first_topic, first_partition = cursor if cursor is not None else ("", 0)
    page: list[PageEntry] = []
    for name in names:
        if name < first_topic:
            continue
        if remaining == 0:
            return page, (name, 0)
        count = partition_count(name)
        if count is None:
            page.append(PageEntry(name, None))
            continue
        start = first_partition if name == first_topic else 0
        end = min(count, start + remaining)
        page.append(PageEntry(name, range(start, max(start, end))))
        if end < count:
            return page, (name, end)
        remaining -= max(0, end - start)
    return page, None


def handle(broker: Broker, context: RequestContext, request: DescribeTopicPartitionsRequest) -> Any:
    store = broker.store
    access = context.access
    asked = sorted({t.name for t in request.topics})
    every_topic = not asked
    # Topics the principal may not DESCRIBE are left out of a listing of all, and out of
    # the paging of those asked for (their sizes would tell), then refused at the end.
    refused = {name: code for name in asked if (code := access.topic(name))}
    wanted = [name for name in asked if name not in refused]
    names = sorted(filter(access.visible_topic, store.topics)) if every_topic else wanted
    cursor = None
    if request.cursor is not None:
        cursor = (request.cursor.topic_name, request.cursor.partition_index)
        if cursor[1] < 0 or (not every_topic and cursor[0] not in asked):
            return DescribeTopicPartitionsResponse(
                throttle_time_ms=0,
                topics=[_error_topic(name, InvalidRequestError.code) for name in asked],
                next_cursor=None,
            )

    def partition_count(name: str) -> int | None:
        topic = store.topics.get(name)
        return len(topic.partitions) if topic is not None else None

    page, next_cursor = plan_page(names, partition_count, cursor, request.response_partition_limit)
    offline_replicas = broker.replicas.offline_replicas()
    topics = []
    for entry in page:
        topic = store.topics.get(entry.topic)
        if topic is None or entry.partitions is None:
            illegal = valid_topic_name(entry.topic) is not None
            topics.append(
                _error_topic(
                    entry.topic,
                    InvalidTopicError.code if illegal else UnknownTopicOrPartitionError.code,
                )
            )
            continue
        partitions = []
        for index in entry.partitions:
            state = topic.partitions.get(index)
            if state is None:
                continue
            offline = offline_replicas(topic, index)
            partitions.append(
                _Partition(
                    error_code=0,
                    partition_index=index,
                    leader_id=state.leader if state.leader not in offline else -1,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=list(state.replicas),
                    isr_nodes=list(state.isr),
                    eligible_leader_replicas=[],
                    last_known_elr=[],
                    offline_replicas=offline,
                )
            )
        topics.append(
            _Topic(
                error_code=0,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=topic.internal,
                partitions=partitions,
                topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
            )
        )
    topics += [_error_topic(name, code) for name, code in refused.items()]
    return DescribeTopicPartitionsResponse(
        throttle_time_ms=0,
        topics=topics,
        next_cursor=(
            _Cursor(topic_name=next_cursor[0], partition_index=next_cursor[1])
            if next_cursor is not None
            else None
        ),
    )


def _error_topic(name: str, code: int) -> Any:
    return _Topic(
        error_code=code,
        name=name,
        topic_id=ZERO_UUID,
        is_internal=False,
        partitions=[],
        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
    )
