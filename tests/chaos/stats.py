"""Figures from a history, no I/O: throughput, latency, and how long each fault left a
partition without an acknowledgement."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from tests.chaos.history import OK, Event, Fault, Outcome, Send


@dataclass(frozen=True)
class Window:
    """One fault: from its start to its heal, and on until the next fault starts."""

    kind: str
    target: str
    start: float
    heal: float
    end: float


def fault_windows(events: Sequence[Event], run_end: float) -> list[Window]:
    starts: list[Fault] = []
    heals: dict[int, float] = {}
    for e in events:
        if isinstance(e, Fault) and e.fault not in ("settle", "heal-all", "phase"):
            if e.phase == "start":
                starts.append(e)
            elif e.phase == "heal" and starts:
                heals[len(starts) - 1] = e.t
    out = []
    for i, s in enumerate(starts):
        end = starts[i + 1].t if i + 1 < len(starts) else run_end
        out.append(Window(s.fault, s.target, s.t, heals.get(i, end), end))
    return out


def phases(events: Sequence[Event], run_end: float) -> list[tuple[str, float, float]]:
    marks = [e for e in events if isinstance(e, Fault) and e.fault == "phase"]
    return [
        (m.target, m.t, marks[i + 1].t if i + 1 < len(marks) else run_end)
        for i, m in enumerate(marks)
    ]


def ack_times(events: Sequence[Event]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if isinstance(e, Outcome) and e.status == OK:
            out[e.partition].append(e.t)
    for times in out.values():
        times.sort()
    return out


def latencies(events: Sequence[Event]) -> list[tuple[float, float]]:
    """(send time, seconds to its acknowledgement) of every acknowledged send."""
    sent = {e.value: e.t for e in events if isinstance(e, Send)}
    return sorted(
        (sent[e.value], e.t - sent[e.value])
        for e in events
        if isinstance(e, Outcome) and e.status == OK and e.value in sent
    )


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def unavailability(
    acks: dict[int, list[float]], start: float, end: float, inside: bool = False
) -> float:
    """The longest time any partition went without an acknowledgement, among the gaps
    that ended in (start, end]: a fault's window runs until the next fault starts, and a
    silence belongs to the last fault that started before it ended. ``inside``: among
    the gaps that lie within [start, end] (quiet running)."""
    worst = 0.0
    for times in acks.values():
        for before, after in pairwise(times):
            if (before >= start and after <= end) if inside else (start < after <= end):
                worst = max(worst, after - before)
    return worst


@dataclass(frozen=True)
class Figures:
    name: str
    seconds: float
    acks_per_s: float
    p50_ms: float
    p99_ms: float
    faults: int
    unavailable_mean_s: float
    unavailable_max_s: float
    unknown: int
    failed: int


def figures(
    events: Sequence[Event], name: str, start: float, end: float, windows: list[Window]
) -> Figures:
    acks = ack_times(events)
    acked = sum(1 for times in acks.values() for t in times if start <= t < end)
    lat = [d for t, d in latencies(events) if start <= t < end]
    sent_in = {e.value for e in events if isinstance(e, Send) and start <= e.t < end}
    outcomes = [e for e in events if isinstance(e, Outcome) and e.value in sent_in]
    gaps = [unavailability(acks, w.start, w.end) for w in windows if start <= w.start < end]
    if not gaps:  # no fault: the longest gap of quiet running, for comparison
        gaps_quiet = unavailability(acks, start, end, inside=True)
        mean_gap, max_gap = gaps_quiet, gaps_quiet
    else:
        mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
        max_gap = max(gaps, default=0.0)
    return Figures(
        name,
        end - start,
        acked / (end - start) if end > start else 0.0,
        percentile(lat, 0.50) * 1000,
        percentile(lat, 0.99) * 1000,
        len(gaps),
        mean_gap,
        max_gap,
        sum(1 for e in outcomes if e.status == "unknown"),
        sum(1 for e in outcomes if e.status == "failed"),
    )


def table(rows: list[Figures]) -> str:
    head = (
        "| workload | s | acks/s | p50 ms | p99 ms | faults | unavailable mean s | max s "
        "| unknown | failed |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.seconds:.0f} | {r.acks_per_s:.0f} | {r.p50_ms:.1f} | "
            f"{r.p99_ms:.0f} | {r.faults} | {r.unavailable_mean_s:.2f} | "
            f"{r.unavailable_max_s:.2f} | {r.unknown} | {r.failed} |"
        )
    return "\n".join(lines)
