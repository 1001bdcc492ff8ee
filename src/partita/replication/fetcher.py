"""Follower fetchers: each broker copies the logs of the partitions it follows from
their leaders, one connection and one task per leader broker, many partitions per Fetch.

A partition joins its leader's fetcher when the image makes this broker its follower at
a leader epoch. It fetches (v12) from its log end, with its replica id, the leader epoch
it follows (a stale one is refused by the leader: FENCED_LEADER_EPOCH) and the epoch of
the last batch it holds (LastFetchedEpoch). When that epoch does not end where our log
does in the leader's log, the leader answers with a DivergingEpoch instead of records,
and the follower cuts its log where the epochs say (``truncation.truncation_for``), so
that a former leader's unreplicated tail disappears and every replica holds the same
bytes (KIP-595). Otherwise it appends what comes back byte for byte (the leader's
offsets and epochs) and follows the leader's high watermark and log start. The leader
learns the follower's log end from the fetch offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka.protocol.consumer import ListOffsetsRequest

from partita.client.connection import BrokerConnection, ConnectionLostError
from partita.client.error_names import error_code_name
from partita.client.security import ClientSecurity
from partita.errors import KafkaError, KafkaStorageError, SaslAuthenticationFailedError
from partita.protocol.consumer_requests import ReplicaFetchPartition, ReplicaFetchRequestV12
from partita.protocol.record_batch import LOG_OVERHEAD, iter_headers
from partita.replication.truncation import truncation_for
from partita.storage.log import PartitionLog

log = logging.getLogger(__name__)

FETCH_MAX_WAIT_MS = 500
PARTITION_MAX_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 16 * 1024 * 1024
BACKOFF_SECONDS = 0.2
OFFSET_OUT_OF_RANGE = 1
EARLIEST = -2


class FollowedPartition(Protocol):
    """What a fetcher needs of a partition (``server.partition.Partition``)."""

    topic: str
    index: int
    log: PartitionLog

    def append_as_follower(self, records: bytes | memoryview) -> Any: ...

    def follow_high_watermark(self, leader_high_watermark: int) -> None: ...

    def follow_log_start(self, leader_log_start: int) -> None: ...

    def truncate_to(self, offset: int) -> int: ...

    def start_over_at(self, offset: int) -> None: ...

    @property
    def throttled(self) -> bool: ...


@dataclass(slots=True)
class _Followed:
    partition: FollowedPartition
    leader_epoch: int
    refused_with: int = 0  # the leader's last error for it, logged when it changes


AddressOf = Callable[[int], tuple[str, int] | None]


@dataclass(slots=True)
class _LeaderFetcher:
    leader: int
    partitions: dict[tuple[str, int], _Followed] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class FetcherManager:
    def __init__(
        self,
        node_id: int,
        address_of: AddressOf,
        throttle_rate: Callable[[], int] = lambda: 0,
        security: ClientSecurity | None = None,
    ) -> None:
        self.node_id = node_id
        self.address_of = address_of
        # How this broker reaches and logs in to the others' inter-broker listener.
        self.security = security
        # Bytes/s that replicas being added by a reassignment may copy (0: unlimited).
        self.throttle_rate = throttle_rate
        self._fetchers: dict[int, _LeaderFetcher] = {}
        self._where: dict[tuple[str, int], int] = {}  # partition -> leader it follows

    def follow(self, partition: FollowedPartition, leader: int, leader_epoch: int) -> None:
        """Fetch ``partition`` from ``leader`` at ``leader_epoch`` (replacing what it
        followed before)."""
        key = (partition.topic, partition.index)
        current = self._where.get(key)
        if current is not None:
            followed = self._fetchers[current].partitions.get(key)
            if current == leader and followed and followed.leader_epoch == leader_epoch:
                return
            self.unfollow(key)
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = _LeaderFetcher(leader)
            fetcher.task = asyncio.get_running_loop().create_task(
                self._run(fetcher), name=f"fetcher-{leader}"
            )
        fetcher.partitions[key] = _Followed(partition, leader_epoch)
        fetcher.wake.set()
        self._where[key] = leader

    def unfollow(self, key: tuple[str, int]) -> None:
        leader = self._where.pop(key, None)
        if leader is not None:
            self._fetchers[leader].partitions.pop(key, None)

    async def stop(self) -> None:
        for fetcher in self._fetchers.values():
            if fetcher.task is not None:
                fetcher.task.cancel()
        for fetcher in self._fetchers.values():
            if fetcher.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await fetcher.task
        self._fetchers.clear()
        self._where.clear()

    # -- one leader ----------------------------------------------------------------------

    async def _run(self, fetcher: _LeaderFetcher) -> None:
        connection: BrokerConnection | None = None
        failing = False  # log a lost leader once, not at every retry
        while True:
            if not fetcher.partitions:
                fetcher.wake.clear()
                await fetcher.wake.wait()
                continue
            try:
                if connection is None or connection.closed:
                    connection = await self._connect(fetcher.leader)
                    if connection is None:
                        await asyncio.sleep(BACKOFF_SECONDS)
                        continue
                await self._fetch_once(connection, fetcher)
                failing = False
            except asyncio.CancelledError:
                if connection is not None:
                    await connection.close()
                raise
            except SaslAuthenticationFailedError as exc:
                if not failing:
                    log.error(
                        "cannot log in to the leader's inter-broker listener; retrying",
                        extra={"leader": fetcher.leader, "error": str(exc)},
                    )
                failing = True
                connection = None
                await asyncio.sleep(BACKOFF_SECONDS)
            except (ConnectionLostError, OSError, TimeoutError) as exc:
                if not failing:
                    log.info(
                        "fetcher lost its connection; retrying until the leader is back "
                        "or replaced",
                        extra={"leader": fetcher.leader, "error": str(exc)},
                    )
                failing = True
                if connection is not None:
                    await connection.close()
                connection = None
                await asyncio.sleep(BACKOFF_SECONDS)
            except Exception:
                log.exception("fetcher pass failed", extra={"leader": fetcher.leader})
                await asyncio.sleep(BACKOFF_SECONDS)

    async def _connect(self, leader: int) -> BrokerConnection | None:
        address = self.address_of(leader)
        if address is None:
            return None
        connection = BrokerConnection(
            address[0], address[1], client_id=f"partita-replica-{self.node_id}",
            request_timeout_ms=30_000, security=self.security,
        )  # fmt: skip
        await connection.connect()
        return connection

    async def _fetch_once(self, connection: BrokerConnection, fetcher: _LeaderFetcher) -> None:
        # An offline replica (its disk failed, or filled up) fetches nothing: it falls
        # out of the ISR while the broker serves everything else.
        ready = [f for f in fetcher.partitions.values() if f.partition.log.offline_reason is None]
        if not ready:
            await asyncio.sleep(BACKOFF_SECONDS)
            return
        rate = self.throttle_rate()
        # A throttled replica asks for at most a quarter second's worth at a time.
        throttled_max = max(16 * 1024, rate // 4) if rate else PARTITION_MAX_BYTES
        topics: dict[str, list[ReplicaFetchPartition]] = {}
        for f in ready:
            p = f.partition
            log_ = p.log
            topics.setdefault(p.topic, []).append(
                ReplicaFetchPartition(
                    p.index,
                    f.leader_epoch,
                    log_.log_end_offset,
                    log_.epochs.latest_epoch,
                    log_.log_start_offset,
                    throttled_max if p.throttled else PARTITION_MAX_BYTES,
                )
            )
        request = ReplicaFetchRequestV12(
            self.node_id,
            list(topics.items()),
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=FETCH_MAX_BYTES,
        )
        response = await connection.request(request)
        errors = False
        throttled_bytes = 0
        for topic in response.responses:
            for answer in topic.partitions:
                followed = fetcher.partitions.get((topic.topic, answer.partition_index))
                if followed is None:
                    continue  # stopped following while the fetch was out
                if answer.error_code:
                    errors = True
                    if answer.error_code != followed.refused_with:
                        followed.refused_with = answer.error_code
                        log.info(
                            "leader refused a follower fetch; retrying",
                            extra={
                                "partition": f"{topic.topic}-{answer.partition_index}",
                                "leader": fetcher.leader,
                                "leader_epoch": followed.leader_epoch,
                                "fetch_offset": followed.partition.log.log_end_offset,
                                "error": error_code_name(answer.error_code),
                            },
                        )
                    await self._on_error(connection, followed, answer.error_code)
                    continue
                followed.refused_with = 0
                if answer.diverging_epoch is not None:
                    self._truncate(followed.partition, *answer.diverging_epoch)
                    continue
                self._apply(followed.partition, answer)
                if followed.partition.throttled and answer.records is not None:
                    throttled_bytes += len(answer.records)
        if errors:
            await asyncio.sleep(BACKOFF_SECONDS)
        if throttled_bytes and rate:
            # Paced so that moving replicas copy at the throttled rate on average.
            await asyncio.sleep(throttled_bytes / rate)

    @staticmethod
    def _truncate(partition: FollowedPartition, epoch: int, end_offset: int) -> None:
        """Cut where the leader's answer and our epochs agree; if our epochs skipped the
        leader's, the next fetch (with our new last epoch) narrows it down further."""
        log_ = partition.log
        cut = truncation_for(
            log_.epochs, log_.log_end_offset, epoch, end_offset, log_.high_watermark
        )
        partition.truncate_to(cut.offset)

    def _apply(self, partition: FollowedPartition, answer: Any) -> None:
        records = answer.records
        if records is not None and len(records):
            whole = _whole_batches(records)
            if whole:
                try:
                    partition.append_as_follower(records[:whole])
                except KafkaStorageError as exc:
                    log.error(
                        "replica offline: cannot append what the leader sent",
                        extra={"partition": f"{partition.topic}-{partition.index}",
                               "error": str(exc)},
                    )  # fmt: skip
                    return
        partition.follow_high_watermark(answer.high_watermark)
        partition.follow_log_start(answer.log_start_offset)

    async def _on_error(self, connection: BrokerConnection, followed: _Followed, code: int) -> None:
        partition = followed.partition
        if code == OFFSET_OUT_OF_RANGE:
            # Our log end is below the leader's log start (retention moved it on): start
            # again where the leader's log starts.
            start = await self._leader_log_start(connection, followed)
            if start is not None and partition.log.log_end_offset < start:
                partition.start_over_at(start)
                log.warning(
                    "follower restarted its log at the leader's log start",
                    extra={"partition": f"{partition.topic}-{partition.index}", "offset": start},
                )

        # NOT_LEADER_OR_FOLLOWER, FENCED / UNKNOWN_LEADER_EPOCH: the image is about to say
        # who leads now; until then, back off.

    async def _leader_log_start(
        self, connection: BrokerConnection, followed: _Followed
    ) -> int | None:
        p = followed.partition
        response = await connection.request(
            ListOffsetsRequest(
                version=4,
                replica_id=self.node_id,
                isolation_level=0,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=p.topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=p.index,
                                current_leader_epoch=followed.leader_epoch,
                                timestamp=EARLIEST,
                            )
                        ],
                    )
                ],
            )
        )
        answer = response.topics[0].partitions[0]
        return None if answer.error_code else int(answer.offset)


def _whole_batches(records: memoryview) -> int:
    """How many bytes of ``records`` are whole batches (a fetch may end in part of one)."""
    end = 0
    try:
        for pos, header in iter_headers(records):
            size = header.batch_length + LOG_OVERHEAD
            if pos + size > len(records):
                break
            end = pos + size
    except KafkaError:
        pass
    return end
