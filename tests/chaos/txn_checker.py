"""The transactional workload's rules: what Jepsen's Kafka workload checks, over a history
(tests/chaos/history.py), no I/O.

Every reader here is read_committed: the transactional clients' own reads (TxnSaw), a
recording consumer's polls (CommittedPoll) and the final drain (CommittedRead). A value
names the transaction that wrote it, so each read is a write-read edge between two
transactions.

- aborted-read: no reader sees a value of a transaction that was aborted;
- dirty-read: no reader sees a value before its transaction asked to commit (read
  committed: the markers are written only after EndTxn);
- lost-commit: every value of a committed transaction is in the drain, at the partition
  it was sent to;
- torn: a transaction whose outcome the client does not know left all of its values in
  the drain or none (a committed one is lost-commit's, an aborted one aborted-read's);
- txn-duplicate: no value is read at two places;
- cycle (G1c, cyclic information flow): the graph of write-read edges between
  transactions has no cycle. A transaction reads before it commits and a read_committed
  reader sees only what committed before it read, so T1 -> T2 -> T1 would need T1 to
  commit before itself. Write-write order between two transactions on a partition is
  left out: Kafka lets transactions interleave on partitions (G0 is allowed, as Jepsen
  notes for Kafka), so ww cycles are no anomaly here;
- poll-gap: a read_committed consumer's successive records of a partition go forward,
  and it skips no committed record the drain found between them;
- stable-end: after every transaction ended and the cluster healed, each partition's last
  stable offset reached its high watermark (no transaction left hanging).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Sequence

from tests.chaos.history import (
    ABORTED,
    COMMITTED,
    CommittedDrain,
    CommittedPoll,
    CommittedRead,
    Event,
    TxnEnd,
    TxnSaw,
    TxnSend,
    transaction_of,
)
from tests.chaos.violation import Rule, Violation

Reading = TxnSaw | CommittedPoll | CommittedRead


def _readings(events: Sequence[Event]) -> list[Reading]:
    return [e for e in events if isinstance(e, TxnSaw | CommittedPoll | CommittedRead)]


def _ends(events: Sequence[Event]) -> dict[str, TxnEnd]:
    return {e.txn: e for e in events if isinstance(e, TxnEnd)}


def _who(e: Reading) -> str:
    if isinstance(e, TxnSaw):
        return f"transaction {e.txn}"
    if isinstance(e, CommittedPoll):
        return f"consumer {e.consumer}"
    return "the drain"


def aborted_read(events: Sequence[Event]) -> list[Violation]:
    ends = _ends(events)
    out = []
    for e in _readings(events):
        end = ends.get(transaction_of(e.value))
        if end is not None and end.status == ABORTED:
            out.append(
                Violation(
                    "aborted-read",
                    (e.value, _who(e)),
                    f"{_who(e)} read {e.value!r} at partition {e.partition} offset {e.offset}, "
                    f"written by {end.txn}, which was aborted",
                    (end, e),
                )
            )
    return out


def dirty_read(events: Sequence[Event]) -> list[Violation]:
    ends = _ends(events)
    out = []
    for e in _readings(events):
        if isinstance(e, CommittedRead):
            continue  # the drain runs after every transaction ended
        end = ends.get(transaction_of(e.value))
        if end is None or end.status == ABORTED:
            continue
        if end.commit_asked < 0 or e.t < end.commit_asked:
            when = (
                "never asked to commit"
                if end.commit_asked < 0
                else (f"asked to commit at t={end.commit_asked:.3f}")
            )
            out.append(
                Violation(
                    "dirty-read",
                    (e.value, e.kind, e.t),
                    f"{_who(e)} read {e.value!r} at t={e.t:.3f}, but {end.txn} {when}",
                    (end, e),
                )
            )
    return out


def _drained(events: Sequence[Event]) -> dict[int, CommittedDrain]:
    return {e.partition: e for e in events if isinstance(e, CommittedDrain)}


def lost_commit(events: Sequence[Event]) -> list[Violation]:
    drains = _drained(events)
    ends = _ends(events)
    found: dict[str, CommittedRead] = {}
    for e in events:
        if isinstance(e, CommittedRead):
            found.setdefault(e.value, e)
    out = []
    for e in events:
        if not isinstance(e, TxnSend) or e.partition not in drains:
            continue
        end = ends.get(e.txn)
        if end is None or end.status != COMMITTED:
            continue
        read = found.get(e.value)
        if read is None:
            out.append(
                Violation(
                    "lost-commit",
                    e.value,
                    f"{e.value!r} of {e.txn}, which committed, is not in partition {e.partition}",
                    (e, end, drains[e.partition]),
                )
            )
        elif read.partition != e.partition:
            out.append(
                Violation(
                    "lost-commit",
                    e.value,
                    f"{e.value!r} of {e.txn} was sent to partition {e.partition} and is in "
                    f"partition {read.partition}",
                    (e, end, read),
                )
            )
    return out


def torn(events: Sequence[Event]) -> list[Violation]:
    drains = _drained(events)
    ends = _ends(events)
    found = {e.value: e for e in events if isinstance(e, CommittedRead)}
    sends: dict[str, list[TxnSend]] = defaultdict(list)
    for e in events:
        if isinstance(e, TxnSend) and e.partition in drains:
            sends[e.txn].append(e)
    out = []
    for txn, sent in sends.items():
        end = ends.get(txn)
        if end is not None and end.status in (COMMITTED, ABORTED):
            continue
        present = [s for s in sent if s.value in found]
        missing = [s for s in sent if s.value not in found]
        if present and missing:
            here, gone = present[0], missing[0]
            out.append(
                Violation(
                    "torn",
                    txn,
                    f"{txn} (outcome unknown): {len(present)} of its {len(sent)} values are "
                    f"in the log, e.g. {here.value!r}, but not {gone.value!r}",
                    (here, found[here.value], drains[here.partition], gone, drains[gone.partition]),
                )
            )
    return out


def txn_duplicate(events: Sequence[Event]) -> list[Violation]:
    where: dict[str, Reading] = {}
    out = []
    reported = set()
    for e in _readings(events):
        first = where.setdefault(e.value, e)
        if (first.partition, first.offset) != (e.partition, e.offset) and e.value not in reported:
            reported.add(e.value)
            out.append(
                Violation(
                    "txn-duplicate",
                    e.value,
                    f"{e.value!r} is at partition {first.partition} offset {first.offset} "
                    f"({_who(first)}) and at partition {e.partition} offset {e.offset} "
                    f"({_who(e)})",
                    (first, e),
                )
            )
    return out


def cycle(events: Sequence[Event]) -> list[Violation]:
    """Write-read cycles between transactions: one per strongly connected component."""
    edges: dict[str, dict[str, TxnSaw]] = defaultdict(dict)
    for e in events:
        if isinstance(e, TxnSaw):
            edges[transaction_of(e.value)].setdefault(e.txn, e)
    out = []
    for component in _components(edges):
        path = _a_cycle(component, edges)
        if path is None:
            continue
        witnesses = tuple(edges[a][b] for a, b in zip(path, path[1:] + path[:1], strict=True))
        shown = " -> ".join([*path, path[0]])
        out.append(
            Violation(
                "cycle",
                tuple(sorted(component)),
                f"G1c, cyclic information flow: {shown} (each read a value the one before "
                "it wrote)",
                witnesses,
            )
        )
    return out


def _components(edges: dict[str, dict[str, TxnSaw]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (histories hold thousands)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    nodes = set(edges) | {b for targets in edges.values() for b in targets}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def _a_cycle(component: set[str], edges: dict[str, dict[str, TxnSaw]]) -> list[str] | None:
    """A shortest cycle through the component's first member, or None (a single
    transaction that did not read itself)."""
    start = min(component)
    if len(component) == 1:
        return [start] if start in edges.get(start, {}) else None
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        after = []
        for node in frontier:
            for child in sorted(edges.get(node, {})):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return path[::-1]
                if child in component and child not in parents:
                    parents[child] = node
                    after.append(child)
        frontier = after
    return None


def poll_gap(events: Sequence[Event]) -> list[Violation]:
    drained: dict[int, list[int]] = defaultdict(list)
    for e in events:
        if isinstance(e, CommittedRead):
            drained[e.partition].append(e.offset)
    reads_at = {(e.partition, e.offset): e for e in events if isinstance(e, CommittedRead)}
    for offsets in drained.values():
        offsets.sort()
    last: dict[tuple[int, int], CommittedPoll] = {}
    out = []
    for e in events:
        if not isinstance(e, CommittedPoll):
            continue
        before = last.get((e.consumer, e.partition))
        last[(e.consumer, e.partition)] = e
        if before is None:
            continue
        if e.offset <= before.offset:
            out.append(
                Violation(
                    "poll-gap",
                    (e.consumer, e.partition, before.offset, e.offset),
                    f"consumer {e.consumer} partition {e.partition}: offset {before.offset}, "
                    f"then {e.offset}",
                    (before, e),
                )
            )
            continue
        offsets = drained.get(e.partition, [])
        first_after = bisect_right(offsets, before.offset)
        if first_after < len(offsets) and offsets[first_after] < e.offset:
            missed = reads_at[(e.partition, offsets[first_after])]
            out.append(
                Violation(
                    "poll-gap",
                    (e.consumer, e.partition, before.offset, e.offset),
                    f"consumer {e.consumer} partition {e.partition}: went from offset "
                    f"{before.offset} to {e.offset}, past the committed {missed.value!r} at "
                    f"{missed.offset}",
                    (before, missed, e),
                )
            )
    return out


def stable_end(events: Sequence[Event]) -> list[Violation]:
    return [
        Violation(
            "stable-end",
            e.partition,
            f"partition {e.partition}: after every transaction ended, its last stable offset "
            f"is {e.stable} and its high watermark {e.end}: a transaction hangs open",
            (e,),
        )
        for e in events
        if isinstance(e, CommittedDrain) and e.stable != e.end
    ]


TXN_RULES: dict[str, Rule] = {
    "aborted-read": aborted_read,
    "dirty-read": dirty_read,
    "lost-commit": lost_commit,
    "torn": torn,
    "txn-duplicate": txn_duplicate,
    "cycle": cycle,
    "poll-gap": poll_gap,
    "stable-end": stable_end,
}
