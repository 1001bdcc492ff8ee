"""Offset ranges cut into Spark tasks, and triggers limited, as Spark's Kafka source does."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from partita.spark.planning import (
    OffsetRange,
    from_checkpoint,
    rate_limit,
    split_ranges,
    to_checkpoint,
)


def test_checkpoint_layout_is_sparks() -> None:
    offsets = {("b", 1): 7, ("a", 0): 3, ("a", 10): 4}
    layout = to_checkpoint(offsets)
    assert layout == {"a": {"0": 3, "10": 4}, "b": {"1": 7}}
    assert from_checkpoint(layout) == offsets


def test_one_range_per_partition_by_default_and_empty_ranges_dropped() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)]
    assert split_ranges(ranges) == [OffsetRange("t", 0, 0, 10)]


def test_max_records_per_partition_cuts_big_ranges() -> None:
    pieces = split_ranges([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4)
    assert [(p.start, p.end) for p in pieces] == [(0, 3), (3, 6), (6, 10)]


def test_min_partitions_splits_in_proportion_to_size() -> None:
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 0, 100)]
    pieces = split_ranges(ranges, min_partitions=4)
    assert [(p.partition, p.start, p.end) for p in pieces] == [
        (0, 0, 100),
        (0, 100, 200),
        (0, 200, 300),
        (1, 0, 100),
    ]
    # Already enough ranges: left alone.
    assert split_ranges(ranges, min_partitions=2) == ranges


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(1, 20)),
    st.one_of(st.none(), st.integers(1, 2000)),
)
def test_splits_cover_every_offset_exactly_once(
    spans: list[tuple[int, int]], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", i, lo, lo + n) for i, (lo, n) in enumerate(spans)]
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    for r in ranges:
        own = sorted((p.start, p.end) for p in pieces if p.partition == r.partition)
        covered = [o for lo, hi in own for o in range(lo, hi)]
        assert covered == list(range(r.start, r.end))
    if max_records is not None:
        assert all(p.size <= max_records for p in pieces) or min_partitions is not None


def test_rate_limit_shares_by_backlog_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 900, ("t", 1): 99, ("t", 2): 11}
    limited = rate_limit(start, latest, 100)
    assert limited == {("t", 0): 90, ("t", 1): 9, ("t", 2): 11}
    assert rate_limit(start, latest, 10_000) == latest


@given(
    st.dictionaries(
        st.integers(0, 8), st.tuples(st.integers(0, 100), st.integers(0, 1000)), min_size=1
    ),
    st.integers(1, 500),
)
def test_rate_limit_stays_within_the_backlog(spans: dict[int, tuple[int, int]], limit: int) -> None:
    start = {("t", p): lo for p, (lo, _n) in spans.items()}
    latest = {("t", p): lo + n for p, (lo, n) in spans.items()}
    limited = rate_limit(start, latest, limit)
    for tp, end in latest.items():
        assert start[tp] <= limited[tp] <= end
    admitted = sum(limited[tp] - start[tp] for tp in latest)
    assert admitted <= max(limit + len(latest), 0)
