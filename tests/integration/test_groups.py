"""Consumer groups with real clients: assignment, failover, offsets across restarts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

from tests.integration.clients import create_topic, produce, subscribe_tracking_assignment
from tests.integration.conftest import BrokerProcess

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0"}
MEMBER = Path(__file__).with_name("group_member.py")


@pytest.fixture
def fast_broker(broker_factory: Any) -> BrokerProcess:
    process: BrokerProcess = broker_factory(settings=FAST_GROUPS)
    process.start()
    return process


def fill(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    create_topic(bootstrap, topic, partitions=partitions)
    produce(
        bootstrap, topic, [{"value": b"%d" % i, "partition": i % partitions} for i in range(count)]
    )


def confluent_member(bootstrap: str, group: str, strategy: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": strategy,
            "fetch.queue.backoff.ms": 1,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_confluent_group_shares_partitions(fast_broker: BrokerProcess, strategy: str) -> None:
    fill(fast_broker.bootstrap, "shared", 4, 400)
    members = [confluent_member(fast_broker.bootstrap, "g", strategy) for _ in range(2)]
    for m in members:
        m.subscribe(["shared"])
    seen: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + 40
    while len(seen) < 400 and time.monotonic() < deadline:
        for i, m in enumerate(members):
            msg = m.poll(0.1)
            if msg is not None and not msg.error():
                seen[(msg.partition(), msg.offset())] = i
    assignments = [sorted(p.partition for p in m.assignment()) for m in members]
    for m in members:
        m.commit(asynchronous=False) if m.assignment() else None
        m.close()
    assert len(seen) == 400
    assert sorted(assignments[0] + assignments[1]) == [0, 1, 2, 3]
    assert all(len(a) == 2 for a in assignments)
    owners: dict[int, set[int]] = defaultdict(set)
    for (partition, _offset), member in seen.items():
        owners[partition].add(member)
    assert all(len(o) == 1 for o in owners.values())  # one owner per partition here


def test_committed_offsets_survive_restart_and_kill(fast_broker: BrokerProcess) -> None:
    fill(fast_broker.bootstrap, "resume", 2, 100)
    consumer = confluent_member(fast_broker.bootstrap, "resumers", "range")
    consumer.subscribe(["resume"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    committed = {
        tp.partition: tp.offset
        for tp in consumer.committed(
            [TopicPartition("resume", 0), TopicPartition("resume", 1)], timeout=10
        )
    }
    consumer.close()
    assert sum(committed.values()) == got
    fast_broker.restart()
    check = Consumer({"bootstrap.servers": fast_broker.bootstrap, "group.id": "resumers"})
    after = {
        tp.partition: tp.offset
        for tp in check.committed(
            [TopicPartition("resume", 0), TopicPartition("resume", 1)], timeout=10
        )
    }
    check.close()
    assert after == committed
    fast_broker.kill()
    fast_broker.start()
    check = Consumer({"bootstrap.servers": fast_broker.bootstrap, "group.id": "resumers"})
    after_kill = {
        tp.partition: tp.offset
        for tp in check.committed(
            [TopicPartition("resume", 0), TopicPartition("resume", 1)], timeout=10
        )
    }
    check.close()
    assert after_kill == committed


def test_kafka_python_group_strategies(fast_broker: BrokerProcess) -> None:
    fill(fast_broker.bootstrap, "kpg", 3, 90)
    for name, assignor in (
        ("range", RangePartitionAssignor),
        ("roundrobin", RoundRobinPartitionAssignor),
        ("sticky", StickyPartitionAssignor),
    ):
        consumer = KafkaConsumer(
            "kpg",
            bootstrap_servers=fast_broker.bootstrap,
            group_id=f"kp-{name}",
            auto_offset_reset="earliest",
            partition_assignment_strategy=[assignor],
            consumer_timeout_ms=8000,
        )
        values = sorted(int(m.value) for m in consumer)
        consumer.commit()
        consumer.close()
        assert values == list(range(90)), name


def test_aiokafka_group(fast_broker: BrokerProcess) -> None:
    fill(fast_broker.bootstrap, "aiog", 2, 50)

    async def run() -> int:
        consumer = AIOKafkaConsumer(
            "aiog",
            bootstrap_servers=fast_broker.bootstrap,
            group_id="aio",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        n = 0
        try:
            deadline = time.monotonic() + 30
            while n < 50 and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                n += sum(len(v) for v in batch.values())
            await consumer.commit()
        finally:
            await consumer.stop()
        return n

    assert asyncio.run(run()) == 50


def test_mixed_group_confluent_and_kafka_python(fast_broker: BrokerProcess) -> None:
    create_topic(fast_broker.bootstrap, "mixed", partitions=4)
    confluent = confluent_member(fast_broker.bootstrap, "mixed-g", "range")
    theirs = subscribe_tracking_assignment(confluent, ["mixed"])
    from_confluent: list[int] = []
    stop = threading.Event()

    def poll_confluent() -> None:
        while not stop.is_set():
            msg = confluent.poll(0.1)
            if msg is not None and not msg.error():
                from_confluent.append(int(msg.value()))

    thread = threading.Thread(target=poll_confluent)
    thread.start()
    kp = KafkaConsumer(
        "mixed",
        bootstrap_servers=fast_broker.bootstrap,
        group_id="mixed-g",
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    from_kp: list[int] = []
    try:
        # Both members join first; records are produced once the group has settled.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (len(kp.assignment()) == 2 and len(theirs) == 2):
            from_kp += [int(m.value) for m in kp.poll(timeout_ms=200).get("x", [])]
        kp_assignment = {tp.partition for tp in kp.assignment()}
        confluent_assignment = set(theirs)
        produce(
            fast_broker.bootstrap,
            "mixed",
            [{"value": b"%d" % i, "partition": i % 4} for i in range(200)],
        )
        deadline = time.monotonic() + 30
        while len(from_kp) + len(from_confluent) < 200 and time.monotonic() < deadline:
            for records in kp.poll(timeout_ms=200).values():
                from_kp += [int(m.value) for m in records]
    finally:
        stop.set()
        thread.join()
        kp.close()
        confluent.close()
    assert kp_assignment | confluent_assignment == {0, 1, 2, 3}
    assert not kp_assignment & confluent_assignment
    assert from_kp and from_confluent
    assert sorted(from_kp + from_confluent) == list(range(200))


def start_member(broker: BrokerProcess, group: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(MEMBER),
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            "failover",
            "--group",
            group,
            "--seconds",
            "60",
            *extra,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )


def read_events(proc: subprocess.Popen[str], events: list[dict[str, Any]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        events.append(json.loads(line))


def latest_assignment(events: list[dict[str, Any]]) -> list[int] | None:
    assigned = [e["assigned"] for e in events if "assigned" in e]
    return assigned[-1] if assigned else None


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_idle_member_takes_over_when_a_member_is_killed(fast_broker: BrokerProcess) -> None:
    fill(fast_broker.bootstrap, "failover", 2, 10)
    procs = [start_member(fast_broker, "fo") for _ in range(3)]
    events: list[list[dict[str, Any]]] = [[] for _ in procs]
    threads = [
        threading.Thread(target=read_events, args=(p, e), daemon=True)
        for p, e in zip(procs, events, strict=True)
    ]
    for t in threads:
        t.start()
    try:
        # Wait until the group has settled: one idle member and no new rebalance for 3 s.
        def settled() -> bool:
            if sorted(len(latest_assignment(e) or []) for e in events) != [0, 1, 1]:
                return False
            count = sum(len([x for x in e if "assigned" in x]) for e in events)
            time.sleep(3)
            return count == sum(len([x for x in e if "assigned" in x]) for e in events)

        assert wait_for(settled, 45), events
        idle = next(i for i, e in enumerate(events) if not latest_assignment(e))
        victim = next(i for i, e in enumerate(events) if latest_assignment(e))
        lost = latest_assignment(events[victim])
        os.kill(procs[victim].pid, signal.SIGKILL)
        # The session timeout (6 s) expires and the group rebalances: the idle member now
        # owns a partition, and the two survivors cover both (range may reshuffle which).
        survivors = [i for i in range(3) if i != victim]

        def taken_over() -> bool:
            owned = [set(latest_assignment(events[i]) or []) for i in survivors]
            return (
                len(latest_assignment(events[idle]) or []) == 1
                and (owned[0] | owned[1] == {0, 1})
                and not owned[0] & owned[1]
            )

        assert lost, events
        assert wait_for(taken_over, 30), events
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_static_member_restart_keeps_its_partitions(fast_broker: BrokerProcess) -> None:
    fill(fast_broker.bootstrap, "failover", 2, 10)
    first = start_member(fast_broker, "static", "--instance-id", "a")
    other = start_member(fast_broker, "static", "--instance-id", "b")
    events: list[dict[str, Any]] = []
    other_events: list[dict[str, Any]] = []
    for proc, sink in ((first, events), (other, other_events)):
        threading.Thread(target=read_events, args=(proc, sink), daemon=True).start()
    try:
        assert wait_for(
            lambda: latest_assignment(events) and latest_assignment(other_events), 30
        ), (events, other_events)
        mine = latest_assignment(events)
        rebalances_seen_by_other = len([e for e in other_events if "assigned" in e])
        os.kill(first.pid, signal.SIGKILL)
        restarted = start_member(fast_broker, "static", "--instance-id", "a")
        again: list[dict[str, Any]] = []
        threading.Thread(target=read_events, args=(restarted, again), daemon=True).start()
        assert wait_for(lambda: latest_assignment(again) == mine, 20), again
        time.sleep(1)
        # No rebalance: the other member was never told to revoke or reassign.
        assert len([e for e in other_events if "assigned" in e]) == rebalances_seen_by_other
        restarted.kill()
        restarted.wait()
    finally:
        for p in (first, other):
            p.kill()
            p.wait()
