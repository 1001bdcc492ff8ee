"""partita's asyncio producer: partitioning, batching by ``linger.ms`` / ``batch.size``,
compression, acks 0/1/all, and idempotent retries (on by default, as in the Java client).

Records are encoded into v2 batches by aiokafka's compiled batch builder. Up to
``max_in_flight_requests_per_connection`` batches per partition are in flight (5, as in
Kafka), each in its own request, written to the leader's connection in sequence order;
the broker answers a connection's requests in order. When a batch must be retried the
partition stops sending, waits until nothing of it is in flight, and sends again from the
lowest sequence: with idempotence (on by default) the broker's sequence check refuses the
batches behind the failed one (OUT_OF_ORDER_SEQUENCE_NUMBER, retried here) and
acknowledges a retried batch that already landed as a duplicate, so nothing is written
twice or out of order. Without idempotence a retry can reorder, as Kafka documents.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kafka.protocol.producer import InitProducerIdRequest

from partita.client.cluster import Cluster
from partita.client.connection import BrokerConnection
from partita.client.error_names import describe_error_code
from partita.client.partitioners import Partitioner, choose_partition, load_partitioner
from partita.client.security import ClientSecurity
from partita.client.transactions import State, TransactionError, Transactions
from partita.errors import KafkaError
from partita.protocol.compression import Compression
from partita.protocol.produce_request import ProduceRequestV9
from partita.protocol.record_batch import patch_base_sequence
from partita.protocol.record_sets import RecordSet, build_producer_batch

log = logging.getLogger(__name__)

_RETRIABLE = {-1, 2, 3, 5, 6, 7, 15, 16, 19, 20, 56}  # network, leadership, timeouts, storage
OUT_OF_ORDER_SEQUENCE = 45
DUPLICATE_SEQUENCE = 46
# InitProducerId's retriable answers: a broker still loading or moving what hands out
# producer ids (request timed out, broker/coordinator not available, loading, not the
# coordinator, concurrent transactions).
_RETRIABLE_INIT = {7, 8, 14, 15, 16, 51}
MAX_IDEMPOTENT_IN_FLIGHT = 5  # the broker remembers a producer's last five batches


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class ProduceError(KafkaError):
    """A record could not be delivered; ``code`` is Kafka's error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True, eq=False)  # identity semantics: batches live in sets
class _Batch:
    topic: str
    partition: int
    builder: Any
    created: float
    futures: list[tuple[asyncio.Future[RecordMetadata], int]] = field(default_factory=list)
    encoded: bytes | bytearray | memoryview | None = None
    attempts: int = 0
    order: int = 0  # position among this producer's closed batches: the resend order
    sequence: int = -1  # base sequence, for an idempotent producer
    record_count: int | None = None  # set for pre-encoded record sets (one future for all)
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    @property
    def count(self) -> int:
        return self.record_count if self.record_count is not None else len(self.futures)


class _EncodedRecords:
    """A pre-encoded record set in the place of a batch builder: the producer only adds
    its id, epoch and sequence when the batch is closed."""

    def __init__(
        self, records: RecordSet, timestamp: int, compression: Compression, transactional: bool
    ) -> None:
        self.records = records
        self.timestamp = timestamp
        self.compression = compression
        self.transactional = transactional
        self.producer_state = (-1, -1, -1)

    def set_producer_state(self, producer_id: int, epoch: int, sequence: int) -> None:
        self.producer_state = (producer_id, epoch, sequence)

    def build(self) -> memoryview:
        producer_id, epoch, sequence = self.producer_state
        return build_producer_batch(
            self.records,
            timestamp=self.timestamp,
            compression=self.compression,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            transactional=self.transactional,
        )


def _sequence_after(sequence: int, count: int) -> int:
    """The sequence following ``count`` records from ``sequence`` (wrapping past 2**31-1
    to 0, as Kafka's sequences do)."""
    return (sequence + count) & 0x7FFFFFFF


def _acks(value: int | str) -> int:
    if value in ("all", "-1", -1):
        return -1
    number = int(value)
    if number not in (0, 1):
        raise ValueError(f"acks must be 0, 1 or all, not {value!r}")
    return number


class AsyncProducer:
    def __init__(
        self,
        bootstrap_servers: str | list[str] = "127.0.0.1:9092",
        *,
        acks: int | str = "all",
        linger_ms: float = 5,
        batch_size: int = 16384,
        compression_type: str = "none",
        partitioner: Any = None,
        enable_idempotence: bool = True,
        retries: int = 2**31 - 1,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        max_in_flight_requests_per_connection: int = 5,
        client_id: str = "partita-producer",
        security: ClientSecurity | Mapping[str, str] | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        max_block_ms: int = 60_000,
    ) -> None:
        self.acks = _acks(acks)
        if transactional_id is not None and (self.acks != -1 or not enable_idempotence):
            # Kafka's rule: a transactional producer is an idempotent one.
            raise ValueError("a transactional producer needs acks=all and enable_idempotence")
        self.idempotent = enable_idempotence and self.acks == -1
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        if self.idempotent and max_in_flight_requests_per_connection > MAX_IDEMPOTENT_IN_FLIGHT:
            raise ValueError(
                "max_in_flight_requests_per_connection must be at most "
                f"{MAX_IDEMPOTENT_IN_FLIGHT} to use the idempotent producer"
            )
        self.max_in_flight = max_in_flight_requests_per_connection
        self.linger = linger_ms / 1000
        self.batch_size = batch_size
        self.compression = Compression.from_name(compression_type)
        self.partitioner: Partitioner = load_partitioner(partitioner)
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.cluster = Cluster(bootstrap_servers, client_id, security=security)
        self.producer_id, self.producer_epoch = -1, -1
        self._txn = (
            Transactions(
                self.cluster,
                transactional_id,
                timeout_ms=transaction_timeout_ms,
                retry_backoff_s=self.retry_backoff,
                max_block_s=max_block_ms / 1000,
            )
            if transactional_id is not None
            else None
        )
        self._open: dict[tuple[str, int], _Batch] = {}
        # Closed batches waiting to be sent, oldest first, per partition.
        self._ready: dict[tuple[str, int], deque[_Batch]] = {}
        self._in_flight: dict[tuple[str, int], int] = {}  # batches sent, not yet answered
        # Partitions with a batch to send again: nothing new goes out until none is in flight.
        self._retrying: set[tuple[str, int]] = set()
        # Partitions where a batch was refused for good: the broker still expects its
        # sequence, so what follows is renumbered from there before being sent again.
        self._resequence_from: dict[tuple[str, int], int] = {}
        self._closed_batches = 0
        self._sequences: dict[tuple[str, int], int] = {}
        self._partition_counts: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._unfinished: set[_Batch] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    async def start(self) -> None:
        await self.cluster.refresh([])
        if self.idempotent and self._txn is None:  # a transactional id: init_transactions
            # A broker just started (Kafka's especially) may answer a retriable error
            # while its producer-id manager or coordinator loads: asked again, as the Java
            # client does, until delivery.timeout.ms.
            deadline = time.monotonic() + self.delivery_timeout
            while True:
                connection = await self.cluster.any_connection()
                response = await connection.request(
                    InitProducerIdRequest(
                        version=4,
                        transactional_id=None,
                        transaction_timeout_ms=60_000,
                        producer_id=-1,
                        producer_epoch=-1,
                    )
                )
                code = response.error_code
                if not code:
                    break
                if code not in _RETRIABLE_INIT or time.monotonic() > deadline:
                    raise ProduceError(code, f"InitProducerId failed: {describe_error_code(code)}")
                await asyncio.sleep(self.retry_backoff)
            self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self._sender = asyncio.create_task(self._send_forever())

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    # -- accepting records ---------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record; the returned future resolves when the broker acknowledged it."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._txn is not None:
            self._txn.check(State.IN_TRANSACTION, doing="send outside a transaction")
        count = self._known_partition_count(topic) or await self._partition_count(topic)
        chosen = choose_partition(self.partitioner, topic, key, value, count, partition)
        timestamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        batch = self._batch_for(topic, chosen)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        metadata = batch.builder.append(
            batch.count, timestamp=timestamp, key=key, value=value, headers=headers or []
        )
        closed = metadata is None
        if closed:  # the batch is full: close it and start the next one
            self._close_batch(batch)
            batch = self._batch_for(topic, chosen)
            metadata = batch.builder.append(
                0, timestamp=timestamp, key=key, value=value, headers=headers or []
            )
        batch.futures.append((future, timestamp))
        self.partitioner.on_append(topic, chosen, metadata.size, count)
        if batch.builder.size() >= self.batch_size:
            self._close_batch(batch)
            closed = True
        if closed:
            # Once per batch, not per record: the sender ships what just closed while the
            # caller goes on filling the next batch.
            await asyncio.sleep(0)
        return future

    async def send_record_set(
        self,
        topic: str,
        partition: int,
        records: RecordSet,
        *,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue records encoded in bulk (``protocol.bulk_records``) as one batch for an
        explicit partition; the future resolves with the first record's metadata once the
        broker acknowledged them all. Ordering with ``send`` is kept per partition."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        count = self._known_partition_count(topic) or await self._partition_count(topic)
        choose_partition(self.partitioner, topic, None, None, count, partition)
        timestamp = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        open_batch = self._open.get((topic, partition))
        if open_batch is not None:  # records sent before these go first
            self._close_batch(open_batch)
        encoded = _EncodedRecords(records, timestamp, self.compression, self._txn is not None)
        batch = _Batch(topic, partition, encoded, time.monotonic(), record_count=records.count)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        batch.futures.append((future, timestamp))
        self._unfinished.add(batch)
        self._close_batch(batch)
        await asyncio.sleep(0)  # let the sender ship it while the caller encodes the next
        return future

    async def partitions_for(self, topic: str) -> int:
        """How many partitions ``topic`` has (from metadata, refreshed when stale)."""
        return await self._partition_count(topic)

    def _known_partition_count(self, topic: str) -> int | None:
        """The partition count when fresh metadata agrees with it, without an await (the
        per-record path); None sends the caller to ``_partition_count``, which also warns
        when the topic grew."""
        known = self.cluster.topics.get(topic)
        count = self._partition_counts.get(topic)
        if known is None or count != len(known.leaders) or self.cluster.is_stale(topic):
            return None
        return count

    async def _partition_count(self, topic: str) -> int:
        info = await self.cluster.topic(topic)
        previous = self._partition_counts.get(topic)
        if previous is not None and info.partitions > previous:
            log.warning(
                "topic grew: keyed records now hash to different partitions",
                extra={"topic": topic, "from": previous, "to": info.partitions},
            )
        self._partition_counts[topic] = info.partitions
        return info.partitions

    def _batch_for(self, topic: str, partition: int) -> _Batch:
        batch = self._open.get((topic, partition))
        if batch is None:
            builder = DefaultRecordBatchBuilder(
                magic=2,
                compression_type=int(self.compression),
                is_transactional=int(self._txn is not None),
                producer_id=-1,
                producer_epoch=-1,
                base_sequence=-1,
                batch_size=self.batch_size,
            )
            batch = _Batch(topic, partition, builder, time.monotonic())
            self._open[(topic, partition)] = batch
            self._unfinished.add(batch)
            self._wake.set()
        return batch

    def _close_batch(self, batch: _Batch) -> None:
        if self._open.get((batch.topic, batch.partition)) is batch:
            del self._open[(batch.topic, batch.partition)]
        if self.idempotent:
            key = (batch.topic, batch.partition)
            sequence = self._sequences.get(key, 0)
            batch.sequence = sequence
            batch.builder.set_producer_state(self.producer_id, self.producer_epoch, sequence)
            self._sequences[key] = _sequence_after(sequence, batch.count)
        batch.encoded = batch.builder.build()
        self._closed_batches += 1
        batch.order = self._closed_batches
        self._ready.setdefault((batch.topic, batch.partition), deque()).append(batch)
        self._wake.set()

    # -- sending -------------------------------------------------------------------

    async def _send_forever(self) -> None:
        while True:
            await self._wait_for_work()
            now = time.monotonic()
            for batch in list(self._open.values()):
                if now - batch.created >= self.linger:
                    self._close_batch(batch)
            if self._txn is not None:
                await self._add_to_transaction()
            while sendable := self._take_sendable():
                by_leader: dict[int, list[_Batch]] = {}
                for b in sendable:
                    info = self.cluster.topics.get(b.topic)
                    leader = info.leaders.get(b.partition, -1) if info else -1
                    by_leader.setdefault(leader, []).append(b)
                for leader, batches in by_leader.items():
                    await self._dispatch(leader, batches)

    async def _add_to_transaction(self) -> None:
        """AddPartitionsToTxn for the partitions with a batch to send that the open
        transaction does not have yet: no batch goes out before its partition is added."""
        assert self._txn is not None
        new = self._txn.unadded(self._ready)
        if not new:
            return
        try:
            await self._txn.add_partitions(new)
        except Exception as exc:  # never let the sender die: these batches fail instead
            code = exc.code if isinstance(exc, TransactionError) else -1
            for key in new:
                for batch in self._ready.pop(key, ()):
                    self._fail(batch, code, ProduceError(code, str(exc)))

    def _take_sendable(self) -> list[_Batch]:
        """The oldest waiting batch of each partition that may send one more now."""
        sendable: list[_Batch] = []
        for key, queue in list(self._ready.items()):
            if self._txn is not None and key not in self._txn.partitions:
                continue  # not yet added to the transaction
            in_flight = self._in_flight.get(key, 0)
            if in_flight >= self.max_in_flight or (in_flight and key in self._retrying):
                continue
            self._retrying.discard(key)
            if key in self._resequence_from:
                self._resequence(key, queue, self._resequence_from.pop(key))
            sendable.append(queue.popleft())
            if not queue:
                del self._ready[key]
            self._in_flight[key] = in_flight + 1
        return sendable

    def _resequence(self, key: tuple[str, int], queue: deque[_Batch], sequence: int) -> None:
        """Renumber the waiting batches of ``key`` from ``sequence`` (nothing of it is in
        flight now), closing the gap a refused batch left."""
        for batch in queue:
            batch.sequence = sequence
            assert batch.encoded is not None
            encoded = bytearray(batch.encoded)
            patch_base_sequence(encoded, sequence)
            batch.encoded = encoded
            sequence = _sequence_after(sequence, batch.count)
        self._sequences[key] = sequence
        log.warning(
            "renumbered batches after a refused one",
            extra={"topic": key[0], "partition": key[1], "batches": len(queue)},
        )

    async def _wait_for_work(self) -> None:
        timeout = None
        if self._open:
            oldest = min(b.created for b in self._open.values())
            timeout = max(0.0, oldest + self.linger - time.monotonic())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        self._wake.clear()

    async def _dispatch(self, leader: int, batches: list[_Batch]) -> None:
        """Write one produce request now (the sender's order is the wire order) and leave
        its answer to a task of its own."""
        try:
            connection = await self.cluster.connection(leader)
            answer = connection.send(self._produce_request(batches), expect_response=self.acks != 0)
        except Exception as exc:  # no connection: every batch is retried
            self._spawn(self._fail_or_retry_all(batches, str(exc)))
            return
        self._spawn(self._handle_answer(connection, answer, batches))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _produce_request(self, batches: list[_Batch]) -> ProduceRequestV9:
        by_topic: dict[str, list[tuple[int, bytes | bytearray | memoryview]]] = {}
        for b in batches:
            assert b.encoded is not None, "a batch is encoded when it closes"
            by_topic.setdefault(b.topic, []).append((b.partition, b.encoded))
        tid = self._txn.transactional_id if self._txn is not None else None
        return ProduceRequestV9(self.acks, 30_000, list(by_topic.items()), tid)

    async def _handle_answer(
        self,
        connection: BrokerConnection,
        answer: asyncio.Future[Any] | None,
        batches: list[_Batch],
    ) -> None:
        try:
            response = await connection.response(answer)
        except Exception as exc:  # the connection failed: every batch is retried
            await self._fail_or_retry_all(batches, str(exc))
            return
        if response is None:  # acks=0
            for b in batches:
                self._complete(b, -1)
            return
        try:
            results = {
                (t.name, p.index): p for t in response.responses for p in t.partition_responses
            }
            failed: list[tuple[_Batch, int, str]] = []
            for b in batches:
                result = results.get((b.topic, b.partition))
                if result is None:
                    failed.append((b, -1, "no answer for this partition"))
                elif result.error_code in (0, DUPLICATE_SEQUENCE):
                    self._complete(b, result.base_offset, result.log_append_time_ms)
                else:
                    failed.append((b, result.error_code, result.error_message or ""))
        except Exception as exc:  # never leave a partition stuck "in flight"
            log.exception("produce response could not be handled")
            failed = [(b, -1, f"{type(exc).__name__}: {exc}") for b in batches if not b.done.done()]
        if failed:
            await self._retry_or_fail(failed)

    async def _fail_or_retry_all(self, batches: list[_Batch], message: str) -> None:
        await self._retry_or_fail([(b, -1, message) for b in batches])

    def _finish(self, batch: _Batch) -> None:
        self._release(batch)
        self._unfinished.discard(batch)
        if not batch.done.done():
            batch.done.set_result(None)
        self._wake.set()

    def _release(self, batch: _Batch) -> None:
        key = (batch.topic, batch.partition)
        left = self._in_flight.get(key, 0) - 1
        if left > 0:
            self._in_flight[key] = left
        else:
            self._in_flight.pop(key, None)

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int = -1) -> None:
        for i, (future, timestamp) in enumerate(batch.futures):
            if not future.done():
                offset = base_offset + i if base_offset >= 0 else -1
                ts = log_append_time if log_append_time >= 0 else timestamp
                future.set_result(RecordMetadata(batch.topic, batch.partition, offset, ts))
        self._finish(batch)

    def _retriable(self, batch: _Batch, code: int) -> bool:
        if code == OUT_OF_ORDER_SEQUENCE:
            # Behind an earlier batch that is being retried, refused or not yet answered
            # (on another connection, or by another leader) the broker refuses the next
            # sequences: those are sent again. With nothing before it, the gap is real.
            key = (batch.topic, batch.partition)
            return key in self._retrying or any(
                0 < other.order < batch.order and (other.topic, other.partition) == key
                for other in self._unfinished
            )
        return code in _RETRIABLE

    async def _retry_or_fail(self, failed: list[tuple[_Batch, int, str]]) -> None:
        retry: list[_Batch] = []
        for batch, code, message in failed:
            batch.attempts += 1
            expired = time.monotonic() - batch.created > self.delivery_timeout
            if self._retriable(batch, code) and batch.attempts <= self.retries and not expired:
                log.debug(
                    "retrying batch",
                    extra={"topic": batch.topic, "partition": batch.partition, "error": code},
                )
                # Marked at once, before the backoff: answers to later batches of this
                # partition may arrive meanwhile and must be seen as behind this one.
                self._retrying.add((batch.topic, batch.partition))
                retry.append(batch)
                continue
            if self.idempotent and code != -1 and batch.sequence >= 0:
                # The broker refused this batch (a definite answer, so it is not in the
                # log) and waits for its sequence: renumber what follows before sending.
                key = (batch.topic, batch.partition)
                earliest = self._resequence_from.get(key, batch.sequence)
                self._resequence_from[key] = min(earliest, batch.sequence)
                self._retrying.add(key)
            error = ProduceError(code, f"{batch.topic}-{batch.partition}: {message or code}")
            self._fail(batch, code, error)
        if not retry:
            return
        await asyncio.sleep(self.retry_backoff)
        with contextlib.suppress(Exception):
            await self.cluster.refresh(sorted({b.topic for b in retry}))
        for batch in retry:
            self._release(batch)
            # Same bytes, same sequence, back in closing order: order is kept.
            queue = self._ready.setdefault((batch.topic, batch.partition), deque())
            position = next((i for i, b in enumerate(queue) if b.order > batch.order), len(queue))
            queue.insert(position, batch)
        self._wake.set()

    def _fail(self, batch: _Batch, code: int, error: ProduceError) -> None:
        for future, _ts in batch.futures:
            if not future.done():
                future.set_exception(error)
        if self._txn is not None:
            self._txn.fail(error, code)  # the transaction must now be aborted
        self._finish(batch)

    # -- transactions ----------------------------------------------------------------

    def _transactions(self) -> Transactions:
        if self._txn is None:
            raise TransactionError(-1, "transactions need a transactional_id")
        return self._txn

    async def init_transactions(self) -> None:
        """Register the transactional id with its coordinator: earlier producers with the
        same id are fenced, and a transaction one of them left open is ended first."""
        txn = self._transactions()
        self.producer_id, self.producer_epoch = await txn.init()
        self._sequences.clear()  # a new epoch numbers from 0

    def begin_transaction(self) -> None:
        self._transactions().begin()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[tuple[str, int], int], group_id: str
    ) -> None:
        """Commit ``offsets`` (the next offset to read, per partition) for ``group_id``
        with the open transaction: visible to the group only if it commits."""
        await self._transactions().send_offsets(dict(offsets), group_id)

    async def commit_transaction(self) -> None:
        """Deliver everything sent in the transaction, then commit it. If a record could
        not be delivered the transaction cannot commit: this raises and the transaction
        must be aborted."""
        txn = self._transactions()
        txn.check(State.IN_TRANSACTION, doing="commit a transaction")
        await self.flush()
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Abort the open transaction: what it wrote is never read by read_committed
        consumers. Records still queued are sent first (they are aborted with it)."""
        txn = self._transactions()
        txn.check(State.IN_TRANSACTION, State.ABORTABLE_ERROR, doing="abort a transaction")
        await self.flush()
        await txn.end(commit=False)

    # -- finishing -----------------------------------------------------------------

    async def flush(self) -> None:
        """Send everything queued and wait until each record is acknowledged or failed."""
        for batch in list(self._open.values()):
            self._close_batch(batch)
        waiting = [b.done for b in self._unfinished]
        if waiting:
            await asyncio.wait(waiting)

    async def stop(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
        if self._txn is not None:
            await self._txn.close()
        await self.cluster.close()
