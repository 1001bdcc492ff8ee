"""The chaos checker: rules over a history (tests/chaos/history.py), no I/O.

Each rule returns the violations it finds; each violation names the few events that show
it (its witnesses), and ``smallest_history`` shrinks those (delta debugging) to a history
no event of which can be left out without the violation disappearing, so a failure
prints the least there is to read.

The rules:
- single-value: each (partition, offset) holds one value everywhere: in acknowledgements,
  polls, the final drain and each replica's records below its high watermark;
- drain-gap: the final drain read every offset from its start to its end (offsets are
  contiguous: no compaction, no transactions);
- lost: every acknowledged value is read, at the offset it was acknowledged at (when the
  client said: librdkafka reports some retried values delivered without an offset);
- failed-read: no value of a definitely failed send is read or stored;
- duplicate: no value is read at two places;
- order: each producer's values appear in its send order within a partition;
- poll-order: each consumer's successive polls of a partition are contiguous, starting
  where it was assigned, never going back;
- monotonic: the leader epochs and high watermarks a consumer sees, and the leader epochs
  a broker announces, never go back; one leader per epoch;
- replicas: with every broker stopped cleanly, each replica holds the same records
  (value, leader epoch, producer id, sequence) up to the partition's high watermark, in
  the plain workload's topic and in the transactional one (markers included).

The transactional workload's rules (aborted and dirty reads, lost and torn transactions,
cycles between transactions) are in tests/chaos/txn_checker.py; ``check`` runs both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import pairwise

from tests.chaos.history import (
    FAILED,
    OK,
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
    describe,
    parse_value,
)
from tests.chaos.txn_checker import TXN_RULES
from tests.chaos.violation import Rule, Violation

__all__ = ["RULES", "Rule", "Violation", "check", "report", "smallest_history"]


def _committed_stored(events: Sequence[Event]) -> list[Stored]:
    """The plain workload's stored records below their own replica's high watermark."""
    hw = {(e.broker, e.partition): e.hw for e in events if isinstance(e, Replica) and not e.topic}
    return [
        e
        for e in events
        if isinstance(e, Stored) and not e.topic and e.offset < hw.get((e.broker, e.partition), -1)
    ]


def single_value(events: Sequence[Event]) -> list[Violation]:
    first: dict[tuple[int, int], Event] = {}
    out: list[Violation] = []
    reported: set[tuple[int, int]] = set()
    claims: list[tuple[int, int, str, Event]] = []
    for e in events:
        if (isinstance(e, Outcome) and e.status == OK and e.offset >= 0) or isinstance(
            e, Poll | Read
        ):
            claims.append((e.partition, e.offset, e.value, e))
    claims += [(e.partition, e.offset, e.value, e) for e in _committed_stored(events)]
    for partition, offset, value, e in claims:
        where = (partition, offset)
        seen = first.setdefault(where, e)
        if seen.value != value and where not in reported:  # type: ignore[union-attr]
            reported.add(where)
            out.append(
                Violation(
                    "single-value",
                    where,
                    f"partition {partition} offset {offset} holds {seen.value!r} and {value!r}",  # type: ignore[union-attr]
                    (seen, e),
                )
            )
    return out


def drain_gap(events: Sequence[Event]) -> list[Violation]:
    drains = {e.partition: e for e in events if isinstance(e, Drain)}
    reads: dict[int, list[Read]] = defaultdict(list)
    for e in events:
        if isinstance(e, Read) and e.partition in drains:
            reads[e.partition].append(e)
    out = []
    for partition, d in drains.items():
        got = sorted(reads[partition], key=lambda r: r.offset)
        if not got:
            if d.end > d.start:
                out.append(
                    Violation(
                        "drain-gap",
                        (partition, "empty", d.start, d.end),
                        f"partition {partition}: the drain of [{d.start}, {d.end}) read nothing",
                        (d,),
                    )
                )
            continue
        if got[0].offset != d.start:
            out.append(
                Violation(
                    "drain-gap",
                    (partition, "start", d.start, got[0].offset),
                    f"partition {partition}: the drain starts at {d.start}, its first record "
                    f"is at {got[0].offset}",
                    (d, got[0]),
                )
            )
        for before, after in pairwise(got):
            if after.offset > before.offset + 1:
                out.append(
                    Violation(
                        "drain-gap",
                        (partition, "gap", before.offset, after.offset),
                        f"partition {partition}: no record between offsets {before.offset} "
                        f"and {after.offset}",
                        (d, before, after),
                    )
                )
        if got[-1].offset < d.end - 1:
            out.append(
                Violation(
                    "drain-gap",
                    (partition, "end", got[-1].offset, d.end),
                    f"partition {partition}: the drain ends at {d.end}, its last record is "
                    f"at {got[-1].offset}",
                    (d, got[-1]),
                )
            )
    return out


def lost(events: Sequence[Event]) -> list[Violation]:
    drains = {e.partition: e for e in events if isinstance(e, Drain)}
    read_at: dict[str, Read] = {}
    for e in events:
        if isinstance(e, Read):
            read_at.setdefault(e.value, e)
    sends = {e.value: e for e in events if isinstance(e, Send)}
    out = []
    for e in events:
        if not (isinstance(e, Outcome) and e.status == OK) or e.partition not in drains:
            continue
        read = read_at.get(e.value)
        context = tuple(x for x in (sends.get(e.value), e) if x is not None)
        if read is None:
            out.append(
                Violation(
                    "lost",
                    e.value,
                    f"{e.value!r} was acknowledged at partition {e.partition} offset "
                    f"{e.offset} and never read",
                    (*context, drains[e.partition]),
                )
            )
        elif read.partition != e.partition or (e.offset >= 0 and read.offset != e.offset):
            out.append(
                Violation(
                    "lost",
                    e.value,
                    f"{e.value!r} was acknowledged at partition {e.partition} offset "
                    f"{e.offset} but read at partition {read.partition} offset {read.offset}",
                    (*context, read),
                )
            )
    return out


def failed_read(events: Sequence[Event]) -> list[Violation]:
    failed = {e.value: e for e in events if isinstance(e, Outcome) and e.status == FAILED}
    out = []
    reported = set()
    for e in events:
        plain = isinstance(e, Poll | Read) or (isinstance(e, Stored) and not e.topic)
        if plain and e.value in failed and e.value not in reported:
            reported.add(e.value)
            out.append(
                Violation(
                    "failed-read",
                    e.value,
                    f"{e.value!r} failed definitely ({failed[e.value].error}) yet was found at "
                    f"partition {e.partition} offset {e.offset}",
                    (failed[e.value], e),
                )
            )
    return out


def duplicate(events: Sequence[Event]) -> list[Violation]:
    where: dict[str, Event] = {}
    out = []
    reported = set()
    found: list[Event] = [e for e in events if isinstance(e, Poll | Read)]
    found += _committed_stored(events)
    for e in found:
        place = (e.partition, e.offset)  # type: ignore[union-attr]
        first = where.setdefault(e.value, e)  # type: ignore[union-attr]
        first_place = (first.partition, first.offset)  # type: ignore[union-attr]
        if first_place != place and e.value not in reported:  # type: ignore[union-attr]
            reported.add(e.value)  # type: ignore[union-attr]
            out.append(
                Violation(
                    "duplicate",
                    e.value,  # type: ignore[union-attr]
                    f"{e.value!r} is at partition {first_place[0]} offset {first_place[1]} "  # type: ignore[union-attr]
                    f"and at partition {place[0]} offset {place[1]}",
                    (first, e),
                )
            )
    return out


def order(events: Sequence[Event]) -> list[Violation]:
    reads = sorted((e for e in events if isinstance(e, Read)), key=lambda e: e.offset)
    last: dict[tuple[int, int], Read] = {}
    out = []
    for e in reads:
        producer, seq = parse_value(e.value)
        before = last.get((e.partition, producer))
        if before is not None and parse_value(before.value)[1] > seq:
            out.append(
                Violation(
                    "order",
                    (e.partition, before.value, e.value),
                    f"partition {e.partition}: producer {producer} sent {e.value!r} after "
                    f"{before.value!r}, but it is at offset {e.offset}, before {before.offset}",
                    (before, e),
                )
            )
        if before is None or parse_value(before.value)[1] < seq:
            last[(e.partition, producer)] = e
    return out


def poll_order(events: Sequence[Event]) -> list[Violation]:
    last: dict[tuple[int, int], Event] = {}
    out = []
    for e in events:
        if isinstance(e, Assign):
            last[(e.consumer, e.partition)] = e
        elif isinstance(e, Poll):
            before = last.get((e.consumer, e.partition))
            last[(e.consumer, e.partition)] = e
            if before is None:
                continue
            expected = before.offset if isinstance(before, Assign) else before.offset + 1
            if e.offset != expected:
                how = "went back" if e.offset < expected else "skipped ahead"
                out.append(
                    Violation(
                        "poll-order",
                        (e.consumer, e.partition, before.offset, e.offset),
                        f"consumer {e.consumer} partition {e.partition}: a poll {how} from "
                        f"offset {expected} to {e.offset}",
                        (before, e),
                    )
                )
    return out


def monotonic(events: Sequence[Event]) -> list[Violation]:
    out = []
    epoch: dict[tuple[int, int], Poll] = {}
    hw: dict[tuple[int, int], Poll] = {}
    announced: dict[tuple[int, int], LeaderSeen] = {}
    leader_at: dict[tuple[int, int], LeaderSeen] = {}
    for e in events:
        if isinstance(e, Poll):
            key = (e.consumer, e.partition)
            if e.epoch >= 0:
                before = epoch.get(key)
                if before is not None and e.epoch < before.epoch:
                    out.append(
                        Violation(
                            "monotonic",
                            ("poll-epoch", *key, before.offset, e.offset),
                            f"consumer {e.consumer} partition {e.partition}: leader epoch "
                            f"{before.epoch} at offset {before.offset}, then {e.epoch} at "
                            f"offset {e.offset}",
                            (before, e),
                        )
                    )
                epoch[key] = e
            if e.hw >= 0:
                before = hw.get(key)
                if before is not None and e.hw < before.hw:
                    out.append(
                        Violation(
                            "monotonic",
                            ("hw", *key, before.hw, e.hw),
                            f"consumer {e.consumer} partition {e.partition}: high watermark "
                            f"{before.hw} at t={before.t:.3f}, then {e.hw} at t={e.t:.3f}",
                            (before, e),
                        )
                    )
                hw[key] = e
        elif isinstance(e, LeaderSeen) and e.epoch >= 0:
            key = (e.observer, e.partition)
            seen = announced.get(key)
            if seen is not None and e.epoch < seen.epoch:
                out.append(
                    Violation(
                        "monotonic",
                        ("announced-epoch", *key, seen.epoch, e.epoch),
                        f"broker {e.observer} announced partition {e.partition} at epoch "
                        f"{seen.epoch}, then at {e.epoch}",
                        (seen, e),
                    )
                )
            announced[key] = e
            if e.leader >= 0:
                other = leader_at.setdefault((e.partition, e.epoch), e)
                if other.leader != e.leader:
                    out.append(
                        Violation(
                            "monotonic",
                            ("two-leaders", e.partition, e.epoch),
                            f"partition {e.partition} epoch {e.epoch} is led by broker "
                            f"{other.leader} (says {other.observer}) and by broker {e.leader} "
                            f"(says {e.observer})",
                            (other, e),
                        )
                    )
    return out


def replicas(events: Sequence[Event]) -> list[Violation]:
    states: dict[tuple[str, int], list[Replica]] = defaultdict(list)
    for e in events:
        if isinstance(e, Replica):
            states[(e.topic, e.partition)].append(e)
    stored: dict[tuple[str, int, int], dict[int, Stored]] = defaultdict(dict)
    for e in events:
        if isinstance(e, Stored):
            stored[(e.topic, e.partition, e.broker)].setdefault(e.offset, e)
    out = []
    for (topic, partition), members in sorted(states.items()):
        # The replica with the highest high watermark: what it holds below it is committed.
        top = max(members, key=lambda r: r.hw)
        reference = stored[(topic, partition, top.broker)]
        name = f"{topic} {partition}" if topic else str(partition)
        for member in members:
            if member is top:
                continue
            held = stored[(topic, partition, member.broker)]
            for offset in sorted(o for o in reference if o < top.hw):
                record = held.get(offset)
                if record is None:
                    out.append(
                        Violation(
                            "replicas",
                            (topic, partition, member.broker, offset, "missing"),
                            f"partition {name}: broker {member.broker} has no record at "
                            f"offset {offset}, below the high watermark {top.hw} of broker "
                            f"{top.broker}, which holds {_content(reference[offset])}",
                            (top, member, reference[offset]),
                        )
                    )
                    break
                if _content(record) != _content(reference[offset]):
                    out.append(
                        Violation(
                            "replicas",
                            (topic, partition, member.broker, offset, "differs"),
                            f"partition {name} offset {offset}: broker {member.broker} "
                            f"holds {_content(record)}, broker {top.broker} "
                            f"{_content(reference[offset])}",
                            (top, member, reference[offset], record),
                        )
                    )
                    break
    return out


def _content(e: Stored) -> tuple[str, int, int, int]:
    return (e.value, e.epoch, e.producer_id, e.sequence)


RULES: dict[str, Rule] = {
    "single-value": single_value,
    "drain-gap": drain_gap,
    "lost": lost,
    "failed-read": failed_read,
    "duplicate": duplicate,
    "order": order,
    "poll-order": poll_order,
    "monotonic": monotonic,
    "replicas": replicas,
    **TXN_RULES,
}


def check(events: Sequence[Event]) -> list[Violation]:
    return [v for rule in RULES.values() for v in rule(events)]


def shows(events: Sequence[Event], violation: Violation) -> bool:
    return any(v.key == violation.key for v in RULES[violation.rule](events))


def smallest_history(events: Sequence[Event], violation: Violation) -> list[Event]:
    """A 1-minimal sub-history (kept in its order) that still shows ``violation``."""
    start = list(violation.witnesses) if shows(violation.witnesses, violation) else list(events)
    return ddmin(start, lambda sub: shows(sub, violation))


def ddmin(items: list[Event], failing: Callable[[list[Event]], bool]) -> list[Event]:
    """Zeller's delta debugging: drop chunks, then single items, while ``failing`` holds."""
    n = 2
    while len(items) >= 2:
        chunk = -(-len(items) // n)
        subsets = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        for i in range(len(subsets)):
            complement = [x for j, s in enumerate(subsets) if j != i for x in s]
            if failing(complement):
                items = complement
                n = max(n - 1, 2)
                break
        else:
            if n >= len(items):
                break
            n = min(2 * n, len(items))
    return items


def report(events: Sequence[Event], violations: list[Violation], per_rule: int = 3) -> str:
    """The violations, a few per rule, each with its smallest history."""
    if not violations:
        return "no violations"
    lines = [f"{len(violations)} violations"]
    by_rule: dict[str, list[Violation]] = defaultdict(list)
    for v in violations:
        by_rule[v.rule].append(v)
    for rule, found in by_rule.items():
        lines.append(f"== {rule}: {len(found)}")
        for v in found[:per_rule]:
            lines.append(f"-- {v.message}")
            lines += ["   " + describe(e) for e in smallest_history(events, v)]
    return "\n".join(lines)
