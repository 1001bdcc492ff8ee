"""Offset ranges: how a read is cut into Spark tasks and how a trigger is rate limited.

Pure functions over ``{(topic, partition): offset}`` maps, following the rules of Spark's
Kafka source (``KafkaOffsetRangeCalculator`` and the source's ``rateLimit``), so that
partition counts, task splits and batch sizes come out as a Spark user expects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def to_checkpoint(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka checkpoint layout: ``{"topic": {"0": next_offset, ...}}``."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_checkpoint(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in data.items()
        for partition, offset in partitions.items()
    }


def _divide(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    size = offset_range.size
    bounds = [offset_range.start + size * i // parts for i in range(parts + 1)]
    return [
        OffsetRange(offset_range.topic, offset_range.partition, lo, hi)
        for lo, hi in itertools.pairwise(bounds)
        if hi > lo
    ]


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """One range per partition unless asked otherwise: ``maxRecordsPerPartition`` cuts big
    ranges first, then ``minPartitions`` splits ranges in proportion to their size until
    there are about that many. Empty ranges need no task and are dropped."""
    result = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        result = [
            piece
            for r in result
            for piece in _divide(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is not None and 0 < len(result) < min_partitions:
        total = sum(r.size for r in result)
        result = [
            piece
            for r in result
            for piece in _divide(r, max(1, round(r.size / total * min_partitions)))
        ]
    return result


def rate_limit(start: Mapping[TopicPartition, int], latest: Offsets, limit: int) -> Offsets:
    """End offsets that admit at most about ``limit`` records, shared between partitions in
    proportion to their backlog; a partition with a tiny share still gets one record so that
    it is never starved."""
    backlog = {tp: end - start.get(tp, end) for tp, end in latest.items()}
    total = sum(size for size in backlog.values() if size > 0)
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        size = backlog[tp]
        if size <= 0:
            out[tp] = end
            continue
        share = limit * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + take)
    return out


def backlog(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, offset - start.get(tp, offset)) for tp, offset in end.items())
