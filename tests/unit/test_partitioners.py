from __future__ import annotations

import random
from collections import Counter

import pytest

from partita.client.murmur2 import partition_for_key
from partita.client.partitioners import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    choose_partition,
    load_partitioner,
)


def by_region(topic: str, key: bytes | None, value: bytes | None, n: int) -> int:
    return 0 if key and key.startswith(b"eu") else n - 1


class EveryoneToOne:
    def partition(self, topic, key, value, num_partitions, available=()):  # type: ignore[no-untyped-def]
        return 1

    def on_append(self, topic, partition, size, num_partitions):  # type: ignore[no-untyped-def]
        return None


def test_keyed_records_follow_murmur2_like_java() -> None:
    p = DefaultPartitioner()
    for key in (b"21", b"foobar", b"a-little-bit-long-string", b"user-42"):
        assert p.partition("t", key, b"v", 6) == partition_for_key(key, 6)
    # Java's value for "foobar" over 6 partitions: (-790332482 & 0x7fffffff) % 6.
    assert p.partition("t", b"foobar", None, 6) == (-790332482 & 0x7FFFFFFF) % 6


def test_explicit_partition_wins_and_is_checked() -> None:
    p = DefaultPartitioner()
    assert choose_partition(p, "t", b"k", b"v", 6, explicit=4) == 4
    with pytest.raises(ValueError, match="does not exist"):
        choose_partition(p, "t", b"k", b"v", 6, explicit=6)


def test_sticky_stays_until_a_batch_is_full_then_moves() -> None:
    p = DefaultPartitioner(batch_size=1000, adaptive=False, rng=random.Random(1))
    first = p.partition("t", None, b"x" * 100, 4)
    for _ in range(9):
        assert p.partition("t", None, b"x" * 100, 4) == first
        p.on_append("t", first, 100, 4)
    assert "t" in p.sticky.current
    p.on_append("t", first, 100, 4)  # 1000 bytes: the batch is full
    assert "t" not in p.sticky.current  # the next keyless record picks a partition anew
    # Over many batches every partition gets used.
    seen = set()
    for _ in range(200):
        q = p.partition("t", None, None, 4)
        seen.add(q)
        p.on_append("t", q, 1000, 4)
    assert seen == {0, 1, 2, 3}


def test_adaptive_sticky_prefers_short_queues() -> None:
    p = DefaultPartitioner(batch_size=1, adaptive=True, rng=random.Random(7))
    p.set_queue_sizes("t", [1000, 0, 1000, 1000])
    picks = Counter()
    for _ in range(500):
        q = p.partition("t", None, None, 4)
        picks[q] += 1
        p.on_append("t", q, 1, 4)
    assert picks.most_common(1)[0][0] == 1
    assert picks[1] > 0.9 * 500


def test_sticky_only_uses_available_partitions() -> None:
    p = DefaultPartitioner(batch_size=1, adaptive=False, rng=random.Random(3))
    for _ in range(50):
        q = p.partition("t", None, None, 6, available=[2, 5])
        assert q in (2, 5)
        p.on_append("t", q, 1, 6)


def test_round_robin() -> None:
    p = RoundRobinPartitioner()
    assert [p.partition("t", b"same-key", None, 3) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [p.partition("u", None, None, 5, available=[1, 3]) for _ in range(4)] == [1, 3, 1, 3]


def test_custom_partitioners() -> None:
    p = load_partitioner(by_region)
    assert p.partition("t", b"eu-1", None, 3) == 0
    assert p.partition("t", b"us-1", None, 3) == 2
    by_path = load_partitioner("tests.unit.test_partitioners:by_region")
    assert by_path.partition("t", b"eu", None, 3) == 0
    assert (
        load_partitioner("tests.unit.test_partitioners.EveryoneToOne").partition("t", None, None, 3)
        == 1
    )
    assert isinstance(load_partitioner("round_robin"), RoundRobinPartitioner)
    with pytest.raises(ValueError, match="unknown partitioner"):
        load_partitioner("nonsense")
    with pytest.raises(ValueError, match="cannot load"):
        load_partitioner("no.such.module:thing")
    broken = load_partitioner(lambda t, k, v, n: n + 5)
    with pytest.raises(ValueError, match="custom partitioner chose"):
        broken.partition("t", None, None, 3)
