"""partita consumers in groups: alone, together, and mixed with confluent-kafka."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer

from partita.client.consumer import AsyncConsumer
from tests.integration.clients import create_topic, produce, subscribe_tracking_assignment
from tests.integration.conftest import BrokerProcess


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, list[tuple[str, int]]]] = []

    def on_partitions_revoked(self, revoked: list[tuple[str, int]]) -> None:
        self.events.append(("revoked", sorted(revoked)))

    def on_partitions_assigned(self, assigned: list[tuple[str, int]]) -> None:
        self.events.append(("assigned", sorted(assigned)))

    def on_partitions_lost(self, lost: list[tuple[str, int]]) -> None:
        self.events.append(("lost", sorted(lost)))


@pytest.fixture
def fast_broker(broker_factory: Any) -> BrokerProcess:
    process: BrokerProcess = broker_factory(settings={"group.initial.rebalance.delay.ms": "0"})
    process.start()
    return process


async def member(
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str,
    seen: dict[tuple[int, int], int],
    ident: int,
    stop: asyncio.Event,
    listener: Listener,
) -> list[tuple[str, int]]:
    consumer = AsyncConsumer(
        bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[strategy],
        heartbeat_interval_ms=300,
        session_timeout_ms=6000,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=listener)
    try:
        while not stop.is_set():
            for record in await consumer.getmany(200):
                seen[(record.partition, record.offset)] = ident
        return sorted(consumer.assignment())
    finally:
        await consumer.stop()


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
def test_partita_members_share_a_topic(fast_broker: BrokerProcess, strategy: str) -> None:
    create_topic(fast_broker.bootstrap, "pg", partitions=4)
    produce(
        fast_broker.bootstrap, "pg", [{"value": b"%d" % i, "partition": i % 4} for i in range(400)]
    )

    async def run() -> tuple[dict[tuple[int, int], int], list[Any], list[Listener]]:
        seen: dict[tuple[int, int], int] = {}
        stop = asyncio.Event()
        listeners = [Listener(), Listener()]
        tasks = [
            asyncio.create_task(
                member(fast_broker.bootstrap, "pg-g", "pg", strategy, seen, i, stop, listeners[i])
            )
            for i in range(2)
        ]
        deadline = time.monotonic() + 30
        while len(seen) < 400 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        stop.set()
        return seen, await asyncio.gather(*tasks), listeners

    seen, assignments, listeners = asyncio.run(run())
    assert len(seen) == 400
    assert sorted(assignments[0] + assignments[1]) == [("pg", p) for p in range(4)]
    assert all(len(a) == 2 for a in assignments)
    for listener in listeners:
        assert listener.events and listener.events[-1][0] == "assigned"

    async def committed() -> dict[tuple[str, int], int]:
        consumer = AsyncConsumer(fast_broker.bootstrap, group_id="pg-g")
        await consumer.start()
        try:
            return await consumer.committed([("pg", p) for p in range(4)])
        finally:
            await consumer.stop()

    assert asyncio.run(committed()) == {("pg", p): 100 for p in range(4)}


def test_mixed_group_partita_and_confluent(fast_broker: BrokerProcess) -> None:
    create_topic(fast_broker.bootstrap, "mix", partitions=4)
    confluent = Consumer(
        {
            "bootstrap.servers": fast_broker.bootstrap,
            "group.id": "mix-g",
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "fetch.queue.backoff.ms": 1,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
        }
    )
    theirs = subscribe_tracking_assignment(confluent, ["mix"])
    from_confluent: set[int] = set()
    stop_thread = threading.Event()

    def poll() -> None:
        while not stop_thread.is_set():
            msg = confluent.poll(0.1)
            if msg is not None and not msg.error():
                from_confluent.add(int(msg.value()))

    thread = threading.Thread(target=poll)
    thread.start()

    theirs_then: set[int] = set()

    async def run() -> tuple[set[int], set[int]]:
        consumer = AsyncConsumer(
            fast_broker.bootstrap,
            group_id="mix-g",
            auto_offset_reset="earliest",
            partition_assignment_strategy=["range"],
            heartbeat_interval_ms=300,
            session_timeout_ms=6000,
        )
        await consumer.start()
        consumer.subscribe(["mix"])
        seen: set[int] = set()
        try:
            # Join first; produce once both members own partitions.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                len(consumer.assignment()) == 2 and len(theirs) == 2
            ):
                seen |= {int(r.value or b"0") for r in await consumer.getmany(100)}
            mine = {p for _t, p in consumer.assignment()}
            theirs_then.update(theirs)
            produce(
                fast_broker.bootstrap,
                "mix",
                [{"value": b"%d" % i, "partition": i % 4} for i in range(200)],
            )
            while len(seen) + len(from_confluent) < 200 and time.monotonic() < deadline + 30:
                seen |= {int(r.value or b"0") for r in await consumer.getmany(200)}
            return seen, mine
        finally:
            await consumer.stop()

    try:
        seen, mine = asyncio.run(run())
    finally:
        stop_thread.set()
        thread.join()
        confluent.close()
    assert len(mine) == 2 and len(theirs_then) == 2 and not mine & theirs_then
    assert seen and from_confluent
    assert seen | from_confluent == set(range(200))
    assert all(v % 4 in mine for v in seen)
