"""The transactional rules on hand-made histories: a correct one passes, and each rule
catches the anomaly it exists for (aborted and dirty reads, a lost or torn transaction,
a value twice, a G1c cycle, a consumer skipping a committed record, a hanging
transaction), shrunk to the events that show it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.chaos import checker
from tests.chaos.history import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    CommittedDrain,
    CommittedPoll,
    CommittedRead,
    Event,
    Replica,
    Stored,
    TxnEnd,
    TxnSaw,
    TxnSend,
    from_json,
    to_json,
    transaction_name,
)

PARTITIONS = 3


def correct_history(seed: int = 1, transactions: int = 40) -> list[Event]:
    """Three transactional clients taking turns: each transaction reads what committed
    before it, writes one to three values, then commits, aborts, or ends unknown (its
    values all written or none); markers take offsets; a read_committed consumer and the
    drain read every committed value; three identical replicas."""
    rng = random.Random(seed)
    events: list[Event] = []
    log: dict[int, list[tuple[str, str]]] = {p: [] for p in range(PARTITIONS)}  # value, txn
    visible: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
    t = 0.0
    for n in range(transactions):
        client = 1 + n % 3
        txn = transaction_name(client, n)
        t += 0.01
        for p in range(PARTITIONS):  # reads what committed so far
            for offset, value in visible[p][-2:]:
                events.append(TxnSaw(t, txn, p, offset, value))
        status = rng.choice([COMMITTED, COMMITTED, COMMITTED, ABORTED, UNKNOWN])
        written = status != ABORTED and (status == COMMITTED or rng.random() < 0.5)
        touched = set()
        for i in range(rng.randint(1, 3)):
            p = rng.randrange(PARTITIONS)
            value = f"{txn}-{i}"
            events.append(TxnSend(t, txn, value, p))
            log[p].append((value, txn))
            touched.add(p)
            if written:
                visible[p].append((len(log[p]) - 1, value))
        for p in touched:
            log[p].append(("marker", txn))
        asked = t + 0.001 if status != ABORTED else -1.0
        events.append(TxnEnd(t + 0.002, txn, status, asked))
    t += 1
    for p in range(PARTITIONS):
        for offset, value in visible[p]:
            events.append(CommittedPoll(t, 11, p, offset, value))
            t += 0.001
    for p in range(PARTITIONS):
        events.append(CommittedDrain(t, p, len(log[p]), len(log[p])))
    for p in range(PARTITIONS):
        events += [CommittedRead(p, offset, value) for offset, value in visible[p]]
        for broker in (1, 2, 3):
            events.append(Replica(broker, p, len(log[p]), len(log[p]), "chaos-txn"))
            events += [
                Stored(broker, p, offset, value, 0, 1000, -1, "chaos-txn")
                for offset, (value, _txn) in enumerate(log[p])
            ]
    return events


def only(events: list[Event], rule: str) -> checker.Violation:
    violations = checker.check(events)
    assert {v.rule for v in violations} == {rule}, [v.message for v in violations]
    return violations[0]


def ended(events: list[Event], status: str) -> list[TxnEnd]:
    return [e for e in events if isinstance(e, TxnEnd) and e.status == status]


def sends_of(events: list[Event], txn: str) -> list[TxnSend]:
    return [e for e in events if isinstance(e, TxnSend) and e.txn == txn]


@pytest.mark.parametrize("seed", range(5))
def test_a_correct_history_passes_every_rule(seed: int) -> None:
    events = correct_history(seed)
    assert ended(events, ABORTED) and ended(events, UNKNOWN) and ended(events, COMMITTED)
    assert checker.check(events) == []


def test_transactional_events_round_trip_through_json() -> None:
    events = correct_history()
    assert [from_json(to_json(e)) for e in events] == events


def test_aborted_read_a_consumer_sees_an_aborted_value() -> None:
    events = correct_history()
    aborted = ended(events, ABORTED)[0]
    send = sends_of(events, aborted.txn)[0]
    forged = CommittedPoll(99.0, 12, send.partition, 500, send.value)
    events.append(forged)
    v = only(events, "aborted-read")
    assert aborted.txn in v.message and "consumer 12" in v.message
    assert set(checker.smallest_history(events, v)) == {aborted, forged}


def test_dirty_read_before_the_writer_asked_to_commit() -> None:
    events = correct_history()
    committed = ended(events, COMMITTED)[-1]
    send = sends_of(events, committed.txn)[0]
    at = next(e for e in events if isinstance(e, CommittedRead) and e.value == send.value)
    early = TxnSaw(committed.commit_asked - 0.0005, "x9-1", at.partition, at.offset, send.value)
    events.append(early)
    v = only(events, "dirty-read")
    assert "asked to commit" in v.message
    assert set(checker.smallest_history(events, v)) == {committed, early}


def test_lost_commit_a_committed_value_missing_from_the_log() -> None:
    events = correct_history()
    committed = ended(events, COMMITTED)[3]
    gone = sends_of(events, committed.txn)[0]
    events = [
        e
        for e in events
        if not (isinstance(e, CommittedRead | CommittedPoll | TxnSaw) and e.value == gone.value)
    ]
    v = only(events, "lost-commit")
    small = checker.smallest_history(events, v)
    assert gone in small and committed in small
    assert any(isinstance(e, CommittedDrain) and e.partition == gone.partition for e in small)


def test_lost_commit_a_value_in_another_partition() -> None:
    events = correct_history()
    committed = ended(events, COMMITTED)[0]
    sent = sends_of(events, committed.txn)[0]
    read = next(e for e in events if isinstance(e, CommittedRead) and e.value == sent.value)
    moved = CommittedRead((read.partition + 1) % PARTITIONS, 900, read.value)
    events = [
        moved if e is read else e
        for e in events
        if not (isinstance(e, CommittedPoll | TxnSaw) and e.value == sent.value)
    ]
    v = only(events, "lost-commit")
    assert "is in partition" in v.message


def test_torn_an_unknown_transaction_half_in_the_log() -> None:
    events = correct_history(seed=3, transactions=60)
    candidates = [
        e.txn
        for e in ended(events, UNKNOWN)
        if len(sends_of(events, e.txn)) > 1
        and any(isinstance(r, CommittedRead) and r.value == sends_of(events, e.txn)[0].value
                for r in events)
    ]  # fmt: skip
    txn = candidates[0]
    gone = sends_of(events, txn)[1]
    events = [
        e
        for e in events
        if not (isinstance(e, CommittedRead | CommittedPoll | TxnSaw) and e.value == gone.value)
    ]
    v = only(events, "torn")
    assert txn in v.message and gone.value in v.message
    assert len(checker.smallest_history(events, v)) <= 5


def test_txn_duplicate_a_value_at_two_offsets() -> None:
    events = correct_history()
    read = next(e for e in events if isinstance(e, CommittedRead))
    again = CommittedRead(read.partition, 777, read.value)
    events.append(again)
    v = only(events, "txn-duplicate")
    small = checker.smallest_history(events, v)
    assert len(small) == 2 and again in small and {e.value for e in small} == {read.value}


def without_reads(events: list[Event]) -> list[Event]:
    """The history without its transactions' reads: the cycles below are all there is."""
    return [e for e in events if not isinstance(e, TxnSaw)]


def test_cycle_two_transactions_each_read_the_others_write() -> None:
    events = without_reads(correct_history())
    one, two = ended(events, COMMITTED)[1:3]
    value_one = sends_of(events, one.txn)[0]
    value_two = sends_of(events, two.txn)[0]
    # Reads at times past both commits: no dirty read, only the cycle.
    late = 50.0
    a = TxnSaw(late, two.txn, value_one.partition, 600, value_one.value)
    b = TxnSaw(late, one.txn, value_two.partition, 601, value_two.value)
    events += [a, b]
    violations = [v for v in checker.check(events) if v.rule == "cycle"]
    assert len(violations) == 1, [v.message for v in checker.check(events)]
    v = violations[0]
    assert "G1c" in v.message and one.txn in v.message and two.txn in v.message
    assert set(checker.smallest_history(events, v)) == {a, b}


def test_cycle_a_longer_cycle_and_a_transaction_reading_itself() -> None:
    events = without_reads(correct_history(transactions=60))
    chain = ended(events, COMMITTED)[:4]
    values = [sends_of(events, e.txn)[0] for e in chain]
    late = 50.0
    for i, reader in enumerate(chain):
        writer = values[i - 1]  # each reads the one before it; the first reads the last
        events.append(TxnSaw(late, reader.txn, writer.partition, 700 + i, writer.value))
    self_read = sends_of(events, ended(events, COMMITTED)[5].txn)[0]
    events.append(TxnSaw(late, self_read.txn, self_read.partition, 800, self_read.value))
    found = sorted(v.message for v in checker.check(events) if v.rule == "cycle")
    assert len(found) == 2, found
    assert any(all(e.txn in m for e in chain) for m in found)
    assert any(f"{self_read.txn} -> {self_read.txn}" in m for m in found)


def test_poll_gap_a_consumer_skips_a_committed_record_and_goes_back() -> None:
    events = correct_history()
    polls = [e for e in events if isinstance(e, CommittedPoll) and e.partition == 0]
    events = [e for e in events if e is not polls[2]]
    v = only(events, "poll-gap")
    assert f"past the committed {polls[2].value!r}" in v.message
    back = replace(polls[5], t=polls[-1].t + 1)
    events.append(back)
    messages = [v.message for v in checker.check(events) if v.rule == "poll-gap"]
    assert any(f"offset {polls[-1].offset}, then {polls[5].offset}" in m for m in messages)


def test_stable_end_a_transaction_left_hanging() -> None:
    events = correct_history()
    drain = next(e for e in events if isinstance(e, CommittedDrain))
    stuck = replace(drain, stable=drain.end - 3)
    events = [stuck if e is drain else e for e in events]
    v = only(events, "stable-end")
    assert "hangs open" in v.message
    assert checker.smallest_history(events, v) == [stuck]


def test_replicas_of_the_transactional_topic_compare_markers_too() -> None:
    events = correct_history()
    marker = next(
        e for e in events if isinstance(e, Stored) and e.broker == 2 and e.value == "marker"
    )
    events = [replace(marker, epoch=7) if e is marker else e for e in events]
    v = only(events, "replicas")
    assert v.message.startswith("partition chaos-txn ")
