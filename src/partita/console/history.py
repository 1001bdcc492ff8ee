"""The last minutes of samples, turned into rates and trends (sans-IO).

Kafka's APIs give positions, not rates: a partition's log end offset and its size on
disk. Two samples apart give records/s and bytes/s; a group's lag at each sample gives
its trend. ``History`` keeps what the pages need for ``window_s`` seconds and no more:
offsets and sizes as arrays beside one shared tuple of partitions (10,000 partitions
polled every 2 s for 5 minutes are 24 MB this way, not the 300 MB of a dict per poll).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass

import numpy as np

from partita.console.model import Snapshot, TopicPartition

DEFAULT_WINDOW_S = 300.0
UNKNOWN = -1


@dataclass(frozen=True, slots=True)
class _Point:
    at: float
    # The same objects from one point to the next while the partitions stay the same.
    keys: tuple[TopicPartition, ...]
    index: dict[TopicPartition, int]
    log_ends: array[int]  # UNKNOWN where the poll learned nothing
    sizes: array[int]
    lags: dict[str, int]
    partition_lags: dict[tuple[str, str, int], int]

    def log_end(self, tp: TopicPartition) -> int | None:
        i = self.index.get(tp)
        if i is None or self.log_ends[i] == UNKNOWN:
            return None
        return self.log_ends[i]

    def size(self, tp: TopicPartition) -> int | None:
        i = self.index.get(tp)
        if i is None or self.sizes[i] == UNKNOWN:
            return None
        return self.sizes[i]


class History:
    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.window_s = window_s
        self._points: deque[_Point] = deque()
        self._rates_for: _Point | None = None
        self._rates: dict[TopicPartition, tuple[float, float]] = {}

    def add(self, snapshot: Snapshot) -> None:
        keys = tuple((t.name, p.partition) for t in snapshot.topics for p in t.partitions)
        last = self._points[-1] if self._points else None
        if last is not None and last.keys == keys:
            keys, index = last.keys, last.index
        else:
            index = {tp: i for i, tp in enumerate(keys)}
        ends = array("q", [UNKNOWN]) * len(keys)
        sizes = array("q", [UNKNOWN]) * len(keys)
        i = 0
        for t in snapshot.topics:
            for p in t.partitions:
                if p.log_end is not None:
                    ends[i] = p.log_end
                if p.sizes:
                    sizes[i] = p.leader_size
                i += 1
        lags = {g.group_id: g.lag for g in snapshot.groups if g.error is None}
        partition_lags = {
            (g.group_id, p.topic, p.partition): p.lag
            for g in snapshot.groups
            if g.error is None
            for p in g.partitions
            if p.lag is not None
        }
        self._points.append(
            _Point(snapshot.taken_at, keys, index, ends, sizes, lags, partition_lags)
        )
        while self._points and snapshot.taken_at - self._points[0].at > self.window_s:
            self._points.popleft()

    def rates(self, topic: str) -> dict[int, tuple[float, float]]:
        """(records/s, bytes/s) per partition of ``topic`` over the window."""
        return {tp[1]: rate for tp, rate in self._all_rates().items() if tp[0] == topic}

    def _all_rates(self) -> dict[TopicPartition, tuple[float, float]]:
        """Every partition's rates, computed once per sample for all pages. Over the
        samples since the set of partitions last changed; for each partition from the
        sample after its offset last fell or was unknown (a deleted and recreated topic
        counts from where it restarted). Vectorised: at 10,000 partitions and 150
        samples, a walk per partition took over a second."""
        if not self._points:
            return {}
        newest = self._points[-1]
        if self._rates_for is newest:
            return self._rates
        suffix = []
        for pt in reversed(self._points):
            if pt.keys is not newest.keys:
                break
            suffix.append(pt)
        suffix.reverse()
        rates: dict[TopicPartition, tuple[float, float]] = {}
        if len(suffix) >= 2 and newest.keys:
            ends = np.array([np.frombuffer(pt.log_ends, dtype=np.int64) for pt in suffix])
            sizes = np.array([np.frombuffer(pt.sizes, dtype=np.int64) for pt in suffix])
            at = np.array([pt.at for pt in suffix])
            rows = len(suffix)
            # A break between rows r and r+1: r unknown, or its offset above r+1's.
            broken = (ends[:-1] == UNKNOWN) | (ends[:-1] > ends[1:])
            last_break = (rows - 2) - np.argmax(broken[::-1], axis=0)
            start = np.where(broken.any(axis=0), last_break + 1, 0)
            columns = np.arange(ends.shape[1])
            seconds = at[-1] - at[start]
            moved = ends[-1] - ends[start, columns]
            first_size, last_size = sizes[start, columns], sizes[-1]
            grown = np.where(
                (first_size != UNKNOWN) & (last_size != UNKNOWN),
                np.maximum(last_size - first_size, 0),
                0,
            )
            with np.errstate(divide="ignore", invalid="ignore"):
                records = np.where(seconds > 0, moved / seconds, 0.0)
                grown_s = np.where(seconds > 0, grown / seconds, 0.0)
            known = ends[-1] != UNKNOWN
            for i, tp in enumerate(newest.keys):
                if known[i]:
                    rates[tp] = (float(records[i]), float(grown_s[i]))
        self._rates_for, self._rates = newest, rates
        return rates

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
