"""The asyncio side of the group coordinator: parked JoinGroup/SyncGroup requests become
futures, a timer drives the state machine's deadlines, and committed offsets are written
to (and reloaded from) the compacted ``__consumer_offsets`` topic.

A group's coordinator is the leader of its ``__consumer_offsets`` partition, as in Kafka:
when this broker becomes a partition's leader it loads that partition's groups from the
log, and when it stops leading it forgets them; requests for groups it does not
coordinate get NOT_COORDINATOR, and clients ask FindCoordinator again. A broker alone
leads every partition, so it coordinates every group."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from partita.coordinator.group_machine import (
    NONE,
    CommittedOffset,
    GroupCoordinator,
    JoinRequest,
    JoinResult,
    SyncRequest,
    SyncResult,
)
from partita.coordinator.offset_records import (
    OFFSETS_TOPIC,
    group_key,
    group_partition,
    offset_key,
    offset_value,
    parse_key,
    parse_offset_value,
)
from partita.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    KafkaError,
    NotCoordinatorError,
)
from partita.protocol.control_records import TxnMarker, read_marker
from partita.protocol.records import Record, build_batch, decode_records
from partita.server.clocks import now_ms, steady_ms
from partita.server.partition import until_replicated

if TYPE_CHECKING:
    from partita.cluster.store import MetadataStore
    from partita.server.config import BrokerConfig
    from partita.server.partition import Partition
    from partita.server.replica_manager import ReplicaManager
    from partita.server.topic_admin import TopicAdmin

log = logging.getLogger(__name__)

_TICK_SECONDS = 0.1
REPLICATION_TIMEOUT_S = 30.0
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


@dataclass(eq=False, repr=False)
class GroupService:
    config: BrokerConfig
    store: MetadataStore
    replicas: ReplicaManager
    topic_admin: TopicAdmin
    partitions: int = field(init=False)  # of __consumer_offsets
    retention_ms: int = field(init=False)
    core: GroupCoordinator = field(init=False)
    # The offsets partitions whose groups live here.
    loaded: set[int] = field(default_factory=set, init=False)
    # Offsets committed in a transaction (TxnOffsetCommit), by producer id: the group
    # sees them only once the transaction's COMMIT marker is on their partition.
    pending: dict[int, list[tuple[str, str, int, CommittedOffset]]] = field(
        default_factory=dict, init=False
    )
    _ticker: asyncio.Task[None] | None = field(default=None, init=False)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """An open transaction holds an offset for this partition of the group: an
        OffsetFetch that requires stable offsets is answered UNSTABLE_OFFSET_COMMIT."""
        return any(
            (g, t, p) == (group_id, topic, partition)
            for held in self.pending.values()
            for g, t, p, _offset in held
        )

    def __post_init__(self) -> None:
        config = self.config
        self.partitions = config.get_int("offsets.topic.num.partitions")
        self.retention_ms = config.get_int("offsets.retention.minutes") * 60_000
        self.core = GroupCoordinator(
            self._deliver,
            initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
        )
        self.replicas.on_leadership_change(self._leadership_moved)
        self.replicas.on_marker(self._marker_written)

    # -- lifecycle ---------------------------------------------------------------

    def coordinates(self, group_id: str) -> bool:
        return group_partition(group_id, self.partitions) in self.loaded

    def _leadership_moved(self, partition: Partition, leads: bool) -> None:
        if partition.topic != OFFSETS_TOPIC:
            return
        if leads:
            self._load_partition(partition)
        else:
            self._unload_partition(partition.index)

    def _load_partition(self, partition: Partition) -> None:
        """Rebuild this partition's groups and committed offsets from its log."""
        started = time.monotonic()
        self._unload_partition(partition.index)
        loaded = 0
        for batch in partition.log.iter_batches():
            header, records = decode_records(batch)
            if header.is_control:
                if header.is_transactional:
                    self._end_transaction(partition.index, read_marker(batch))
            elif header.is_transactional:  # a transaction's offsets: pending until its marker
                for record in records:
                    self._hold(header.producer_id, record)
            else:
                for record in records:
                    loaded += self._replay(record)
        self.loaded.add(partition.index)
        log.info(
            "group offsets loaded",
            extra={
                "partition": partition.index,
                "records": loaded,
                "groups": len(self.core.groups),
                "seconds": round(time.monotonic() - started, 3),
            },
        )

    def _hold(self, producer_id: int, record: Record) -> None:
        if record.key is None or record.value is None:
            return
        key = parse_key(record.key)
        if key is not None and len(key) == 3:
            group, topic, index = key
            held = self.pending.setdefault(producer_id, [])
            held.append((group, topic, index, parse_offset_value(record.value)))

    def _marker_written(self, partition: Partition, marker: TxnMarker) -> None:
        if partition.topic == OFFSETS_TOPIC:
            self._end_transaction(partition.index, marker)

    def _end_transaction(self, index: int, marker: TxnMarker) -> None:
        """A transaction ended on offsets partition ``index``: its offsets there become
        the groups' (COMMIT) or are dropped (ABORT)."""
        held = self.pending.pop(marker.producer_id, [])
        mine = [h for h in held if group_partition(h[0], self.partitions) == index]
        rest = [h for h in held if group_partition(h[0], self.partitions) != index]
        if rest:
            self.pending[marker.producer_id] = rest
        if marker.commit:
            for group, topic, partition_index, value in mine:
                self.core.store_offset(group, topic, partition_index, value)

    async def commit_in_transaction(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: list[tuple[str, int, CommittedOffset]],
    ) -> int:
        """TxnOffsetCommit: the offsets are written with the producer's id and epoch as a
        transactional batch (acks=all, as Kafka writes them: the producer commits the
        transaction only once they are safe), and held back until the transaction ends."""
        if not self.coordinates(group_id):
            return NotCoordinatorError.code
        if not offsets:
            return NONE
        now = now_ms()
        records = [
            Record(i, now, offset_key(group_id, t, p), offset_value(v))
            for i, (t, p, v) in enumerate(offsets)
        ]
        batch = build_batch(
            records, producer_id=producer_id, producer_epoch=producer_epoch, transactional=True
        )
        try:
            partition = self.replicas.leader_partition(
                OFFSETS_TOPIC, group_partition(group_id, self.partitions)
            )
            partition.check_enough_replicas()
            epoch = partition.leader_epoch
            appended = partition.append_from_coordinator(batch)
        except InvalidProducerEpochError as exc:
            return exc.code  # a fenced instance: not the coordinator's trouble
        except KafkaError as exc:
            log.error(
                "transactional offset commit could not be written",
                extra={"group": group_id, "error": str(exc)},
            )
            return CoordinatorNotAvailableError.code  # retriable
        held = self.pending.setdefault(producer_id, [])
        held += [(group_id, t, p, v) for t, p, v in offsets]
        try:
            await until_replicated(partition, appended, epoch, REPLICATION_TIMEOUT_S)
        except KafkaError as exc:
            # Written here but maybe not kept by the next leader: the producer retries.
            log.warning(
                "transactional offset commit not replicated",
                extra={"group": group_id, "error": str(exc)},
            )
            return CoordinatorNotAvailableError.code
        return NONE

    def _unload_partition(self, index: int) -> None:
        self.loaded.discard(index)
        for producer_id, held in list(self.pending.items()):
            kept = [h for h in held if group_partition(h[0], self.partitions) != index]
            if kept:
                self.pending[producer_id] = kept
            else:
                del self.pending[producer_id]
        gone = [g for g in self.core.groups if group_partition(g, self.partitions) == index]
        for group_id in gone:
            del self.core.groups[group_id]
        if gone:
            log.info(
                "no longer coordinating groups", extra={"partition": index, "groups": len(gone)}
            )

    def _replay(self, record: Record) -> int:
        if record.key is None:
            return 0
        try:
            key = parse_key(record.key)
        except Exception:
            log.warning("skipping an unreadable __consumer_offsets key")
            return 0
        if key is None or len(key) != 3:
            return 0
        group, topic, partition = key
        if record.value is None:
            self.core.forget_offset(group, topic, partition)
        else:
            self.core.store_offset(group, topic, partition, parse_offset_value(record.value))
        return 1

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_forever())

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _tick_forever(self) -> None:
        check_every = 600_000
        next_expiry = steady_ms() + check_every
        while True:
            await asyncio.sleep(_TICK_SECONDS)
            now = steady_ms()
            try:
                self.core.tick(now)
                if now >= next_expiry:
                    next_expiry = now + check_every
                    self.expire_offsets(now_ms())  # retention counts from commit times
            except Exception:
                log.exception("group coordinator tick failed")

    def expire_offsets(self, now: int) -> int:
        expired = self.core.expire_offsets(now, self.retention_ms)
        for group_id, topic, partition in expired:
            self._write(group_id, offset_key(group_id, topic, partition), None)
        if expired:
            log.info("expired committed offsets", extra={"count": len(expired)})
        return len(expired)

    # -- parked requests ---------------------------------------------------------

    @staticmethod
    def _deliver(handle: Any, result: JoinResult | SyncResult) -> None:
        if handle is not None and not handle.done():
            handle.set_result(result)

    async def join(self, request: JoinRequest) -> JoinResult:
        if not self.coordinates(request.group_id):
            return JoinResult(NotCoordinatorError.code, member_id=request.member_id)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        immediate = self.core.join(request, future, steady_ms())
        if immediate is not None:
            return immediate
        return await future

    async def sync(self, request: SyncRequest) -> SyncResult:
        if not self.coordinates(request.group_id):
            return SyncResult(NotCoordinatorError.code)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        immediate = self.core.sync(request, future, steady_ms())
        if immediate is not None:
            return immediate
        return await future

    # -- offsets -----------------------------------------------------------------

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (offsets.topic.replication.factor)."""
        wanted = self.config.get_int("offsets.topic.replication.factor")
        await self.topic_admin.ensure_internal(
            OFFSETS_TOPIC, self.partitions, wanted, OFFSETS_TOPIC_CONFIGS
        )

    def coordinator_of(self, group_id: str) -> int:
        """The node id of the group's coordinator, or -1 while it has none."""
        return self.topic_admin.leader_of(OFFSETS_TOPIC, group_partition(group_id, self.partitions))

    def _write(self, group_id: str, key: bytes, value: bytes | None) -> None:
        index = group_partition(group_id, self.partitions)
        partition = self.replicas.leader_partition(OFFSETS_TOPIC, index)
        partition.append(build_batch([Record(0, now_ms(), key, value)]))

    def commit(
        self,
        group_id: str,
        generation: int,
        member_id: str,
        instance_id: str | None,
        offsets: list[tuple[str, int, CommittedOffset]],
        version: int,
    ) -> tuple[int, list[int]]:
        """Validate, then persist each offset; (group error, per-offset error codes)."""
        if not self.coordinates(group_id):
            return NotCoordinatorError.code, [NotCoordinatorError.code] * len(offsets)
        now = now_ms()
        error = self.core.validate_offset_commit(
            group_id, generation, member_id, instance_id, steady_ms(), version
        )
        if error != NONE:
            return error, [error] * len(offsets)
        if not offsets:
            return NONE, []
        records = [
            Record(i, now, offset_key(group_id, t, p), offset_value(v))
            for i, (t, p, v) in enumerate(offsets)
        ]
        index = group_partition(group_id, self.partitions)
        try:
            partition = self.replicas.leader_partition(OFFSETS_TOPIC, index)
            partition.append(build_batch(records))
        except KafkaError as exc:
            log.error(
                "offset commit could not be written", extra={"group": group_id, "error": str(exc)}
            )
            return 15, [15] * len(offsets)  # COORDINATOR_NOT_AVAILABLE: retriable
        for topic, partition_index, value in offsets:
            self.core.store_offset(group_id, topic, partition_index, value)
        return NONE, [NONE] * len(offsets)

    def delete_group(self, group_id: str) -> int:
        if not self.coordinates(group_id):
            return NotCoordinatorError.code
        error, removed = self.core.delete_group(group_id, steady_ms())
        if error == NONE:
            for topic, partition in removed:
                self._write(group_id, offset_key(group_id, topic, partition), None)
            self._write(group_id, group_key(group_id), None)
        return error

    def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[int, dict[tuple[str, int], int]]:
        if not self.coordinates(group_id):
            return NotCoordinatorError.code, {}
        before = self.core.committed(group_id)
        error, results = self.core.delete_offsets(group_id, partitions)
        for tp, code in results.items():
            if code == NONE and tp in before:
                self._write(group_id, offset_key(group_id, tp[0], tp[1]), None)
        return error, results
