"""A transactional producer's side of Kafka's transaction protocol (KIP-98, transaction
version 1): the producer's state, and the requests it sends to its transaction
coordinator.

The producer records which partitions a transaction wrote and sends AddPartitionsToTxn
before their first batch; ``send_offsets`` adds a consumer group (AddOffsetsToTxn) and
commits its offsets through the group's coordinator (TxnOffsetCommit), to become visible
only if the transaction commits; EndTxn ends it. The coordinator writes the markers.

Errors are split as the Java producer splits them. A *fatal* one (fenced by a newer
instance with the same transactional id, not authorized for the id, the coordinator saying
the producer's state is wrong) ends this producer: every later call raises it. An
*abortable* one (a batch that could not be written, a topic the id may not write) leaves
the transaction to be aborted, after which the producer is usable again. Retriable answers
(coordinator moving or loading, another transaction still completing) are asked again
until ``max_block_ms``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

from partita.client.cluster import Cluster
from partita.client.connection import BrokerConnection
from partita.client.error_names import describe_error_code
from partita.client.group_member import (
    GROUP_KEY,
    TRANSACTION_KEY,
    GroupError,
    find_coordinator,
)
from partita.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
)

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# How the producer treats Kafka's answers: find the coordinator again (-1: no answer),
# ask again, or give up on this producer.
_FIND_AGAIN = {CoordinatorNotAvailableError.code, NotCoordinatorError.code, -1}
_ASK_AGAIN = {
    CoordinatorLoadInProgressError.code,
    ConcurrentTransactionsError.code,
    RequestTimedOutError.code,
}
FATAL = {
    InvalidProducerEpochError.code,
    ProducerFencedError.code,
    InvalidTxnStateError.code,
    TransactionalIdAuthorizationFailedError.code,
    UnknownProducerIdError.code,
}


class State(enum.Enum):
    UNINITIALIZED = "uninitialized"  # before init_transactions
    READY = "ready"  # between transactions
    IN_TRANSACTION = "in transaction"
    ABORTABLE_ERROR = "abortable error"  # only abort_transaction may follow
    FATAL_ERROR = "fatal error"  # nothing may follow; close the producer


class TransactionError(KafkaError):
    """A transactional call failed; ``code`` is Kafka's error code (-1 for a misuse), and
    ``fatal`` says whether the producer can go on after an abort."""

    def __init__(self, code: int, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.fatal = fatal


class Transactions:
    def __init__(
        self,
        cluster: Cluster,
        transactional_id: str,
        *,
        timeout_ms: int = 60_000,
        retry_backoff_s: float = 0.1,
        max_block_s: float = 60.0,
    ) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.retry_backoff = retry_backoff_s
        self.max_block = max_block_s
        self.state = State.UNINITIALIZED
        self.producer_id, self.producer_epoch = -1, -1
        self.partitions: set[TopicPartition] = set()  # added to the open transaction
        self._started = False  # the coordinator knows of the open transaction
        self._error: TransactionError | None = None
        self._coordinator: BrokerConnection | None = None

    @classmethod
    def resume(
        cls, cluster: Cluster, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> Transactions:
        """The open transaction of another producer instance, to be ended from here (a
        two-phase commit: the tasks that wrote leave their transactions open, and one
        process commits them all). The coordinator checks the id and epoch: if a newer
        instance fenced this one, or the transaction timed out, ending it fails."""
        txn = cls(cluster, transactional_id)
        txn.producer_id, txn.producer_epoch = producer_id, producer_epoch
        txn.state, txn._started = State.IN_TRANSACTION, True
        return txn

    # -- the state ------------------------------------------------------------------

    def check(self, *allowed: State, doing: str) -> None:
        """Raise unless the producer is in one of ``allowed`` states."""
        if self.state is State.FATAL_ERROR and self._error is not None:
            raise self._error
        if self.state not in allowed:
            cause = f" ({self._error})" if self._error is not None else ""
            raise TransactionError(-1, f"cannot {doing}: the producer is {self.state.value}{cause}")

    def fail(self, error: KafkaError, code: int) -> None:
        """A batch of the open transaction was not written: it must be aborted (or, when
        the code says this producer was fenced, the producer is done)."""
        self._enter(TransactionError(code, str(error), fatal=code in FATAL))

    def _enter(self, error: TransactionError, *, abortable: bool = True) -> None:
        """The state an error leaves: a fatal one ends the producer; another one in the
        middle of a transaction (``abortable``) leaves it to be aborted."""
        if self.state is State.FATAL_ERROR:
            return  # the first fatal error is the one every later call raises
        if error.fatal:
            self.state, self._error = State.FATAL_ERROR, error
        elif abortable and self.state is State.IN_TRANSACTION:
            self.state, self._error = State.ABORTABLE_ERROR, error

    def begin(self) -> None:
        self.check(State.READY, doing="begin a transaction")
        self.state = State.IN_TRANSACTION
        self.partitions.clear()
        self._started = False

    def unadded(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        return sorted(tp for tp in partitions if tp not in self.partitions)

    # -- the coordinator's requests ---------------------------------------------------

    async def init(self) -> tuple[int, int]:
        """InitProducerId for the transactional id: a new epoch that fences every earlier
        instance, once the coordinator has ended what they left open."""
        self.check(State.UNINITIALIZED, State.READY, doing="initialize transactions")
        response = await self._ask(
            lambda: InitProducerIdRequest(
                version=4,
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.timeout_ms,
                producer_id=-1,
                producer_epoch=-1,
            ),
            "InitProducerId",
        )
        self._raise_for(response.error_code, "InitProducerId")
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        self.state = State.READY
        log.info(
            "transactions initialized",
            extra={
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "epoch": self.producer_epoch,
            },
        )
        return self.producer_id, self.producer_epoch

    async def add_partitions(self, partitions: list[TopicPartition]) -> None:
        """AddPartitionsToTxn; on success the partitions belong to the transaction."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        topics = [
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
            for t, ps in sorted(by_topic.items())
        ]
        response = await self._ask(
            lambda: AddPartitionsToTxnRequest(
                version=3,
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=topics,
            ),
            "AddPartitionsToTxn",
            codes=lambda r: [
                p.partition_error_code
                for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ],
        )
        failed = [
            (t.name, p.partition_index, p.partition_error_code)
            for t in response.results_by_topic_v3_and_below
            for p in t.results_by_partition
            if p.partition_error_code
        ]
        if failed:
            # One partition's real error makes the others OPERATION_NOT_ATTEMPTED.
            not_attempted = OperationNotAttemptedError.code
            topic, partition, code = next((f for f in failed if f[2] != not_attempted), failed[0])
            self._raise_for(code, f"AddPartitionsToTxn {topic}-{partition}")
        self.partitions.update(partitions)
        self._started = True

    async def send_offsets(self, offsets: dict[TopicPartition, int], group_id: str) -> None:
        """Offsets committed for ``group_id`` as part of the transaction."""
        self.check(State.IN_TRANSACTION, doing="send offsets to a transaction")
        response = await self._ask(
            lambda: AddOffsetsToTxnRequest(
                version=3,
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=group_id,
            ),
            "AddOffsetsToTxn",
        )
        self._raise_for(response.error_code, "AddOffsetsToTxn")
        self._started = True
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
            )
        request = TxnOffsetCommitRequest(
            version=3,
            transactional_id=self.transactional_id,
            group_id=group_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        answer = await self._ask(
            lambda: request,
            "TxnOffsetCommit",
            key=group_id,
            key_type=GROUP_KEY,
            codes=lambda r: [p.error_code for t in r.topics for p in t.partitions],
        )
        for topic in answer.topics:
            for p in topic.partitions:
                self._raise_for(p.error_code, f"TxnOffsetCommit {topic.name}-{p.partition_index}")

    async def end(self, commit: bool) -> None:
        """EndTxn: the coordinator commits or aborts, writing the markers. A transaction
        that added nothing never began on the coordinator, so nothing is sent (as the Java
        producer does). A non-fatal failure leaves the state as it was: the call may be
        made again."""
        verb = "commit" if commit else "abort"
        if commit:
            self.check(State.IN_TRANSACTION, doing="commit a transaction")
        else:
            self.check(State.IN_TRANSACTION, State.ABORTABLE_ERROR, doing="abort a transaction")
        if self._started:
            response = await self._ask(
                lambda: EndTxnRequest(
                    version=3,
                    transactional_id=self.transactional_id,
                    producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch,
                    committed=commit,
                ),
                "EndTxn",
            )
            self._raise_for(response.error_code, f"EndTxn ({verb})", abortable=False)
        self.state = State.READY
        self._error = None
        self._started = False
        self.partitions.clear()

    def _raise_for(self, code: int, what: str, *, abortable: bool = True) -> None:
        """Raise Kafka's error ``code``, after entering the state it leaves."""
        if not code:
            return
        error = TransactionError(
            code,
            f"{what} for transactional id {self.transactional_id!r}: {describe_error_code(code)}",
            fatal=code in FATAL,
        )
        self._enter(error, abortable=abortable)
        raise error

    async def _ask(
        self,
        make: Callable[[], Any],
        name: str,
        *,
        key: str | None = None,
        key_type: int = TRANSACTION_KEY,
        codes: Callable[[Any], list[int]] | None = None,
    ) -> Any:
        """Send a request to the coordinator of ``key`` (the transactional id unless
        given) until it answers something other than a retriable error."""
        deadline = time.monotonic() + self.max_block
        group_coordinator: BrokerConnection | None = None
        try:
            while True:
                code = -1
                try:
                    if key is None:
                        connection = await self._transaction_coordinator()
                    else:
                        if group_coordinator is None:
                            group_coordinator = await self._find(key, key_type)
                        connection = group_coordinator
                    response = await connection.request(make())
                    found = codes(response) if codes is not None else [response.error_code]
                    code = next((c for c in found if c in _FIND_AGAIN | _ASK_AGAIN), 0)
                    if not code:
                        return response
                except (OSError, KafkaError) as exc:
                    if isinstance(exc, TransactionError):
                        raise
                    log.debug("%s: coordinator unreachable: %s", name, exc)
                if code in _FIND_AGAIN:
                    await self._drop_coordinator()
                    if group_coordinator is not None:
                        await group_coordinator.close()
                        group_coordinator = None
                if time.monotonic() > deadline:
                    raise TransactionError(
                        code,
                        f"{name} for transactional id {self.transactional_id!r} did not "
                        f"succeed within {self.max_block:.0f} s: {describe_error_code(code)}",
                    )
                # The previous transaction still completing (its markers being written)
                # ends within milliseconds: asked again soon, as the Java producer does.
                concurrent = code == ConcurrentTransactionsError.code
                pause = 0.02 if concurrent else self.retry_backoff
                await asyncio.sleep(pause)
        finally:
            if group_coordinator is not None:
                await group_coordinator.close()

    async def _transaction_coordinator(self) -> BrokerConnection:
        if self._coordinator is None or self._coordinator.closed:
            self._coordinator = await self._find(self.transactional_id, TRANSACTION_KEY)
        return self._coordinator

    async def _find(self, key: str, key_type: int) -> BrokerConnection:
        try:
            return await find_coordinator(self.cluster, key, key_type)
        except GroupError as exc:
            if exc.code in FATAL:  # not authorized for the transactional id
                self._raise_for(exc.code, "FindCoordinator")
            raise  # retriable: the caller finds it again

    async def _drop_coordinator(self) -> None:
        if self._coordinator is not None:
            await self._coordinator.close()
            self._coordinator = None

    async def close(self) -> None:
        await self._drop_coordinator()
