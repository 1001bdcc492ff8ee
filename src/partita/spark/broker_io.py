"""What the connector asks the brokers: partitions and offsets on the driver, record ranges
on the executors.

Spark calls the connector from plain threads and worker processes, so each entry point
here is blocking and owns a short-lived event loop around partita's asyncio client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from partita.client.cluster import Cluster
from partita.client.consumer import AsyncConsumer, fetch_request
from partita.client.security import ClientSecurity, security_of
from partita.errors import KafkaError, UnknownTopicOrPartitionError
from partita.protocol.fetch_response import decode_fetch_response_v11
from partita.protocol.record_columns import end_of_whole_batches
from partita.spark.options import EARLIEST, LATEST, Security, Subscription
from partita.spark.planning import OffsetRange, Offsets, TopicPartition
from partita.spark.rows import RowBuilder

T = TypeVar("T")

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
ROWS_PER_ARROW_BATCH = 32_768
FETCH_MAX_BYTES = 8 * 1024 * 1024


class DataLossError(KafkaError):
    """Offsets a query needs are gone (retention, deletion, truncation)."""


@dataclass(frozen=True, slots=True)
class Subscribed:
    """What a subscription covers now."""

    partitions: list[TopicPartition]
    # Subscribed topics the brokers answered with an error, by Kafka error code.
    unavailable: dict[str, int] = field(default_factory=dict)

    def unavailable_error(self) -> KafkaError:
        """The error a batch query fails with when a subscribed topic is not there."""
        reasons = [
            f"topic {name!r} does not exist"
            if code == UNKNOWN_TOPIC_OR_PARTITION
            else f"topic {name!r} is not available (Kafka error {code})"
            for name, code in sorted(self.unavailable.items())
        ]
        message = "subscribe: " + "; ".join(reasons)
        if set(self.unavailable.values()) == {UNKNOWN_TOPIC_OR_PARTITION}:
            return UnknownTopicOrPartitionError(message)
        return KafkaError(message)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class BrokerView:
    """Driver-side questions, answered over one connection per call."""

    def __init__(self, bootstrap_servers: str, security: Security = (), isolation: int = 0) -> None:
        self.bootstrap_servers = bootstrap_servers
        # read_committed (1): "latest" is the last stable offset, not the high watermark.
        self.isolation = isolation
        # The settings, not the TLS context they make: a streaming reader holding this is
        # pickled to the Python worker.
        self.security_settings = security

    @property
    def security(self) -> ClientSecurity:
        return security_of(self.security_settings)

    def partitions(self, subscription: Subscription) -> Subscribed:
        """The partitions a subscription covers right now, and the subscribed topics the
        brokers do not have."""
        return _run(self._partitions(subscription))

    async def _partitions(self, subscription: Subscription) -> Subscribed:
        cluster = Cluster(self.bootstrap_servers, "partita-spark-driver", security=self.security)
        try:
            if subscription.kind == "subscribe":
                await cluster.refresh(list(subscription.topics), auto_create=False)
            else:
                await cluster.refresh(None, auto_create=False)
            found = {
                (name, partition)
                for name, info in cluster.topics.items()
                if not info.error_code and subscription.matches(name)
                for partition in info.leaders
            }
            unavailable = {}
            if subscription.kind == "subscribe":
                for name in subscription.topics:
                    info = cluster.topics.get(name)
                    code = UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error_code
                    if code:
                        unavailable[name] = code
        finally:
            await cluster.close()
        if subscription.kind == "assign":
            missing = sorted(set(subscription.partitions) - found)
            if missing:
                raise KafkaError(
                    "assigned partitions do not exist: " + ", ".join(f"{t}-{p}" for t, p in missing)
                )
            return Subscribed(sorted(subscription.partitions))
        return Subscribed(sorted(found), unavailable)

    def list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Offsets for timestamps or -2 (earliest) / -1 (latest); -1 where no record has
        a timestamp at or after the one asked."""
        if not specs:
            return {}
        return _run(self._list_offsets(specs))

    async def _list_offsets(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        consumer = AsyncConsumer(
            self.bootstrap_servers,
            client_id="partita-spark-driver",
            security=self.security,
            isolation_level="read_committed" if self.isolation else "read_uncommitted",
        )
        try:
            await consumer.start()
            found = await consumer.list_offsets(specs)
        finally:
            await consumer.stop()
        return {tp: offset for tp, (offset, _timestamp) in found.items()}

    def bounds(self, partitions: list[TopicPartition]) -> tuple[Offsets, Offsets]:
        """Earliest and latest offsets (log start offset and high watermark)."""
        earliest = self.list_offsets(dict.fromkeys(partitions, EARLIEST))
        latest = self.list_offsets(dict.fromkeys(partitions, LATEST))
        return earliest, latest


def read_range(
    bootstrap_servers: str,
    offset_range: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    security: Security = (),
    isolation: int = 0,
) -> Iterator[pa.RecordBatch]:
    """The records of one offset range as Arrow batches (an executor's whole job).

    read_committed (``isolation`` 1) reads up to the last stable offset and leaves out the
    records of aborted transactions; the range was planned against that offset too."""
    loop = asyncio.new_event_loop()
    cluster = Cluster(bootstrap_servers, "partita-spark-reader", security=security_of(security))
    tp = (offset_range.topic, offset_range.partition)
    builder = RowBuilder(offset_range.topic, offset_range.partition, include_headers)
    position, end = offset_range.start, offset_range.end
    deadline = time.monotonic() + poll_timeout_ms / 1000
    # The fetch for the next position, sent before this response is decoded so that the
    # broker (another process, another core) works while this one does.
    ahead: tuple[int, asyncio.Task[_Fetched]] | None = None
    try:
        while position < end:
            if ahead is not None and ahead[0] == position:
                fetched = loop.run_until_complete(ahead[1])
            else:
                if ahead is not None:
                    loop.run_until_complete(_discard(ahead[1]))
                fetched = loop.run_until_complete(_fetch(cluster, tp, position, isolation))
            ahead = None
            code, high_watermark, records, aborted = fetched
            following = end_of_whole_batches(records, position)
            if not code and position < following < min(end, high_watermark):
                task = loop.create_task(_fetch(cluster, tp, following, isolation))
                ahead = (following, task)
                loop.run_until_complete(asyncio.sleep(0))  # the request goes out now
            if code == OFFSET_OUT_OF_RANGE:
                position = _after_lost_data(
                    bootstrap_servers, tp, position, fail_on_data_loss, security, isolation
                )
                if position < 0:
                    break
                continue
            if code:
                if time.monotonic() > deadline:
                    raise KafkaError(f"fetching {tp[0]}-{tp[1]} failed with error {code}")
                loop.run_until_complete(_refresh(cluster, tp[0]))
                continue
            advanced = builder.add_record_set(records, position, end, aborted)
            if advanced > position:
                position = advanced
                deadline = time.monotonic() + poll_timeout_ms / 1000
            elif high_watermark <= position or time.monotonic() > deadline:
                # The range was planned against offsets that are no longer there: the log
                # was truncated under us, or the records have not been replicated yet.
                if high_watermark <= position and time.monotonic() <= deadline:
                    time.sleep(0.05)
                    continue
                message = (
                    f"{tp[0]}-{tp[1]}: offsets {position}..{end} were planned but the log "
                    f"ends at {high_watermark}; some data may have been lost"
                )
                if fail_on_data_loss:
                    raise DataLossError(message + " (set failOnDataLoss=false to skip them)")
                break
            if len(builder) >= ROWS_PER_ARROW_BATCH:
                yield builder.flush()
        if len(builder):
            yield builder.flush()
    finally:
        if ahead is not None:
            loop.run_until_complete(_discard(ahead[1]))
        loop.run_until_complete(cluster.close())
        loop.close()


async def _discard(task: asyncio.Task[_Fetched]) -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


def _after_lost_data(
    bootstrap_servers: str,
    tp: TopicPartition,
    position: int,
    fail_on_data_loss: bool,
    security: Security = (),
    isolation: int = 0,
) -> int:
    """Where to continue when ``position`` is out of the log's range; -1 to stop."""
    starts, ends = BrokerView(bootstrap_servers, security, isolation).bounds([tp])
    earliest, latest = starts[tp], ends[tp]
    message = (
        f"{tp[0]}-{tp[1]}: offset {position} is out of range (the log now holds "
        f"{earliest}..{latest}); some data may have been lost"
    )
    if fail_on_data_loss:
        raise DataLossError(message + " (set failOnDataLoss=false to skip it)")
    return earliest if position < earliest else -1


# (error code, where readable records end, records, aborted transactions) of one fetch.
_Fetched = tuple[int, int, bytes | memoryview, list[tuple[int, int]] | None]


async def _fetch(cluster: Cluster, tp: TopicPartition, position: int, isolation: int) -> _Fetched:
    """One fetch; the records are a view of the response frame (decoded without a copy).
    Readable records end at the high watermark, or for read_committed the last stable
    offset."""
    info = await cluster.topic(tp[0], auto_create=False)
    leader = info.leaders.get(tp[1], -1)
    if leader < 0:
        return UNKNOWN_TOPIC_OR_PARTITION, -1, b"", None
    request = fetch_request(
        {tp: position},
        wait_ms=500,
        min_bytes=1,
        max_bytes=FETCH_MAX_BYTES,
        partition_max_bytes=FETCH_MAX_BYTES,
        isolation=isolation,
    )
    connection = await cluster.connection(leader)
    response = await connection.request(request, decoder=decode_fetch_response_v11)
    for topic in response.responses:
        for p in topic.partitions:
            if p.partition_index == tp[1]:
                end = p.last_stable_offset if isolation else p.high_watermark
                return p.error_code, end, p.records or b"", p.aborted_transactions
    return UNKNOWN_TOPIC_OR_PARTITION, -1, b"", None


async def _refresh(cluster: Cluster, topic: str) -> None:
    await asyncio.sleep(0.2)
    with contextlib.suppress(KafkaError, OSError):
        await cluster.refresh([topic], auto_create=False)
