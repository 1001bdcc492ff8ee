"""Which changes end which waits: a follower's fetch waits for a new log end, a
consumer's fetch and an acks=all produce for a new high watermark; leadership changes end
both. A wait that nothing ends runs to its timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from partita.cluster.model import PartitionState
from partita.server.partition import Partition, wait_for_any
from partita.storage.log_manager import LogManager
from tests.conftest import make_batch

OpenManager = Callable[..., LogManager]
LEADER, FOLLOWER = 1, 2


def leading(open_manager: OpenManager) -> Partition:
    partition = Partition("t", 0, open_manager().get_or_create("t", 0), LEADER)
    partition.become(
        PartitionState(
            replicas=[LEADER, FOLLOWER], leader=LEADER, leader_epoch=1, isr=[LEADER, FOLLOWER]
        )
    )
    return partition


async def ended(partition: Partition, change: Callable[[], object], *, log_end: bool) -> bool:
    """Whether ``change`` ends a wait of the given kind well before its 0.6 s timeout."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    waiting = asyncio.create_task(wait_for_any([partition], 0.6, log_end=log_end))
    await asyncio.sleep(0)  # parked
    change()
    await waiting
    return loop.time() - started < 0.3


def test_an_append_ends_a_followers_wait_but_not_a_consumers(open_manager: OpenManager) -> None:
    partition = leading(open_manager)

    async def scenario() -> tuple[bool, bool]:
        follower = await ended(partition, lambda: partition.append(make_batch(2)), log_end=True)
        consumer = await ended(partition, lambda: partition.append(make_batch(2)), log_end=False)
        return follower, consumer

    assert asyncio.run(scenario()) == (True, False)
    assert partition.log.high_watermark == 0  # the follower has not fetched anything yet


def test_a_new_high_watermark_ends_a_consumers_wait_but_not_a_followers(
    open_manager: OpenManager,
) -> None:
    partition = leading(open_manager)
    partition.append(make_batch(2))
    partition.append(make_batch(2))

    async def scenario() -> tuple[bool, bool]:
        consumer = await ended(
            partition, lambda: partition.record_follower_fetch(FOLLOWER, 2), log_end=False
        )
        follower = await ended(
            partition, lambda: partition.record_follower_fetch(FOLLOWER, 4), log_end=True
        )
        return consumer, follower

    assert asyncio.run(scenario()) == (True, False)
    assert partition.log.high_watermark == 4


def test_a_leadership_change_ends_every_wait(open_manager: OpenManager) -> None:
    partition = leading(open_manager)
    moved = PartitionState(
        replicas=[LEADER, FOLLOWER], leader=FOLLOWER, leader_epoch=2, isr=[LEADER, FOLLOWER]
    )

    async def scenario() -> tuple[bool, bool]:
        follower = await ended(partition, lambda: partition.become(moved), log_end=True)
        back = PartitionState(
            replicas=[LEADER, FOLLOWER], leader=LEADER, leader_epoch=3, isr=[LEADER, FOLLOWER]
        )
        consumer = await ended(partition, lambda: partition.become(back), log_end=False)
        return follower, consumer

    assert asyncio.run(scenario()) == (True, True)
