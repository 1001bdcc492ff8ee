"""Fetch: hand out record bytes from the segment files, long-polling for new data.

Incremental fetch sessions (KIP-227) are declined the way Kafka allows: every response
carries session id 0, so clients keep sending full fetch requests. A request for a
session we never created gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from partita.errors import (
    FetchSessionIdNotFoundError,
    KafkaError,
    UnknownServerError,
)
from partita.protocol.fetch_response import PartitionResult, TopicResult, encode_fetch_response
from partita.protocol.file_region import FileRegion
from partita.protocol.messages import (
    FetchRequest,
    FetchRequestFetchPartition,
    FetchRequestFetchTopic,
)
from partita.replication.replica_selector import preferred_read_replica
from partita.server.access import Access
from partita.server.broker import Broker
from partita.server.partition import Partition, PartitionRead, wait_for_any
from partita.server.request_context import RequestContext, fetch_replica_id

# Below this a region is read into the response: sendfile costs a few event-loop turns
# (wait for the write buffer to empty, then for the socket) that only pay off when big.
SENDFILE_FROM = 64 * 1024


class _FetchPass:
    """One attempt at answering a fetch: read every partition once."""

    def __init__(self, broker: Broker, request: FetchRequest, version: int, access: Access) -> None:
        self.broker = broker
        self.access = access
        self.request = request
        self.version = version
        self.bytes = 0
        self.errors = False
        self.partitions: list[Partition] = []
        self.budget = request.max_bytes if version >= 3 else 2**31 - 1
        self.replica = fetch_replica_id(request, version)
        # isolation_level 1 (v4+): read only below the last stable offset, with the
        # aborted transactions there (a follower's fetch is always read_uncommitted).
        self.read_committed = version >= 4 and self.replica < 0 and request.isolation_level == 1
        # KIP-392: a consumer (Fetch v11+) may read from a follower, and may be told to.
        self.from_follower = version >= 11 and self.replica < 0
        self.client_rack = request.rack_id if self.from_follower else None
        self.racks = {b.node_id: b.rack for b in broker.store.brokers()} if self.client_rack else {}
        self.first_data = True  # the first partition with data gets a batch whatever its size

    def run(self) -> list[TopicResult]:
        topics: list[TopicResult] = []
        for topic in self.request.topics:
            name, topic_id, topic_error = self._resolve(topic)
            if name is not None and topic_error is None:
                topic_error = self.access.topic(name) or None
            results = []
            for fp in topic.partitions:
                result = PartitionResult(fp.partition)
                results.append(result)
                try:
                    if topic_error is not None or name is None:
                        result.error_code = topic_error or UnknownServerError.code
                    else:
                        self._read(name, fp, result)
                except KafkaError as exc:
                    result.error_code = exc.code
                except Exception:
                    result.error_code = UnknownServerError.code
                if result.error_code:
                    self.errors = True
            topics.append(TopicResult(name or "", topic_id, results))
        return topics

    def _read(self, name: str, fp: FetchRequestFetchPartition, result: PartitionResult) -> None:
        """One partition: the partition's own rules decide what it may read
        (``Partition.fetch``); this pass adds what spans partitions -- the response's
        byte budget, the client's rack, the reassignment throttle."""
        epoch = fp.current_leader_epoch if self.version >= 9 else -1
        partition = self.broker.replicas.readable_partition(
            name, fp.partition, epoch, from_follower=self.from_follower
        )
        self.partitions.append(partition)
        if self.client_rack and partition.is_leader:
            elsewhere = preferred_read_replica(
                self.broker.config.get("replica.selector.class"),
                self.client_rack,
                partition.leader,
                partition.isr,
                self.racks,
            )
            if elsewhere >= 0:
                # Kafka answers with the replica to use and no records.
                _bounds(result, partition.fetch_bounds())
                result.preferred_read_replica = elsewhere
                return
        limit, throttled = self._limit(partition, fp.partition_max_bytes)
        read = partition.fetch(
            fp.fetch_offset,
            limit or 0,
            replica=self.replica,
            last_fetched_epoch=fp.last_fetched_epoch if self.version >= 12 else -1,
            min_one_batch=self.first_data and limit is not None,
            read_committed=self.read_committed,
        )
        _bounds(result, read)
        if read.aborted is not None:
            result.aborted_transactions = [(a.producer_id, a.first_offset) for a in read.aborted]
        if read.diverging_epoch is not None:
            # The follower must cut its log first: answered now (this ends the long poll).
            result.diverging_epoch = read.diverging_epoch
            self.errors = True
            return
        region = read.records
        if region is None:
            return
        # Big regions go out by sendfile, straight from the page cache.
        records = region if region.length >= SENDFILE_FROM else region.read()
        result.records = records
        if throttled:
            self.broker.reassignment_limit.spend(len(records))
        self.budget -= len(records)
        self.bytes += len(records)
        self.first_data = False

    def _limit(self, partition: Partition, partition_max_bytes: int) -> tuple[int | None, bool]:
        """What this partition may add to the response, and whether the reassignment
        throttle applies: leader.replication.throttled.rate gives a replica being added
        what the bucket holds, nothing (None: not even one batch) until it refills."""
        limit = min(partition_max_bytes, self.budget)
        throttled = self.replica >= 0 and self.replica in partition.adding
        if throttled:
            allowed = self.broker.reassignment_limit.allowance()
            if allowed is not None:
                limit = min(limit, allowed)
                if limit <= 0:
                    return None, throttled
        return limit, throttled

    def _resolve(self, topic: FetchRequestFetchTopic) -> tuple[str | None, uuid.UUID, int | None]:
        if self.version >= 13:
            try:
                name = self.broker.replicas.name_for_id(topic.topic_id)
            except KafkaError as exc:
                return None, topic.topic_id, exc.code
            return name, topic.topic_id, None
        state = self.broker.store.topics.get(topic.topic)
        topic_id = state.topic_id if state else None
        return topic.topic, topic_id or uuid.UUID(int=0), None


def _bounds(result: PartitionResult, read: PartitionRead) -> None:
    result.high_watermark = read.high_watermark
    result.last_stable_offset = read.last_stable_offset
    result.log_start_offset = read.log_start_offset


async def handle(
    broker: Broker, context: RequestContext, request: FetchRequest
) -> list[bytes | FileRegion]:
    version = context.api_version
    if version >= 7 and request.session_id != 0:
        return encode_fetch_response(version, [], error_code=FetchSessionIdNotFoundError.code)
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    # A follower's fetch is answered by new records (it reads to the log end); a
    # consumer's only once the high watermark lets it read them.
    follower = fetch_replica_id(request, version) >= 0
    while True:
        attempt = _FetchPass(broker, request, version, context.access)
        topics = attempt.run()
        remaining = deadline - time.monotonic()
        if attempt.bytes >= max(request.min_bytes, 1) or attempt.errors or remaining <= 0:
            break
        if not attempt.partitions:
            await asyncio.sleep(remaining)
            break
        await wait_for_any(attempt.partitions, remaining, log_end=follower)
    metrics = broker.metrics
    for topic in topics:
        sent = sum(len(p.records) for p in topic.partitions if p.records)
        if sent:
            metrics.fetched(topic.name, sent)
    return encode_fetch_response(version, topics)
