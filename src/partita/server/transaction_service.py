"""The asyncio side of the transaction coordinator: its state in ``__transaction_state``,
its markers sent to the partitions' leaders, and its timer (KIP-98).

A transactional id's coordinator is the leader of its ``__transaction_state`` partition,
as a group's is of its ``__consumer_offsets`` one: becoming leader loads the partition's
ids (and finishes what a dead coordinator left ending), losing it forgets them. The rules
are the machine's (coordinator/transaction_machine.py); this shell writes what a
decision asks -- waiting for the write to be replicated to the ISR, as Kafka's
coordinator writes with acks=all, so an ending survives this broker's death -- then
sends the markers: a leader here appends them itself, another broker gets
WriteTxnMarkers. A transaction is complete only once every marker is written; until
then the markers are retried (a leader may be moving), and the id answers
CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from partita.client.connection import BrokerConnection
from partita.client.security import ClientSecurity
from partita.coordinator.transaction_machine import (
    CONCURRENT_TRANSACTIONS,
    NONE,
    Decision,
    Markers,
    TransactionMachine,
    TxnMetadata,
)
from partita.coordinator.transaction_records import (
    TRANSACTION_TOPIC,
    read_transaction_key,
    read_transaction_value,
    transaction_key,
    transaction_partition,
    transaction_value,
)
from partita.errors import CoordinatorNotAvailableError, KafkaError, NotCoordinatorError
from partita.protocol.control_records import TxnMarker
from partita.protocol.records import Record, build_batch, decode_records
from partita.server.clocks import now_ms
from partita.server.partition import until_replicated

if TYPE_CHECKING:
    from partita.cluster.store import MetadataStore
    from partita.server.config import BrokerConfig
    from partita.server.partition import Partition
    from partita.server.replica_manager import ReplicaManager
    from partita.server.topic_admin import TopicAdmin

log = logging.getLogger(__name__)

STATE_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
}
WRITE_TIMEOUT_S = 30.0
MARKER_RETRY_S = 0.2


@dataclass(eq=False, repr=False)
class TransactionService:
    config: BrokerConfig
    store: MetadataStore
    replicas: ReplicaManager
    topic_admin: TopicAdmin
    node_id: int
    # How this broker reaches the others (their inter-broker listener) for markers.
    address_of: Callable[[int], tuple[str, int] | None] | None = None
    security: ClientSecurity | None = None
    partitions: int = field(init=False)
    machine: TransactionMachine = field(init=False)
    loaded: set[int] = field(default_factory=set, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _ticker: asyncio.Task[None] | None = field(default=None, init=False)
    _connections: dict[int, BrokerConnection] = field(default_factory=dict, init=False)
    _owed: list[Markers] = field(default_factory=list, init=False)  # found before start()

    def __post_init__(self) -> None:
        self.partitions = self.config.get_int("transaction.state.log.num.partitions")
        self.machine = TransactionMachine(
            max_timeout_ms=self.config.get_int("transaction.max.timeout.ms")
        )
        self.replicas.on_leadership_change(self._leadership_moved)

    # -- where an id lives ------------------------------------------------------------

    def partition_of(self, transactional_id: str) -> int:
        return transaction_partition(transactional_id, self.partitions)

    def coordinates(self, transactional_id: str) -> bool:
        return self.partition_of(transactional_id) in self.loaded

    def coordinator_of(self, transactional_id: str) -> int:
        """The node id of the id's coordinator, or -1 while it has none."""
        return self.topic_admin.leader_of(TRANSACTION_TOPIC, self.partition_of(transactional_id))

    async def ensure_state_topic(self) -> None:
        """Create ``__transaction_state`` on first use
        (transaction.state.log.replication.factor and .min.isr)."""
        wanted = self.config.get_int("transaction.state.log.replication.factor")
        min_isr = self.config.get_int("transaction.state.log.min.isr")
        configs = {**STATE_TOPIC_CONFIGS, "min.insync.replicas": str(min_isr)}
        await self.topic_admin.ensure_internal(TRANSACTION_TOPIC, self.partitions, wanted, configs)

    # -- loading ----------------------------------------------------------------------

    def _leadership_moved(self, partition: Partition, leads: bool) -> None:
        if partition.topic != TRANSACTION_TOPIC:
            return
        if leads:
            self._load(partition)
        else:
            self.loaded.discard(partition.index)
            self.machine.unload(lambda tid: self.partition_of(tid) in self.loaded)

    def _load(self, partition: Partition) -> None:
        records: list[tuple[str, TxnMetadata | None]] = []
        for batch in partition.log.iter_batches():
            for record in decode_records(batch)[1]:
                if record.key is None:
                    continue
                try:
                    tid = read_transaction_key(record.key)
                    records.append((tid, read_transaction_value(tid, record.value)))
                except KafkaError:
                    log.warning(
                        "skipping an unreadable __transaction_state record",
                        extra={"partition": partition.index, "offset": record.offset},
                    )
        owed = self.machine.load(records)
        self.loaded.add(partition.index)
        log.info(
            "transactional ids loaded",
            extra={"partition": partition.index, "records": len(records), "ending": len(owed)},
        )
        self._owed.extend(owed)  # what the previous coordinator left ending
        with contextlib.suppress(RuntimeError):  # loaded before the loop runs: start() sends
            asyncio.get_running_loop()
            self._send_owed()

    def _send_owed(self) -> None:
        owed, self._owed = self._owed, []
        for markers in owed:
            self._spawn(self._complete(markers))

    # -- requests ---------------------------------------------------------------------

    async def init_producer_id(self, tid: str, timeout_ms: int) -> tuple[int, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id."""
        if not self.coordinates(tid):
            return NotCoordinatorError.code, -1, -1
        spare = -1
        if self.machine.needs_new_producer_id(tid):
            spare = await self.store.allocate_producer_id()
        decision = self.machine.init_producer_id(tid, timeout_ms, now_ms(), lambda: spare)
        error = await self._apply(decision)
        if error or decision.write is None:
            return error or decision.error, -1, -1
        return NONE, *decision.producer

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> int:
        if not self.coordinates(tid):
            return NotCoordinatorError.code
        decision = self.machine.add_partitions(tid, producer_id, epoch, partitions, now_ms())
        return await self._apply(decision)

    async def end_transaction(self, tid: str, producer_id: int, epoch: int, commit: bool) -> int:
        if not self.coordinates(tid):
            return NotCoordinatorError.code
        decision = self.machine.end_transaction(tid, producer_id, epoch, commit, now_ms())
        return await self._apply(decision)

    # -- writing and marking ------------------------------------------------------------

    async def _apply(self, decision: Decision) -> int:
        """Write what the decision asks, adopt it, send its markers; the client's error."""
        if decision.write is None:
            return decision.error
        metadata = decision.write
        try:
            await self._persist(metadata)
        except KafkaError as exc:
            self.machine.write_failed(metadata.transactional_id)
            log.warning(
                "transaction state not written",
                extra={"transactional_id": metadata.transactional_id, "error": str(exc)},
            )
            return CoordinatorNotAvailableError.code  # retriable: the client asks again
        self.machine.written(metadata)
        if decision.markers is not None:
            self._spawn(self._complete(decision.markers))
        return decision.error

    async def _persist(self, metadata: TxnMetadata) -> None:
        """Append the id's new state and wait until the ISR has it (acks=all)."""
        await self._write_record(metadata.transactional_id, transaction_value(metadata))

    async def _write_record(self, tid: str, value: bytes | None) -> None:
        """The id's record (None: its tombstone), written with acks=all."""
        partition = self.replicas.leader_partition(TRANSACTION_TOPIC, self.partition_of(tid))
        partition.check_enough_replicas()
        record = Record(0, now_ms(), transaction_key(tid), value)
        epoch = partition.leader_epoch
        appended = partition.append(build_batch([record]))
        await until_replicated(partition, appended, epoch, WRITE_TIMEOUT_S)

    def _coordinator_epoch(self, tid: str) -> int | None:
        """The leader epoch of the id's __transaction_state partition while this broker
        leads it: the coordinator epoch its markers carry, so that partitions refuse a
        coordinator that has since lost the id (TRANSACTION_COORDINATOR_FENCED)."""
        if not self.coordinates(tid):
            return None
        partition = self.replicas.partitions.get((TRANSACTION_TOPIC, self.partition_of(tid)))
        if partition is None or not partition.is_leader:
            return None
        return partition.leader_epoch

    async def _complete(self, markers: Markers) -> None:
        """Write every marker, then the transaction's completion; retried until done, or
        until this broker no longer coordinates the id as it did when the transaction
        began ending (a new coordinator, or this one reloaded, finishes it)."""
        tid = markers.transactional_id
        epoch = self._coordinator_epoch(tid)
        if epoch is None:
            return
        marker = TxnMarker(markers.producer_id, markers.producer_epoch, markers.commit, epoch)
        remaining = set(markers.partitions)
        while remaining:
            if self._coordinator_epoch(tid) != epoch:
                return
            remaining = await self._write_markers(marker, remaining)
            if remaining:
                await asyncio.sleep(MARKER_RETRY_S)
        while True:
            if self._coordinator_epoch(tid) != epoch:
                return
            decision = self.machine.markers_written(tid, now_ms(), markers)
            if decision.error == CONCURRENT_TRANSACTIONS:
                await asyncio.sleep(MARKER_RETRY_S)
                continue
            if decision.write is None:
                return  # completed already, or no longer this transaction
            if await self._apply(decision) == NONE:
                log.info(
                    "transaction complete",
                    extra={"transactional_id": tid, "commit": markers.commit,
                           "partitions": len(markers.partitions)},
                )  # fmt: skip
                return
            await asyncio.sleep(MARKER_RETRY_S)

    async def _write_markers(
        self, marker: TxnMarker, partitions: set[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        """Write the marker on each partition; the ones still to do."""
        left: set[tuple[str, int]] = set()
        by_leader: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for topic, index in sorted(partitions):
            state = self.store.topics.get(topic)
            if state is None or index not in state.partitions:
                continue  # deleted since: nothing to mark
            leader = state.partitions[index].leader
            if leader < 0:
                left.add((topic, index))
            else:
                by_leader[leader].append((topic, index))
        # Every leader at once, and here every partition at once: each waits for its ISR.
        sends = [
            self._mark_here(marker, owned) if leader == self.node_id
            else self._send_markers(leader, marker, owned)
            for leader, owned in by_leader.items()
        ]  # fmt: skip
        for undone in await asyncio.gather(*sends):
            left |= undone
        return left

    async def _mark_here(
        self, marker: TxnMarker, partitions: list[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        async def one(topic: str, index: int) -> bool:
            try:
                await self.replicas.write_marker(topic, index, marker)
            except KafkaError as exc:
                log.info(
                    "marker not written yet",
                    extra={"partition": f"{topic}-{index}", "error": str(exc)},
                )
                return False
            return True

        written = await asyncio.gather(*(one(topic, index) for topic, index in partitions))
        return {tp for tp, done in zip(partitions, written, strict=True) if not done}

    async def _send_markers(
        self, leader: int, marker: TxnMarker, partitions: list[tuple[str, int]]
    ) -> set[tuple[str, int]]:
        from kafka.protocol.producer import WriteTxnMarkersRequest  # noqa: PLC0415

        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in partitions:
            by_topic[topic].append(index)
        request = WriteTxnMarkersRequest(
            version=1,
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    transaction_result=marker.commit,
                    topics=[
                        WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                            name=name, partition_indexes=indexes
                        )
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=marker.coordinator_epoch,
                )
            ],
        )
        try:
            connection = await self._connection(leader)
            response = await connection.request(request)
        except (OSError, KafkaError) as exc:
            self._connections.pop(leader, None)
            log.info("markers not sent yet", extra={"leader": leader, "error": str(exc)})
            return set(partitions)
        left: set[tuple[str, int]] = set()
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    if p.error_code:
                        left.add((topic.name, p.partition_index))
        return left

    async def _connection(self, node: int) -> BrokerConnection:
        existing = self._connections.get(node)
        if existing is not None and not existing.closed:
            return existing
        address = self.address_of(node) if self.address_of is not None else None
        if address is None:
            raise OSError(f"broker {node} has no known address")
        connection = BrokerConnection(
            address[0], address[1], client_id=f"partita-txn-coordinator-{self.node_id}",
            request_timeout_ms=30_000, security=self.security,
        )  # fmt: skip
        await connection.connect()
        self._connections[node] = connection
        return connection

    # -- the timer ----------------------------------------------------------------------

    def start(self) -> None:
        self._ticker = asyncio.create_task(self._tick_forever())
        self._send_owed()

    async def stop(self) -> None:
        tasks = [t for t in (self._ticker, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for connection in self._connections.values():
            with contextlib.suppress(Exception):
                await connection.close()

    async def _tick_forever(self) -> None:
        interval = self.config.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        )
        while True:
            await asyncio.sleep(interval / 1000)
            await self._expire_ids()
            try:
                expired = self.machine.abort_expired(now_ms())
            except Exception:
                log.exception("transaction coordinator tick failed")
                continue
            for decision in expired:  # each is pending now: each must be written or undone
                assert decision.write is not None
                log.info(
                    "aborting a transaction past its timeout",
                    extra={"transactional_id": decision.write.transactional_id},
                )
                try:
                    await self._apply(decision)
                except Exception:
                    log.exception("aborting an expired transaction failed")
                    self.machine.write_failed(decision.write.transactional_id)

    async def _expire_ids(self) -> None:
        """transactional.id.expiration.ms: an id idle that long is forgotten, with a
        tombstone that lets the compacted topic forget it too."""
        expiration = self.config.get_int("transactional.id.expiration.ms")
        for tid in self.machine.expire_ids(now_ms(), expiration):
            try:
                await self._write_record(tid, None)
            except KafkaError as exc:
                log.info("transactional id not expired yet", extra={"error": str(exc)})
                self.machine.write_failed(tid)
                continue
            self.machine.forget(tid)
            log.info("transactional id expired", extra={"transactional_id": tid})

    @staticmethod
    async def _logged(work: Coroutine[None, None, None]) -> None:
        """A marker task that fails says so (a failover's reload sends them again)."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sending transaction markers failed")

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(self._logged(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
