"""The last minutes of samples, turned into rates and trends (sans-IO).

Kafka's APIs give positions, not rates: a partition's log end offset and its size on
disk. Two samples apart give records/s and bytes/s; a group's lag at each sample gives
its trend. ``History`` keeps what the pages need for ``window_s`` seconds and no more.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from partita.console.model import Snapshot, TopicPartition

DEFAULT_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class _Point:
    at: float
    log_ends: dict[TopicPartition, int]
    sizes: dict[TopicPartition, int]
    lags: dict[str, int]
    partition_lags: dict[tuple[str, str, int], int]


class History:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: deque[_Point] = deque()

    def add(self, snapshot: Snapshot) -> None:
        log_ends: dict[TopicPartition, int] = {}
        sizes: dict[TopicPartition, int] = {}
        for t in snapshot.topics:
            for p in t.partitions:
                if p.log_end is not None:
                    log_ends[(t.name, p.partition)] = p.log_end
                if p.sizes:
                    sizes[(t.name, p.partition)] = p.leader_size
        lags = {g.group_id: g.lag for g in snapshot.groups if g.error is None}
        partition_lags = {
            (g.group_id, p.topic, p.partition): p.lag
            for g in snapshot.groups
            if g.error is None
            for p in g.partitions
            if p.lag is not None
        }
        self._points.append(_Point(snapshot.taken_at, log_ends, sizes, lags, partition_lags))
        while self._points and snapshot.taken_at - self._points[0].at > self.window_s:
            self._points.popleft()

    def _pairs(self) -> list[tuple[_Point, _Point]]:
        points = list(self._points)
        return list(itertools.pairwise(points))

    def rates(self, topic: str) -> dict[int, tuple[float, float]]:
        """(records/s, bytes/s) per partition over the window: from the oldest sample to
        the newest that both know the partition (a deleted and recreated topic, whose
        offsets fall back, counts from where it restarted)."""
        out: dict[int, tuple[float, float]] = {}
        if len(self._points) < 2:
            return out
        newest = self._points[-1]
        for (name, partition), end in newest.log_ends.items():
            if name != topic:
                continue
            # Back from the newest sample while the offset only fell going back: a sample
            # whose offset is higher than the next one's is from before a reset.
            first = newest
            for pt in reversed(self._points):
                then = pt.log_ends.get((name, partition))
                if then is None or then > first.log_ends[(name, partition)]:
                    break
                first = pt
            if first is newest or newest.at <= first.at:
                out[partition] = (0.0, 0.0)
                continue
            seconds = newest.at - first.at
            records = (end - first.log_ends[(name, partition)]) / seconds
            size_then = first.sizes.get((name, partition))
            size_now = newest.sizes.get((name, partition))
            grown = (
                max(0, size_now - size_then) / seconds
                if size_then is not None and size_now is not None
                else 0.0
            )
            out[partition] = (records, grown)
        return out

    def record_series(self, topic: str, partition: int) -> list[float]:
        """Records/s between consecutive samples, oldest first (a sparkline)."""
        key = (topic, partition)
        series = []
        for a, b in self._pairs():
            if key in a.log_ends and key in b.log_ends and b.at > a.at:
                series.append(max(0, b.log_ends[key] - a.log_ends[key]) / (b.at - a.at))
        return series

    def lag_series(self, group_id: str) -> list[int]:
        return [pt.lags[group_id] for pt in self._points if group_id in pt.lags]

    def partition_lag_series(self, group_id: str, topic: str, partition: int) -> list[int]:
        key = (group_id, topic, partition)
        return [pt.partition_lags[key] for pt in self._points if key in pt.partition_lags]


def trend(series: list[int] | list[float]) -> str:
    """``growing``, ``draining`` or ``steady``, from the first and last thirds."""
    if len(series) < 3:
        return "steady"
    third = max(1, len(series) // 3)
    before = sum(series[:third]) / third
    after = sum(series[-third:]) / third
    if after > before * 1.1 and after - before >= 1:
        return "growing"
    if after < before * 0.9 and before - after >= 1:
        return "draining"
    return "steady"
