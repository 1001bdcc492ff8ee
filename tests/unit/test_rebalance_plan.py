"""The reassignment plan: balanced within one replica, as few moves as possible."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from partita.cluster.placement import assign_replicas
from partita.cluster.rebalance_plan import moves, plan


def _current(partitions: int, brokers: list[int], seed: int) -> dict[tuple[str, int], list[int]]:
    placed = assign_replicas({b: None for b in brokers}, partitions, 3, rng=random.Random(seed))
    return {("t", p): r for p, r in placed.items()}


@pytest.mark.parametrize("seed", range(10))
def test_a_new_broker_takes_its_share_with_the_fewest_moves(seed: int) -> None:
    current = _current(12, [1, 2, 3], seed)
    planned = plan(current, [1, 2, 3, 4])
    load = Counter(b for r in planned.values() for b in r)
    assert max(load.values()) - min(load.values()) <= 1
    assert load[4] == 9  # 36 replicas over 4 brokers
    assert moves(current, planned) == 9  # exactly what broker 4 must receive
    for tp, replicas in planned.items():
        assert len(set(replicas)) == 3, tp
    leaders = Counter(r[0] for r in planned.values())
    assert max(leaders.values()) - min(leaders.values()) <= 1


def test_a_drained_broker_keeps_nothing() -> None:
    current = _current(12, [1, 2, 3, 4], 3)
    planned = plan(current, [1, 2, 3])
    assert all(4 not in r for r in planned.values())
    assert moves(current, planned) == sum(4 in r for r in current.values())


def test_racks_stay_distinct_where_they_can() -> None:
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    placed = assign_replicas({b: racks[b] for b in (1, 2, 3)}, 9, 3, rng=random.Random(1))
    current = {("t", p): r for p, r in placed.items()}
    planned = plan(current, [1, 2, 3, 4, 5, 6], racks)
    for replicas in planned.values():
        assert len({racks[b] for b in replicas}) == 3
    load = Counter(b for r in planned.values() for b in r)
    assert max(load.values()) - min(load.values()) <= 1


def test_a_balanced_cluster_moves_nothing() -> None:
    current = _current(12, [1, 2, 3, 4], 5)
    assert moves(current, plan(current, [1, 2, 3, 4])) == 0
