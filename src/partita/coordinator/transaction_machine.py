"""The transaction coordinator's rules (KIP-98), sans-IO: every transactional id's state,
and what each request does to it.

The coordinator of a transactional id owns its state; each change is first appended to
``__transaction_state`` and adopted only once that write succeeded, so a coordinator
that dies between the two leaves the log, not its memory, as the truth. A method here
answers with a :class:`Decision`: an error for the client, or the new state to write
(and, once written, the COMMIT/ABORT markers to send to the partitions' leaders). The
shell writes it, then calls :meth:`TransactionMachine.written` (or :meth:`write_failed`);
while a write is in flight the id answers CONCURRENT_TRANSACTIONS, as Kafka's does.

Transaction version 1, what Kafka 4 clients speak to a broker that does not finalize the
``transaction.version`` feature at 2: the producer names its partitions with
AddPartitionsToTxn, and only InitProducerId (or the coordinator fencing a producer)
bumps the epoch. States and their codes are Kafka's (``TransactionState``), as they are
stored and as DescribeTransactions and ListTransactions report them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import IntEnum

from partita.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
)

# Kafka's error codes for these requests.
NONE = 0
INVALID_TXN_STATE = InvalidTxnStateError.code
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = ConcurrentTransactionsError.code
INVALID_PRODUCER_EPOCH = InvalidProducerEpochError.code
PRODUCER_FENCED = ProducerFencedError.code

# An epoch is an int16; Kafka starts a new producer id rather than reach the last value.
MAX_EPOCH = 32767 - 1

TopicPartition = tuple[str, int]


class TxnState(IntEnum):
    """Kafka's ``TransactionState``; the value is its code in ``__transaction_state``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """The name Kafka's tools print (``kafka-transactions list``)."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's state, as one ``__transaction_state`` record holds it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1  # when the open transaction began; -1 with none open
    last_update_ms: int = -1

    @property
    def in_transaction(self) -> bool:
        return self.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True, slots=True)
class Markers:
    """COMMIT or ABORT control records to append, with the producer's id and epoch, on
    each partition the transaction wrote to (at its leader: WriteTxnMarkers)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Decision:
    """What a request leads to: an error code for the client, or a state to write first
    (the answer waits for that write), then markers to send."""

    error: int = NONE
    write: TxnMetadata | None = None
    markers: Markers | None = None

    @property
    def producer(self) -> tuple[int, int]:
        """The producer id and epoch InitProducerId answers with."""
        assert self.write is not None
        return self.write.producer_id, self.write.producer_epoch


@dataclass
class TransactionMachine:
    """The transactional ids of the ``__transaction_state`` partitions this broker leads."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    ids: dict[str, TxnMetadata] = field(default_factory=dict)
    # Ids with a write in flight, and what it will make them.
    pending: dict[str, TxnMetadata] = field(default_factory=dict)

    # --- requests -------------------------------------------------------------------

    def needs_new_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId would take a new producer id (a new transactional id, or
        an epoch run out): the shell allocates one, a cluster-wide write, only then."""
        current = self.ids.get(transactional_id)
        return current is None or current.producer_epoch >= MAX_EPOCH

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        now_ms: int,
        new_producer_id: Callable[[], int],
    ) -> Decision:
        """InitProducerId with a transactional id: a new producer id for a new id; else
        the epoch bumped, which fences every earlier instance; a transaction the last
        instance left open is aborted first (the client retries on CONCURRENT_TRANSACTIONS
        until the abort is complete)."""
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            return Decision(INVALID_TRANSACTION_TIMEOUT)
        if transactional_id in self.pending:
            return Decision(CONCURRENT_TRANSACTIONS)
        current = self.ids.get(transactional_id)
        if current is None:
            created = TxnMetadata(
                transactional_id, new_producer_id(), 0, timeout_ms, TxnState.EMPTY,
                last_update_ms=now_ms,
            )  # fmt: skip
            return self._write(created)
        if current.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Decision(CONCURRENT_TRANSACTIONS)  # markers still going out
        if current.state == TxnState.ONGOING:
            return self._fence_and_abort(current, now_ms, CONCURRENT_TRANSACTIONS)
        if current.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
            return Decision(CONCURRENT_TRANSACTIONS)
        producer_id, epoch = current.producer_id, current.producer_epoch + 1
        if self.needs_new_producer_id(transactional_id):
            producer_id, epoch = new_producer_id(), 0
        bumped = replace(
            current,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )
        return self._write(bumped)

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Decision:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's ``__consumer_offsets``
        partition): the transaction begins, or grows. Partitions it holds already need
        no write."""
        current, error = self._producer_state(transactional_id, producer_id, producer_epoch)
        if current is None:
            return Decision(error)
        if current.state in (
            TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE
        ):  # fmt: skip
            return Decision(CONCURRENT_TRANSACTIONS)
        if current.state == TxnState.DEAD:
            return Decision(INVALID_PRODUCER_ID_MAPPING)
        wanted = frozenset(partitions)
        if current.state == TxnState.ONGOING and wanted <= current.partitions:
            return Decision()
        began = current.start_ms if current.state == TxnState.ONGOING else now_ms
        return self._write(
            replace(
                current,
                state=TxnState.ONGOING,
                partitions=current.partitions | wanted,
                start_ms=began,
                last_update_ms=now_ms,
            )
        )

    def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> Decision:
        """EndTxn: PrepareCommit or PrepareAbort is written (the client's answer), then the
        markers go out; a retry of an EndTxn already done succeeds again."""
        current, error = self._producer_state(transactional_id, producer_id, producer_epoch)
        if current is None:
            return Decision(error)
        state = current.state
        if state == TxnState.ONGOING:
            return self._prepare_end(current, commit, now_ms)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == done:
            return Decision()  # the client's retry of what is complete
        if state == preparing:
            return Decision(CONCURRENT_TRANSACTIONS)
        if state == TxnState.PREPARE_EPOCH_FENCE:
            return Decision(PRODUCER_FENCED)
        return Decision(INVALID_TXN_STATE)  # no transaction, or the other ending

    def markers_written(
        self, transactional_id: str, now_ms: int, ending: Markers | None = None
    ) -> Decision:
        """Every marker of the ending transaction is on its partition: it is complete.
        ``ending``: the markers that were written; a transaction other than the one
        ending now (a stale task's) completes nothing."""
        current = self.ids.get(transactional_id)
        if current is None or transactional_id in self.pending:
            return Decision(CONCURRENT_TRANSACTIONS)
        if current.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return Decision(INVALID_TXN_STATE)
        if ending is not None and ending != _markers(current):
            return Decision(INVALID_TXN_STATE)
        complete = (
            TxnState.COMPLETE_COMMIT
            if current.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        return self._write(
            replace(
                current, state=complete, partitions=frozenset(), start_ms=-1,
                last_update_ms=now_ms,
            )
        )  # fmt: skip

    def abort_expired(self, now_ms: int) -> list[Decision]:
        """Transactions open longer than their timeout, aborted with the epoch bumped so
        that their producer, if it is still alive, is fenced (transaction.timeout.ms)."""
        return [
            self._fence_and_abort(meta, now_ms, NONE)
            for tid, meta in list(self.ids.items())
            if meta.state == TxnState.ONGOING
            and tid not in self.pending
            and now_ms - meta.start_ms > meta.timeout_ms
        ]

    def expire_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Ids idle past transactional.id.expiration.ms with no transaction open: each is
        busy (CONCURRENT_TRANSACTIONS) while the shell writes its tombstone, then
        :meth:`forget` drops it (or :meth:`write_failed` keeps it)."""
        expired = [
            tid
            for tid, meta in self.ids.items()
            if not meta.in_transaction
            and tid not in self.pending
            and now_ms - meta.last_update_ms > expiration_ms
        ]
        for tid in expired:
            self.pending[tid] = replace(self.ids[tid], state=TxnState.DEAD)
        return expired

    # --- the log ----------------------------------------------------------------------

    def written(self, metadata: TxnMetadata) -> None:
        """The state was appended to ``__transaction_state``: it is now the id's."""
        self.pending.pop(metadata.transactional_id, None)
        self.ids[metadata.transactional_id] = metadata

    def write_failed(self, transactional_id: str) -> None:
        self.pending.pop(transactional_id, None)

    def forget(self, transactional_id: str) -> None:
        self.ids.pop(transactional_id, None)
        self.pending.pop(transactional_id, None)

    def load(self, records: Iterable[tuple[str, TxnMetadata | None]]) -> list[Markers]:
        """Adopt a ``__transaction_state`` partition's records, oldest first (None: a
        tombstone), when this broker becomes its leader; returns the markers of the
        transactions a previous coordinator left ending, which this one must finish."""
        loaded: dict[str, TxnMetadata] = {}
        for tid, metadata in records:
            if metadata is None:
                loaded.pop(tid, None)
            else:
                loaded[tid] = metadata
        self.ids.update(loaded)
        return [
            _markers(meta)
            for meta in loaded.values()
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        ]

    def unload(self, owns: Callable[[str], bool]) -> None:
        """Drop the ids of partitions this broker no longer leads (``owns`` says which
        remain)."""
        for tid in [t for t in self.ids if not owns(t)]:
            self.forget(tid)

    # --- what the tools read -------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.ids.get(transactional_id)

    def listing(
        self, states: Iterable[TxnState] = (), producer_ids: Iterable[int] = ()
    ) -> list[TxnMetadata]:
        """ListTransactions: every id, or those in one of ``states`` and of one of
        ``producer_ids`` (an empty filter passes all)."""
        wanted_states, wanted_ids = set(states), set(producer_ids)
        return [
            meta
            for meta in self.ids.values()
            if (not wanted_states or meta.state in wanted_states)
            and (not wanted_ids or meta.producer_id in wanted_ids)
        ]

    # --- rules shared by the requests ------------------------------------------------

    def _producer_state(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TxnMetadata | None, int]:
        """The id's state if this producer may act on it, else the error: another
        producer id is not this id's; an older epoch was fenced by a newer instance."""
        current = self.ids.get(transactional_id)
        if current is None or current.producer_id != producer_id:
            return None, INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < current.producer_epoch:
            return None, PRODUCER_FENCED
        if producer_epoch > current.producer_epoch:
            return None, INVALID_PRODUCER_EPOCH
        if transactional_id in self.pending:
            return None, CONCURRENT_TRANSACTIONS
        return current, NONE

    def _prepare_end(self, current: TxnMetadata, commit: bool, now_ms: int) -> Decision:
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        ending = replace(current, state=state, last_update_ms=now_ms)
        return self._write(ending, _markers(ending))

    def _fence_and_abort(self, current: TxnMetadata, now_ms: int, error: int) -> Decision:
        """Abort the open transaction under a bumped epoch: the markers carry it, so the
        fenced producer can write to none of its partitions again."""
        epoch = current.producer_epoch + 1
        if epoch > MAX_EPOCH:  # the abort keeps the id; the next InitProducerId renews it
            epoch = current.producer_epoch
        ending = replace(
            current, producer_epoch=epoch, state=TxnState.PREPARE_ABORT, last_update_ms=now_ms
        )
        decision = self._write(ending, _markers(ending))
        return replace(decision, error=error)

    def _write(self, metadata: TxnMetadata, markers: Markers | None = None) -> Decision:
        self.pending[metadata.transactional_id] = metadata
        return Decision(NONE, metadata, markers)


def _markers(metadata: TxnMetadata) -> Markers:
    return Markers(
        metadata.transactional_id,
        metadata.producer_id,
        metadata.producer_epoch,
        metadata.state == TxnState.PREPARE_COMMIT,
        metadata.partitions,
    )
