"""The chaos checker on hand-made histories: a correct one passes every rule, and each
rule catches the anomaly it exists for, shrunk to the few events that show it."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tests.chaos import checker
from tests.chaos.history import (
    FAILED,
    OK,
    UNKNOWN,
    Assign,
    Drain,
    Event,
    LeaderSeen,
    Outcome,
    Poll,
    Read,
    Replica,
    Send,
    Stored,
    from_json,
    to_json,
    value_of,
)

PARTITIONS = 2


def correct_history(seed: int = 1, sends: int = 60) -> list[Event]:
    """Three producers, two consumers, a leader change, a drain and three replicas: all
    as a correct cluster would have them."""
    rng = random.Random(seed)
    events: list[Event] = []
    logs: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    epochs = {p: 0 for p in range(PARTITIONS)}
    t = 0.0
    for c in (1, 2):
        for p in range(PARTITIONS):
            events.append(Assign(t, c, p, 0))
    seq = {1: 0, 2: 0, 3: 0}
    for i in range(sends):
        t += 0.01
        producer = 1 + i % 3
        value = value_of(producer, seq[producer])
        seq[producer] += 1
        p = rng.randrange(PARTITIONS)
        events.append(Send(t, value, p))
        if i == sends // 2:
            epochs[p] += 1
        status = rng.choice([OK, OK, OK, OK, UNKNOWN, FAILED])
        if status == FAILED:
            events.append(Outcome(t + 0.001, value, p, FAILED, -1, "NOT_ENOUGH_REPLICAS"))
            continue
        if status == OK or rng.random() < 0.5:  # an unknown send may or may not be written
            logs[p].append(value)
        if status == OK:
            events.append(Outcome(t + 0.002, value, p, OK, len(logs[p]) - 1))
        else:
            events.append(Outcome(t + 0.002, value, p, UNKNOWN, -1, "_MSG_TIMED_OUT"))
        for observer in (1, 2, 3):
            leader = 1 + epochs[p] % 3
            events.append(LeaderSeen(t, observer, p, leader, epochs[p], (1, 2, 3)))
    # Each consumer reads every partition in order, seeing the high watermark grow.
    for c in (1, 2):
        for p in range(PARTITIONS):
            for offset, value in enumerate(logs[p]):
                epoch = 0 if offset < len(logs[p]) // 2 else epochs[p]
                events.append(Poll(t, c, p, offset, value, epoch, offset + 1))
                t += 0.001
    for p in range(PARTITIONS):
        events.append(Drain(t, p, 0, len(logs[p])))
        events += [Read(p, offset, value) for offset, value in enumerate(logs[p])]
        for broker in (1, 2, 3):
            events.append(Replica(broker, p, len(logs[p]), len(logs[p])))
            events += [
                Stored(broker, p, offset, value, 0, 1000 + int(value[1]), int(value[3:]))
                for offset, value in enumerate(logs[p])
            ]
    return events


def acked(events: list[Event]) -> list[Outcome]:
    return [e for e in events if isinstance(e, Outcome) and e.status == OK]


def only(violations: list[checker.Violation], rule: str) -> checker.Violation:
    rules = {v.rule for v in violations}
    assert rules == {rule}, [v.message for v in violations]
    return violations[0]


@pytest.mark.parametrize("seed", range(5))
def test_a_correct_history_passes_every_rule(seed: int) -> None:
    assert checker.check(correct_history(seed)) == []


def test_events_round_trip_through_json() -> None:
    events = correct_history()
    assert [from_json(to_json(e)) for e in events] == events


def _replace(events: list[Event], old: Event, new: Event) -> list[Event]:
    return [new if e is old else e for e in events]


def test_single_value_two_values_at_one_offset() -> None:
    events = correct_history()
    read = next(e for e in events if isinstance(e, Read) and e.offset == 3)
    forged = Read(read.partition, read.offset, "p9-0")
    events = _replace(events, read, forged)
    violations = checker.check(events)
    v = next(v for v in violations if v.rule == "single-value")
    small = checker.smallest_history(events, v)
    assert len(small) == 2 and forged in small
    assert all(e.offset == 3 and e.partition == read.partition for e in small)  # type: ignore[union-attr]


def test_drain_gap_a_hole_in_the_log() -> None:
    events = correct_history()
    hole = next(e for e in events if isinstance(e, Read) and e.offset == 4)
    events = [e for e in events if e is not hole]
    v = next(v for v in checker.check(events) if v.rule == "drain-gap")
    small = checker.smallest_history(events, v)
    assert sorted(e.offset for e in small if isinstance(e, Read)) == [3, 5]
    assert any(isinstance(e, Drain) for e in small)


def test_lost_an_acknowledged_value_never_read() -> None:
    events = correct_history()
    victim = acked(events)[-1]  # the last acknowledged write of its partition...
    # ...vanishes from every read, as if the high watermark had gone back past it.
    events = [
        e
        for e in events
        if not (isinstance(e, Poll | Read | Stored) and e.value == victim.value)
        and not (isinstance(e, Drain) and e.partition == victim.partition)
    ]
    end = victim.offset
    events.append(Drain(9.0, victim.partition, 0, end))
    events = [
        Replica(e.broker, e.partition, end, end)
        if isinstance(e, Replica) and e.partition == victim.partition
        else e
        for e in events
    ]
    violations = checker.check(events)
    v = only(violations, "lost")
    small = checker.smallest_history(events, v)
    assert victim in small and any(isinstance(e, Drain) for e in small) and len(small) == 2


def test_lost_acknowledged_at_one_offset_read_at_another() -> None:
    events = correct_history()
    victim = acked(events)[0]
    moved = Outcome(victim.t, victim.value, victim.partition, OK, victim.offset + 100)
    events = _replace(events, victim, moved)
    v = only(checker.check(events), "lost")
    assert "read at partition" in v.message
    assert len(checker.smallest_history(events, v)) == 2


def test_lost_acknowledged_without_an_offset_must_still_be_read() -> None:
    events = correct_history()
    victim = acked(events)[1]
    unknown_offset = Outcome(victim.t, victim.value, victim.partition, OK, -1)
    events = _replace(events, victim, unknown_offset)
    assert checker.check(events) == []
    gone = [e for e in events if not (isinstance(e, Read) and e.value == victim.value)]
    violations = checker.check(gone)
    assert any(v.rule == "lost" and v.key == victim.value for v in violations)


def test_failed_read_a_definitely_failed_value_is_read() -> None:
    events = correct_history()
    failed = next(e for e in events if isinstance(e, Outcome) and e.status == FAILED)
    read = next(e for e in events if isinstance(e, Read) and e.partition == failed.partition)
    events = _replace(events, read, Read(read.partition, read.offset, failed.value))
    violations = [v for v in checker.check(events) if v.rule == "failed-read"]
    assert violations
    small = checker.smallest_history(events, violations[0])
    assert failed in small and len(small) == 2


def test_duplicate_one_value_read_twice() -> None:
    events = correct_history()
    reads = [e for e in events if isinstance(e, Read) and e.partition == 0]
    # The log holds the value at offset 2 once more at its end.
    extra = Read(0, reads[-1].offset + 1, reads[2].value)
    events = [
        *[e for e in events if not (isinstance(e, Drain) and e.partition == 0)],
        Drain(9.0, 0, 0, extra.offset + 1),
        extra,
    ]
    violations = checker.check(events)
    assert {v.rule for v in violations} == {"duplicate", "order"}  # a re-send is also late
    v = next(v for v in violations if v.rule == "duplicate")
    small = checker.smallest_history(events, v)
    assert len(small) == 2 and small[-1] == extra and small[0].offset == 2  # type: ignore[union-attr]


def test_order_a_producers_values_out_of_send_order() -> None:
    events = correct_history()
    reads = [e for e in events if isinstance(e, Read) and e.partition == 1]
    first = next(r for r in reads if r.value.startswith("p1-"))
    later = next(r for r in reads if r.value.startswith("p1-") and r is not first)
    # Swap two of producer 1's values in the log, everywhere it was read.
    swap = {first.value: later.value, later.value: first.value}

    def swapped(e: Event) -> Event:
        if isinstance(e, Read | Poll | Stored) and e.value in swap:
            return replace(e, value=swap[e.value])
        return e

    # Nothing was acknowledged for them: their sends' outcomes are unknown.
    events = [swapped(e) for e in events if not (isinstance(e, Send | Outcome) and e.value in swap)]
    v = only(checker.check(events), "order")
    small = checker.smallest_history(events, v)
    assert [e.offset for e in small] == [first.offset, later.offset]  # type: ignore[union-attr]


def test_poll_order_a_consumer_skips_and_goes_back() -> None:
    events = correct_history()
    polls = [e for e in events if isinstance(e, Poll) and e.consumer == 1 and e.partition == 0]
    skipped = [e for e in events if e is not polls[5]]
    v = only(checker.check(skipped), "poll-order")
    assert "skipped ahead" in v.message
    assert checker.smallest_history(skipped, v) == [polls[4], polls[6]]
    i = events.index(polls[6])
    back = [*events[: i + 1], polls[3], *events[i + 1 :]]
    violations = checker.check(back)
    assert {v.rule for v in violations} == {"poll-order", "monotonic"}  # its hw went back too
    assert any("went back" in v.message for v in violations)
    first = [e for e in events if e is not polls[0]]
    v = only(checker.check(first), "poll-order")
    assert "from offset 0 to 1" in v.message  # the first poll must be where it was assigned


def test_monotonic_high_watermark_goes_back() -> None:
    events = correct_history()
    polls = [e for e in events if isinstance(e, Poll) and e.consumer == 2 and e.partition == 1]
    late = polls[6]
    events = _replace(events, late, Poll(late.t, 2, 1, late.offset, late.value, late.epoch, 2))
    v = only(checker.check(events), "monotonic")
    assert "high watermark" in v.message
    assert len(checker.smallest_history(events, v)) == 2


def test_monotonic_leader_epoch_goes_back() -> None:
    events = correct_history()
    seen = [e for e in events if isinstance(e, LeaderSeen) and e.observer == 2]
    high = max(seen, key=lambda e: e.epoch)
    i = events.index(high)
    stale = LeaderSeen(high.t + 1, 2, high.partition, 1 + (high.epoch - 1) % 3, high.epoch - 1)
    events = [*events[: i + 1], stale, *events[i + 1 :]]
    v = only(checker.check(events), "monotonic")
    assert "announced" in v.message
    assert checker.smallest_history(events, v)[-1] == stale


def test_monotonic_two_leaders_in_one_epoch() -> None:
    events = correct_history()
    seen = next(e for e in events if isinstance(e, LeaderSeen) and e.observer == 3)
    rogue = LeaderSeen(seen.t, 3, seen.partition, seen.leader % 3 + 1, seen.epoch)
    events = _replace(events, seen, rogue)
    v = only(checker.check(events), "monotonic")
    assert "led by broker" in v.message


def test_monotonic_record_epochs_go_back_along_a_partition() -> None:
    events = correct_history()
    polls = [e for e in events if isinstance(e, Poll) and e.consumer == 1 and e.partition == 0]
    early = polls[-2]
    unknown = _replace(events, early, Poll(early.t, 1, 0, early.offset, early.value, -1, early.hw))
    assert checker.check(unknown) == []  # an unknown epoch (-1) is not compared
    events = _replace(events, early, Poll(early.t, 1, 0, early.offset, early.value, 7, early.hw))
    v = only(checker.check(events), "monotonic")
    assert "leader epoch 7" in v.message
    assert checker.smallest_history(events, v) == [
        Poll(early.t, 1, 0, early.offset, early.value, 7, early.hw),
        polls[-1],
    ]


def test_replicas_a_follower_misses_a_committed_record() -> None:
    events = correct_history()
    missing = next(e for e in events if isinstance(e, Stored) and e.broker == 3 and e.offset == 2)
    events = [e for e in events if e is not missing]
    v = only(checker.check(events), "replicas")
    small = checker.smallest_history(events, v)
    assert len(small) == 3
    assert {type(e).__name__ for e in small} == {"Replica", "Stored"}


def test_replicas_a_follower_holds_another_epoch() -> None:
    events = correct_history()
    odd = next(e for e in events if isinstance(e, Stored) and e.broker == 2 and e.offset == 1)
    changed = Stored(2, odd.partition, 1, odd.value, odd.epoch + 1, odd.producer_id, odd.sequence)
    events = _replace(events, odd, changed)
    v = only(checker.check(events), "replicas")
    assert changed in checker.smallest_history(events, v)


def test_records_past_a_replicas_high_watermark_are_not_compared() -> None:
    events = correct_history()
    tail = [e for e in events if isinstance(e, Stored) and e.broker == 1 and e.partition == 0]
    # Broker 1 holds one more record, uncommitted, that nobody else has.
    extra = Stored(1, 0, tail[-1].offset + 1, "p7-0", 5, 1007, 0)
    events.append(extra)
    assert checker.check(events) == []


def test_ddmin_finds_a_one_minimal_subset() -> None:
    items = list(range(40))
    result = checker.ddmin(items, lambda sub: 7 in sub and 31 in sub)  # type: ignore[arg-type,operator]
    assert result == [7, 31]


def test_the_report_prints_each_violation_with_its_smallest_history() -> None:
    events = correct_history()
    hole = next(e for e in events if isinstance(e, Read) and e.offset == 1 and e.partition == 1)
    events = [e for e in events if e is not hole]
    text = checker.report(events, checker.check(events))
    assert "== drain-gap: 1" in text and "== lost: 1" in text  # the value at the hole
    gap = text.split("== drain-gap: 1")[1].split("==")[0]
    assert gap.count("\n   read") == 2 and gap.count("\n   drain") == 1
