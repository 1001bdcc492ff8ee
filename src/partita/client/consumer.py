"""partita's asyncio consumer, assign mode: positions, fetch, seek, offsets by time.

Fetched batches become records in ``fetched_records`` (aiokafka's compiled batch
reader); records below the requested position (a batch may start earlier) are skipped,
and a partial batch at the end of a response is left for the next fetch. What the
consumer needs before its first record (Metadata, ListOffsets, Fetch) is framed and
read by hand (``protocol.consumer_requests``); kafka-python's classes are loaded only
for consumer groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from partita.client.cluster import Cluster
from partita.client.connection import ConnectionLostError
from partita.client.error_names import describe_error_code
from partita.client.fetched_records import ConsumerRecord, read_batches
from partita.client.security import ClientSecurity
from partita.errors import (
    KafkaError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from partita.protocol.consumer_requests import FetchRequestV11, ListOffsetsRequestV7
from partita.protocol.fetch_response import decode_fetch_response_v11
from partita.protocol.fetched_batches import end_of_whole_batches

if TYPE_CHECKING:
    # Loaded with the first group (kafka-python's request classes): a consumer that only
    # assigns partitions never loads them.
    from partita.client.group_member import GroupMember, RebalanceListener

__all__ = ["AsyncConsumer", "ConsumerRecord", "fetch_request"]

TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1
OFFSET_OUT_OF_RANGE = 1
# LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
# OFFSET_NOT_AVAILABLE: answers that change by themselves once leadership settles.
RETRIABLE_LIST_OFFSETS_ERRORS = frozenset({5, 6, 74, 75, 78})
LIST_OFFSETS_TIMEOUT_S = 60.0  # Kafka's default.api.timeout.ms
RETRY_BACKOFF_S = 0.1  # retry.backoff.ms


@dataclass(slots=True)
class _Fetched:
    """One partition's part of a fetch response, not yet decoded."""

    tp: TopicPartition
    state: _PartitionState
    start: int  # the position the fetch asked from
    end: int  # the offset after its whole batches
    data: bytes | memoryview
    aborted: list[tuple[int, int]] | None  # read_committed: (producer id, first offset)


@dataclass(slots=True)
class _PartitionState:
    position: int | None = None  # the next offset to fetch
    delivered: int | None = None  # the next offset to hand to the application
    paused: bool = False
    high_watermark: int = -1
    # Bumped whenever the position is moved by the application (seek, reset, pause): a
    # fetch that was already in flight for the old position is then thrown away.
    epoch: int = 0
    # KIP-392: the replica the leader told us to read from (one in our client_rack);
    # -1: the leader. Dropped at the first error from it.
    read_replica: int = -1


@dataclass(slots=True)
class _Chunk:
    """Fetched records of one partition, handed out front to back."""

    tp: TopicPartition
    records: list[ConsumerRecord]
    # The offset after the fetched batches: the position once all are handed out, past
    # what yielded no record (transaction markers, aborted or compacted-away records).
    end: int
    next: int = 0


def fetch_request(
    positions: dict[TopicPartition, int],
    *,
    wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_max_bytes: int,
    isolation: int = 0,
    rack: str = "",
) -> FetchRequestV11:
    """A session-less Fetch (v11) for ``positions``, as a consumer (replica id -1) sends it;
    ``rack`` is the consumer's ``client.rack`` (KIP-392)."""
    topics: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), position in positions.items():
        topics.setdefault(topic, []).append((partition, position))
    return FetchRequestV11(
        list(topics.items()),
        max_wait_ms=wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max_bytes,
        isolation_level=isolation,
        rack_id=rack,
    )


class AsyncConsumer:
    def __init__(
        self,
        bootstrap_servers: str | list[str] = "127.0.0.1:9092",
        *,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        isolation_level: str = "read_uncommitted",
        client_id: str = "partita-consumer",
        group_id: str | None = None,
        partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3000,
        group_instance_id: str | None = None,
        check_crcs: bool = True,
        client_rack: str | None = None,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError("auto_offset_reset must be earliest, latest or none")
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation = 1 if isolation_level == "read_committed" else 0
        self.client_rack = client_rack
        self.cluster = Cluster(bootstrap_servers, client_id, security=security)
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._chunks: deque[_Chunk] = deque()
        # The fetch in flight, started as soon as the buffer runs dry so that the next
        # records arrive while the application works on the last ones.
        self._fetching: asyncio.Task[None] | None = None
        # The fetch after it, sent as soon as a response's batch headers say where the
        # next records start (before they are decoded), while little is buffered.
        self._ahead: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[None]] = set()
        self.group: GroupMember | None = None
        if group_id is not None:
            from partita.client.group_member import GroupMember  # noqa: PLC0415

            strategies = list(partition_assignment_strategy)
            self.group = GroupMember(
                self.cluster,
                group_id,
                assignors=strategies,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                group_instance_id=group_instance_id,
                rack=client_rack,
            )
        self.check_crcs = check_crcs
        self.auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self._last_commit = time.monotonic()
        self._subscribed = False

    async def start(self) -> None:
        await self.cluster.refresh([])

    async def stop(self) -> None:
        for task in (self._fetching, self._ahead):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._fetching = self._ahead = None
        if self._commits:
            await asyncio.wait(self._commits)
        if self.group is not None:
            if self.auto_commit and self._subscribed:
                with contextlib.suppress(Exception):
                    await self.commit()
            await self.group.leave()
        await self.cluster.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # -- group membership ----------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        """Join the consumer group for these topics (or every topic matching ``pattern``)."""
        if self.group is None:
            raise ValueError("subscribe() needs a group_id; use assign() without one")
        self.group.subscribe(topics, pattern)
        self.group.listener = listener
        self._subscribed = True

    async def _maintain_group(self) -> None:
        group = self.group
        if group is None or not self._subscribed:
            return
        if group.needs_rejoin and self.auto_commit and group.owned:
            with contextlib.suppress(Exception):
                await self.commit()
        assigned = await group.ensure_joined()
        if assigned is not None:
            self.assign(assigned)
            unpositioned = [tp for tp in assigned if self._partitions[tp].position is None]
            if unpositioned:
                committed = await group.committed(unpositioned)
                for tp, offset in committed.items():
                    self._partitions[tp].position = offset
                    self._partitions[tp].delivered = offset
        if self.auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval:
            with contextlib.suppress(Exception):
                await self.commit()

    async def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit the given offsets, or the current position of every assigned partition."""
        if self.group is None:
            raise ValueError("commit() needs a group_id")
        if offsets is None:
            offsets = {
                tp: s.delivered for tp, s in self._partitions.items() if s.delivered is not None
            }
        await self.group.commit(offsets)
        self._last_commit = time.monotonic()

    def commit_async(
        self,
        offsets: dict[TopicPartition, int] | None = None,
        callback: Callable[[dict[TopicPartition, int], BaseException | None], Any] | None = None,
    ) -> asyncio.Task[None]:
        """Kafka's ``commitAsync``: start the commit and return at once. The offsets are
        taken now (what was handed out so far); ``callback(offsets, error)`` runs when the
        coordinator has answered. Commits still in flight finish before ``stop()``."""
        if self.group is None:
            raise ValueError("commit_async() needs a group_id")
        if offsets is None:
            offsets = {
                tp: s.delivered for tp, s in self._partitions.items() if s.delivered is not None
            }
        taken = dict(offsets)
        task = asyncio.create_task(self.commit(taken))
        self._commits.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._commits.discard(finished)
            error = None if finished.cancelled() else finished.exception()
            if callback is not None:
                callback(taken, error)

        task.add_done_callback(done)
        return task

    async def committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self.group is None:
            raise ValueError("committed() needs a group_id")
        return await self.group.committed(partitions)

    # -- assignment and positions ------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        kept = {tp: self._partitions.get(tp, _PartitionState()) for tp in partitions}
        self._partitions = kept
        self._chunks = deque(c for c in self._chunks if c.tp in kept)

    def assignment(self) -> set[TopicPartition]:
        return set(self._partitions)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._partitions[tp].position = offset
        self._partitions[tp].delivered = offset
        self._drop_buffered(tp)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        await self._reset(list(partitions) or list(self._partitions), EARLIEST)

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        await self._reset(list(partitions) or list(self._partitions), LATEST)

    async def position(self, tp: TopicPartition) -> int:
        state = self._partitions[tp]
        if state.position is None:
            await self._reset_to_policy([tp])
        if state.delivered is not None:
            return state.delivered
        assert state.position is not None
        return state.position

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._partitions[tp].paused = True
            self._drop_buffered(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._partitions[tp].paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self._partitions.items() if s.paused}

    def _drop_buffered(self, tp: TopicPartition) -> None:
        """Forget what was fetched for ``tp`` but not handed out: the next fetch starts
        again at the first record the application has not seen."""
        self._chunks = deque(c for c in self._chunks if c.tp != tp)
        state = self._partitions.get(tp)
        if state is not None:
            state.epoch += 1
            if state.delivered is not None:
                state.position = state.delivered

    # -- offset lookups ----------------------------------------------------------

    async def _leader(self, tp: TopicPartition) -> int:
        """The node that leads ``tp`` (-1 while it has none); UnknownTopicOrPartitionError
        naming the partition when the topic does not have it."""
        info = await self.cluster.topic(tp[0], auto_create=False)
        leader = info.leaders.get(tp[1])
        if leader is None:
            raise UnknownTopicOrPartitionError(
                f"topic {tp[0]!r} has no partition {tp[1]} (partitions: 0-{info.partitions - 1})"
            )
        return leader

    async def list_offsets(
        self, specs: dict[TopicPartition, int], *, timeout_s: float = LIST_OFFSETS_TIMEOUT_S
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets: timestamp, or -2 earliest, -1 latest, -3 max timestamp, per
        partition; returns (offset, timestamp), offset -1 when nothing qualifies.

        As Kafka's consumer does, a partition whose leader is moving or was just elected
        (no leader, NOT_LEADER_OR_FOLLOWER, a leader epoch in flux, OFFSET_NOT_AVAILABLE
        while a new leader's high watermark catches up) is asked again after a metadata
        refresh, until ``timeout_s`` (default.api.timeout.ms) runs out."""
        deadline = time.monotonic() + timeout_s
        result: dict[TopicPartition, tuple[int, int]] = {}
        pending = dict(specs)
        while True:
            retry: dict[TopicPartition, str] = {}
            by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
            for (topic, partition), timestamp in pending.items():
                leader = await self._leader((topic, partition))
                if leader < 0:
                    retry[(topic, partition)] = "it has no leader right now"
                    continue
                by_leader.setdefault(leader, {}).setdefault(topic, []).append(
                    (partition, timestamp)
                )
            for leader, topics in by_leader.items():
                request = ListOffsetsRequestV7(list(topics.items()), isolation_level=self.isolation)
                try:
                    connection = await self.cluster.connection(leader)
                    response = await connection.request(request)
                except (ConnectionLostError, OSError) as exc:
                    # The leader went away (killed, restarting): the next metadata names
                    # its successor.
                    for topic_name, asked in topics.items():
                        for partition, _timestamp in asked:
                            retry[(topic_name, partition)] = f"broker {leader}: {exc}"
                    continue
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = (topic.name, p.partition_index)
                        if p.error_code in RETRIABLE_LIST_OFFSETS_ERRORS:
                            retry[tp] = describe_error_code(p.error_code)
                        elif p.error_code:
                            raise KafkaError(
                                f"cannot list offsets of {tp[0]}-{tp[1]}: "
                                f"{describe_error_code(p.error_code)}"
                            )
                        else:
                            result[tp] = (p.offset, p.timestamp)
            if not retry:
                return result
            if time.monotonic() >= deadline:
                (topic, partition), reason = next(iter(retry.items()))
                raise LeaderNotAvailableError(
                    f"cannot list offsets of {topic}-{partition} within {timeout_s:g} s: {reason}"
                )
            pending = {tp: specs[tp] for tp in retry}
            await asyncio.sleep(RETRY_BACKOFF_S)
            with contextlib.suppress(KafkaError, OSError):
                await self.cluster.refresh(sorted({t for t, _ in retry}), auto_create=False)

    async def offsets_for_times(
        self, times: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        found = await self.list_offsets(times)
        return {tp: (v if v[0] >= 0 else None) for tp, v in found.items()}

    async def beginning_offsets(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {
            tp: v[0]
            for tp, v in (await self.list_offsets(dict.fromkeys(partitions, EARLIEST))).items()
        }

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {
            tp: v[0]
            for tp, v in (await self.list_offsets(dict.fromkeys(partitions, LATEST))).items()
        }

    async def _reset(self, partitions: list[TopicPartition], spec: int) -> None:
        found = await self.list_offsets(dict.fromkeys(partitions, spec))
        for tp, (offset, _ts) in found.items():
            self._partitions[tp].position = offset
            self._partitions[tp].delivered = offset
            self._drop_buffered(tp)

    async def _reset_to_policy(self, partitions: list[TopicPartition]) -> None:
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(f"no position for {partitions} and auto_offset_reset=none")
        await self._reset(partitions, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)

    # -- fetching ----------------------------------------------------------------

    async def getmany(
        self, timeout_ms: int = 1000, max_records: int = 10_000
    ) -> list[ConsumerRecord]:
        """Up to ``max_records`` records, waiting at most ``timeout_ms`` for some."""
        deadline = time.monotonic() + timeout_ms / 1000
        await self._maintain_group()
        while not self._chunks:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._partitions:
                if not self._partitions and remaining > 0:
                    await asyncio.sleep(remaining)
                return []
            fetching = self._start_fetch()
            await asyncio.wait([fetching], timeout=remaining)
            if not fetching.done():
                continue  # time is up: the fetch goes on and serves the next call
            self._fetching = None
            fetching.result()  # a failed fetch raises here, in the caller
            if self.group is not None and self.group.needs_rejoin:
                break
        out = self._hand_out(max_records)
        if not self._chunks and self._fetching is None:
            self._start_fetch()
        return out

    def _start_fetch(self) -> asyncio.Task[None]:
        if self._fetching is None:
            if self._ahead is not None:
                self._fetching, self._ahead = self._ahead, None
            else:
                wait = self.fetch_max_wait_ms / 1000
                self._fetching = asyncio.create_task(self._fetch_once(wait))
        return self._fetching

    def _hand_out(self, max_records: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        while self._chunks and len(out) < max_records:
            chunk = self._chunks[0]
            stop = min(len(chunk.records), chunk.next + max_records - len(out))
            if not out and chunk.next == 0 and stop == len(chunk.records):
                out = chunk.records  # the whole chunk: no copy
            else:
                out.extend(chunk.records[chunk.next : stop])
            chunk.next = stop
            # What was handed out is what position() and commit() count as consumed;
            # records fetched but still buffered are not.
            state = self._partitions.get(chunk.tp)
            if stop == len(chunk.records):
                self._chunks.popleft()
                if state is not None:
                    state.delivered = chunk.end
            elif state is not None:
                state.delivered = chunk.records[stop - 1].offset + 1
        return out

    async def _fetch_once(self, wait: float) -> None:
        active = [tp for tp, s in self._partitions.items() if not s.paused]
        missing = [tp for tp in active if self._partitions[tp].position is None]
        if missing:
            await self._reset_to_policy(missing)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in active:
            replica = self._partitions[tp].read_replica
            leader = replica if replica in self.cluster.brokers else await self._leader(tp)
            if leader < 0:  # being elected: fetched once the metadata names a leader
                with contextlib.suppress(Exception):
                    await self.cluster.refresh([tp[0]], auto_create=False)
                continue
            by_leader.setdefault(leader, []).append(tp)
        if not by_leader:
            await asyncio.sleep(wait)
            return
        responses = await asyncio.gather(
            *(self._fetch_from(leader, tps, wait) for leader, tps in by_leader.items())
        )
        arrived = [item for response in responses for item in response]
        # Every position has moved past what arrived: ask for what follows now, so the
        # broker works while these records are decoded. Bounded: only while little is
        # buffered, so an application that stops polling stops the fetching too.
        if arrived and self._ahead is None and len(self._chunks) < 2:
            self._ahead = asyncio.create_task(self._fetch_once(self.fetch_max_wait_ms / 1000))
        for fetched in arrived:
            self._absorb(fetched)

    async def _fetch_from(
        self, leader: int, partitions: list[TopicPartition], wait: float
    ) -> list[_Fetched]:
        """Fetch from one leader; moves each position past the whole batches that arrived
        and returns them, still undecoded, with the position they start from."""
        request = fetch_request(
            {tp: self._partitions[tp].position or 0 for tp in partitions},
            wait_ms=int(wait * 1000),
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            partition_max_bytes=self.max_partition_fetch_bytes,
            isolation=self.isolation,
            rack=self.client_rack or "",
        )
        epochs = {tp: self._partitions[tp].epoch for tp in partitions}
        connection = await self.cluster.connection(leader)
        response = await connection.request(request, decoder=decode_fetch_response_v11)
        arrived: list[_Fetched] = []
        for topic in response.responses:
            for p in topic.partitions:
                tp = (topic.topic, p.partition_index)
                state = self._partitions.get(tp)
                if state is None or state.paused or state.epoch != epochs.get(tp):
                    continue
                if p.error_code and state.read_replica >= 0:
                    state.read_replica = -1  # the follower cannot serve: back to the leader
                    continue
                if p.preferred_read_replica >= 0 and p.preferred_read_replica != leader:
                    state.read_replica = p.preferred_read_replica  # no records come with it
                    continue
                if p.error_code == OFFSET_OUT_OF_RANGE:
                    state.position = state.delivered = None
                    continue
                if p.error_code:
                    with contextlib.suppress(Exception):
                        await self.cluster.refresh([topic.topic])
                    continue
                state.high_watermark = p.high_watermark
                data = p.records or b""
                start = state.position or 0
                state.position = end_of_whole_batches(data, start)
                if state.position > start:
                    arrived.append(
                        _Fetched(tp, state, start, state.position, data, p.aborted_transactions)
                    )
        return arrived

    def _absorb(self, arrived: _Fetched) -> None:
        tp, state, position = arrived.tp, arrived.state, arrived.start
        try:
            fetched = self._decode(arrived)
        except Exception:
            # Not delivered, so not skipped: back to where these records start, and the
            # fetch already sent for what follows them is thrown away.
            state.position = position
            state.epoch += 1
            raise
        self._chunks.append(_Chunk(tp, fetched, arrived.end))

    def _decode(self, arrived: _Fetched) -> list[ConsumerRecord]:
        return read_batches(
            arrived.tp, arrived.data, arrived.start, self.check_crcs, arrived.aborted
        )

    def highwater(self, tp: TopicPartition) -> int:
        return self._partitions[tp].high_watermark
