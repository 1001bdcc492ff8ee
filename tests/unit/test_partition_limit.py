"""max.broker.partitions counts every replica a broker would hold (server/partition_limit.py)."""

from __future__ import annotations

import uuid

import pytest

from partita.cluster.model import PartitionState, TopicState
from partita.errors import PolicyViolationError
from partita.server.partition_limit import check_placement


def topic(name: str, replicas: list[list[int]]) -> TopicState:
    return TopicState(
        name, uuid.uuid4(), {p: PartitionState(r, r[0], 0, r) for p, r in enumerate(replicas)}
    )


def test_replicas_are_counted_per_broker() -> None:
    existing = [topic("a", [[0, 1], [1, 2], [2, 0]])]  # two replicas on each broker
    check_placement(4, existing, {0: [0, 1], 1: [1, 2]})  # 3 on 0 and 2, 4 on 1
    with pytest.raises(PolicyViolationError, match=r"broker 1 holds 2 .* 3 more"):
        check_placement(4, existing, {0: [1, 0], 1: [1, 2], 2: [1, 0]})


def test_exactly_at_the_limit_is_allowed() -> None:
    check_placement(3, [topic("a", [[0]])], {0: [0], 1: [0]})
    with pytest.raises(PolicyViolationError, match=r"max\.broker\.partitions=3"):
        check_placement(3, [topic("a", [[0]])], {0: [0], 1: [0], 2: [0]})
