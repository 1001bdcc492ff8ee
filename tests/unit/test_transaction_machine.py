"""The transaction coordinator's rules (coordinator/transaction_machine.py), without
sockets: epochs and fencing, the state each request leads to, what is written before
anything is adopted, markers, timeouts, and a coordinator taking over mid-commit; and
the ``__transaction_state`` records in Kafka's layout."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from partita.coordinator.transaction_machine import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    MAX_EPOCH,
    NONE,
    PRODUCER_FENCED,
    Decision,
    TransactionMachine,
    TxnMetadata,
    TxnState,
)
from partita.coordinator.transaction_records import (
    read_transaction_key,
    read_transaction_value,
    transaction_key,
    transaction_partition,
    transaction_value,
)
from partita.errors import CorruptRecordError

TID = "orders-etl"
A, B = ("orders", 0), ("orders", 1)


def _ids() -> itertools.count[int]:
    return itertools.count(1000)


def _done(machine: TransactionMachine, decision: Decision) -> Decision:
    """The shell's part: write what the decision asks, then adopt it."""
    assert decision.write is not None, decision
    machine.written(decision.write)
    return decision


def _started(machine: TransactionMachine) -> tuple[int, int]:
    ids = _ids()
    producer = _done(machine, machine.init_producer_id(TID, 60_000, 0, lambda: next(ids))).producer
    _done(machine, machine.add_partitions(TID, *producer, [A, B], 10))
    return producer


def test_a_new_id_gets_a_producer_id_and_epoch_zero() -> None:
    machine = TransactionMachine()
    decision = machine.init_producer_id(TID, 60_000, 5, lambda: 1000)
    assert decision.error == NONE and decision.producer == (1000, 0)
    # Nothing is the id's until the write is done: meanwhile it is busy.
    assert machine.describe(TID) is None
    assert machine.init_producer_id(TID, 60_000, 6, lambda: 1001).error == CONCURRENT_TRANSACTIONS
    machine.written(decision.write)  # type: ignore[arg-type]
    created = TxnMetadata(TID, 1000, 0, 60_000, TxnState.EMPTY, last_update_ms=5)
    assert machine.describe(TID) == created


def test_a_failed_write_changes_nothing() -> None:
    machine = TransactionMachine()
    machine.init_producer_id(TID, 60_000, 0, lambda: 1000)
    machine.write_failed(TID)
    assert machine.describe(TID) is None and not machine.pending
    assert machine.init_producer_id(TID, 60_000, 0, lambda: 1001).producer == (1001, 0)


def test_a_second_instance_bumps_the_epoch_and_fences_the_first() -> None:
    machine = TransactionMachine()
    ids = _ids()
    first = _done(machine, machine.init_producer_id(TID, 60_000, 0, lambda: next(ids))).producer
    second = _done(machine, machine.init_producer_id(TID, 60_000, 1, lambda: next(ids))).producer
    assert second == (first[0], first[1] + 1)
    assert machine.add_partitions(TID, *first, [A], 2).error == PRODUCER_FENCED
    assert machine.end_transaction(TID, *first, True, 2).error == PRODUCER_FENCED
    assert machine.add_partitions(TID, second[0], second[1] + 1, [A], 2).error == (
        INVALID_PRODUCER_EPOCH
    )
    assert machine.add_partitions(TID, 999, second[1], [A], 2).error == INVALID_PRODUCER_ID_MAPPING
    assert machine.add_partitions("unknown", *second, [A], 2).error == INVALID_PRODUCER_ID_MAPPING


def test_the_epoch_runs_out_into_a_new_producer_id() -> None:
    machine = TransactionMachine()
    assert machine.needs_new_producer_id(TID)  # a new transactional id
    machine.written(TxnMetadata(TID, 7, MAX_EPOCH - 1, 60_000, TxnState.COMPLETE_COMMIT))
    assert not machine.needs_new_producer_id(TID)
    assert _done(machine, machine.init_producer_id(TID, 60_000, 0, lambda: 8)).producer == (
        7,
        MAX_EPOCH,
    )
    assert machine.needs_new_producer_id(TID)
    assert machine.init_producer_id(TID, 60_000, 0, lambda: 8).producer == (8, 0)


def test_the_timeout_is_bounded_by_transaction_max_timeout_ms() -> None:
    machine = TransactionMachine(max_timeout_ms=60_000)
    assert machine.init_producer_id(TID, 60_001, 0, lambda: 1).error == INVALID_TRANSACTION_TIMEOUT
    assert machine.init_producer_id(TID, 0, 0, lambda: 1).error == INVALID_TRANSACTION_TIMEOUT


def test_a_commit_prepares_then_sends_markers_then_completes() -> None:
    machine = TransactionMachine()
    producer = _started(machine)
    # Adding what it holds already writes nothing.
    assert machine.add_partitions(TID, *producer, [A], 11) == Decision()
    ongoing = machine.describe(TID)
    assert ongoing and ongoing.state == TxnState.ONGOING and ongoing.start_ms == 10

    ending = _done(machine, machine.end_transaction(TID, *producer, True, 20))
    assert ending.write and ending.write.state == TxnState.PREPARE_COMMIT
    assert ending.markers and ending.markers.commit and ending.markers.partitions == {A, B}
    assert ending.markers.producer_epoch == producer[1]
    # Until the markers are written the id is busy, and the same EndTxn is asked again.
    assert machine.add_partitions(TID, *producer, [A], 21).error == CONCURRENT_TRANSACTIONS
    assert machine.end_transaction(TID, *producer, True, 21).error == CONCURRENT_TRANSACTIONS
    assert machine.init_producer_id(TID, 60_000, 21, lambda: 5).error == CONCURRENT_TRANSACTIONS

    complete = _done(machine, machine.markers_written(TID, 30))
    assert complete.write == TxnMetadata(
        TID, *producer, 60_000, TxnState.COMPLETE_COMMIT, last_update_ms=30
    )
    # A retried EndTxn for what is done succeeds; the other ending does not.
    assert machine.end_transaction(TID, *producer, True, 31) == Decision()
    assert machine.end_transaction(TID, *producer, False, 31).error == INVALID_TXN_STATE
    # The next transaction starts from here.
    again = _done(machine, machine.add_partitions(TID, *producer, [B], 40))
    assert again.write and again.write.partitions == {B} and again.write.start_ms == 40


def test_end_without_a_transaction_is_invalid() -> None:
    machine = TransactionMachine()
    producer = _done(machine, machine.init_producer_id(TID, 60_000, 0, lambda: 1)).producer
    assert machine.end_transaction(TID, *producer, True, 1).error == INVALID_TXN_STATE
    assert machine.end_transaction(TID, *producer, False, 1).error == INVALID_TXN_STATE


def test_a_new_instance_aborts_what_the_last_one_left_open_under_a_new_epoch() -> None:
    machine = TransactionMachine()
    producer = _started(machine)
    fence = machine.init_producer_id(TID, 60_000, 50, lambda: 99)
    assert fence.error == CONCURRENT_TRANSACTIONS  # the client asks again
    assert fence.write and fence.write.state == TxnState.PREPARE_ABORT
    assert fence.markers and not fence.markers.commit
    assert fence.markers.producer_epoch == producer[1] + 1  # the markers fence the old one
    machine.written(fence.write)
    assert machine.end_transaction(TID, *producer, True, 51).error == PRODUCER_FENCED
    _done(machine, machine.markers_written(TID, 60))
    retried = machine.init_producer_id(TID, 60_000, 61, lambda: 99)
    assert retried.producer == (producer[0], producer[1] + 2)


def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    machine = TransactionMachine()
    producer = _started(machine)  # began at 10, timeout 60 s
    assert machine.abort_expired(60_010) == []
    (abort,) = machine.abort_expired(60_011)
    assert abort.error == NONE and abort.markers and not abort.markers.commit
    assert abort.markers.partitions == {A, B} and abort.markers.producer_epoch == producer[1] + 1
    assert machine.abort_expired(60_012) == []  # the write is in flight
    machine.written(abort.write)  # type: ignore[arg-type]
    assert machine.add_partitions(TID, *producer, [A], 60_013).error == PRODUCER_FENCED


def test_a_new_coordinator_finishes_what_the_dead_one_was_ending() -> None:
    # The old coordinator wrote PrepareCommit, sent some markers and died: the records
    # are all the new one has, and it owes the markers again (they are idempotent).
    first = TransactionMachine()
    producer = _started(first)
    history: list[tuple[str, TxnMetadata | None]] = [
        (TID, m) for m in [first.describe(TID)] if m is not None
    ]
    ending = _done(first, first.end_transaction(TID, *producer, True, 20))
    history.append((TID, ending.write))
    history += [("gone", TxnMetadata("gone", 5, 0, 1000, TxnState.EMPTY)), ("gone", None)]

    second = TransactionMachine()
    (owed,) = second.load(history)
    assert owed == ending.markers
    assert second.describe("gone") is None
    done = _done(second, second.markers_written(TID, 40))
    assert done.write and done.write.state == TxnState.COMPLETE_COMMIT
    second.unload(lambda tid: tid != TID)
    assert second.describe(TID) is None


def test_idle_ids_expire_but_never_one_with_an_open_transaction() -> None:
    machine = TransactionMachine()
    _started(machine)
    machine.written(TxnMetadata("idle", 1, 0, 1000, TxnState.COMPLETE_ABORT, last_update_ms=0))
    assert machine.expire_ids(now_ms=10**9, expiration_ms=1000) == ["idle"]
    # Busy while its tombstone is written: nothing may start on it meanwhile.
    assert machine.init_producer_id("idle", 1000, 10**9, lambda: 2).error == (
        CONCURRENT_TRANSACTIONS
    )
    assert machine.expire_ids(now_ms=10**9, expiration_ms=1000) == []
    machine.write_failed("idle")  # the tombstone was not written: the id stays
    assert machine.describe("idle") is not None
    assert machine.expire_ids(now_ms=10**9, expiration_ms=1000) == ["idle"]
    machine.forget("idle")
    assert machine.describe("idle") is None and "idle" not in machine.pending


def test_listing_filters_by_state_and_producer() -> None:
    machine = TransactionMachine()
    producer = _started(machine)
    machine.written(TxnMetadata("other", 5, 0, 1000, TxnState.EMPTY))
    assert [m.transactional_id for m in machine.listing([TxnState.ONGOING])] == [TID]
    assert [m.transactional_id for m in machine.listing(producer_ids=[5])] == ["other"]
    assert len(machine.listing()) == 2
    assert TxnState.PREPARE_EPOCH_FENCE.label == "PrepareEpochFence"
    assert producer[0] == 1000


def test_records_round_trip_in_kafkas_layout() -> None:
    ongoing = TxnMetadata(TID, 1000, 3, 60_000, TxnState.ONGOING, frozenset({A, B, ("x", 7)}),
                          start_ms=10, last_update_ms=20)  # fmt: skip
    key = transaction_key(TID)
    assert key == b"\x00\x00\x00\x0aorders-etl"
    assert read_transaction_key(key) == TID
    value = transaction_value(ongoing)
    # version 0, producer id, epoch, timeout, state code 1 (Ongoing)
    header = ["0000", "00000000000003e8", "0003", "0000ea60", "01"]
    assert value[:17] == bytes.fromhex("".join(header))
    assert read_transaction_value(TID, value) == ongoing
    empty = TxnMetadata(TID, 1000, 4, 60_000, TxnState.EMPTY, last_update_ms=30)
    assert transaction_value(empty)[17:21] == b"\xff\xff\xff\xff"  # null partitions
    assert read_transaction_value(TID, transaction_value(empty)) == empty
    assert read_transaction_value(TID, None) is None


@pytest.mark.parametrize("cut", [0, 3, 16, 20, 30])
def test_a_damaged_record_is_a_corrupt_record_error(cut: int) -> None:
    value = transaction_value(TxnMetadata(TID, 1, 0, 1000, TxnState.ONGOING, frozenset({A}), 0, 0))
    with pytest.raises(CorruptRecordError):
        read_transaction_value(TID, value[:cut])
    with pytest.raises(CorruptRecordError):
        read_transaction_value(TID, value[:16] + b"\x09" + value[17:])  # no state 9


def test_an_id_lives_on_the_partition_its_java_hash_picks() -> None:
    # Kafka's rule, as for groups: abs(String.hashCode) % 50.
    assert transaction_partition(TID, 50) == abs(_java_hash(TID)) % 50
    assert {transaction_partition(f"t{i}", 50) for i in range(500)} == set(range(50))


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def test_a_stale_task_completes_nothing() -> None:
    # A marker task of an ending the machine has moved past (a reload, a new ending)
    # must not complete the transaction ending now.
    machine = TransactionMachine()
    producer = _started(machine)
    first = _done(machine, machine.end_transaction(TID, *producer, False, 20))
    assert first.markers is not None
    other = replace(first.markers, commit=True)
    assert machine.markers_written(TID, 30, other).error == INVALID_TXN_STATE
    assert machine.markers_written(TID, 30, first.markers).write is not None
