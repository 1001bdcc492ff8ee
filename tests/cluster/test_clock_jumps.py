"""A host whose wall clock is stepped (#30): an NTP correction or an operator's
``date -s`` moves CLOCK_REALTIME by hours while CLOCK_MONOTONIC runs on. libfaketime
(Debian's, preloaded into one broker) steps that broker's wall clock alone, as a host's
would be: forward an hour, then back. Nothing that measures how long since something
happened may follow it: the ISR keeps its members, the group keeps its members, a
follower that stops fetching still leaves the ISR in time, and no write is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partita.local.cluster import LocalCluster
from tests.cluster.conftest import until
from tests.cluster.faults import check_no_loss_no_duplicates, paused, producing, read_all

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
TOPIC = "stepped"
PARTITIONS = 6
LAG_MS = 3000  # replica.lag.time.max.ms, short so that a real death shows quickly


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, dict[int, Path]]]:
    assert LIBFAKETIME.exists(), "libfaketime is not installed (scripts/setup.sh installs it)"
    cluster = LocalCluster(
        tmp_path / "cluster",
        3,
        settings={
            "min.insync.replicas": "2",
            "replica.lag.time.max.ms": str(LAG_MS),
            "broker.session.timeout.ms": "10000",
        },
    )
    clocks = {}
    for broker in cluster.brokers:
        clock = tmp_path / f"clock-{broker.node_id}"
        clock.write_text("+0\n")
        clocks[broker.node_id] = clock
        # Only the wall clock is faked: a host's monotonic clock is never stepped.
        broker.launcher = [
            "env",
            f"LD_PRELOAD={LIBFAKETIME}",
            f"FAKETIME_TIMESTAMP_FILE={clock}",
            "FAKETIME_CACHE_DURATION=1",
            "FAKETIME_DONT_FAKE_MONOTONIC=1",
        ]
    try:
        cluster.start()
        yield cluster, clocks
    finally:
        cluster.kill()


def _isrs(admin: AdminClient) -> dict[int, list[int]]:
    """Each partition's ISR; every partition's is empty while no broker answered (one
    may be paused, and librdkafka may ask it first): the caller asks again."""
    try:
        topic = admin.list_topics(TOPIC, timeout=3).topics[TOPIC]
    except KafkaException:
        return {index: [] for index in range(PARTITIONS)}
    return {p.id: sorted(p.isrs) for p in topic.partitions.values()}


def _answered(isrs: dict[int, list[int]]) -> dict[int, list[int]] | None:
    return isrs if all(isrs.values()) else None


def _leaders(admin: AdminClient) -> dict[int, int]:
    topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p.id: p.leader for p in topic.partitions.values()}


def _log_append_times(local: LocalCluster, admin: AdminClient, node: int) -> list[int]:
    """The wall clock of broker ``node`` as it stamps a record (LogAppendTime)."""
    topic = NewTopic(
        "stamps",
        1,
        replica_assignment=[[node]],
        config={"message.timestamp.type": "LogAppendTime"},
    )
    admin.create_topics([topic])["stamps"].result(30)
    producer = Producer({"bootstrap.servers": local.bootstrap, "acks": "1"})
    producer.produce("stamps", b"now")
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": local.bootstrap, "group.id": "stamps"})
    consumer.assign([TopicPartition("stamps", 0, 0)])
    try:
        message = until(lambda: consumer.poll(1), 20, "the stamped record")
        return [message.timestamp()[1]]
    finally:
        consumer.close()


@pytest.mark.timeout(240)
def test_a_broker_whose_wall_clock_is_stepped_keeps_its_isrs_and_groups(
    cluster: tuple[LocalCluster, dict[int, Path]],
) -> None:
    local, clocks = cluster
    admin = AdminClient({"bootstrap.servers": local.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    assignments: list[list[int]] = []
    stop = threading.Event()
    consumer = Consumer(
        {
            "bootstrap.servers": local.bootstrap,
            "group.id": "stepped-readers",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest",
        }
    )

    def consume() -> None:
        consumer.subscribe(
            [TOPIC], on_assign=lambda _c, ps: assignments.append([p.partition for p in ps])
        )
        while not stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    with producing(local.bootstrap, TOPIC, PARTITIONS) as ledger:
        until(lambda: assignments and len(ledger.acked) > 200, 30, "a member and writes")
        group = admin.describe_consumer_groups(["stepped-readers"])["stepped-readers"].result(10)
        stepped = group.coordinator.id  # the group's coordinator, and a leader of 2
        led = [p for p, leader in _leaders(admin).items() if leader == stepped]
        assert led
        until(lambda: all(len(isr) == 3 for isr in _isrs(admin).values()), 30, "full ISRs")

        clocks[stepped].write_text("+3600\n")  # an hour forward
        time.sleep(2 * LAG_MS / 1000 + 2)  # read by the broker within a second
        stamps = _log_append_times(local, admin, stepped)
        isrs = until(lambda: _answered(_isrs(admin)), 20, "an ISR answer")
        assert all(isrs[p] == [1, 2, 3] for p in led), isrs
        assert len(assignments) == 1, f"the group rebalanced: {assignments}"

        clocks[stepped].write_text("+0\n")  # and back: an hour backwards
        time.sleep(2)
        follower = next(b for b in local.brokers if b.node_id != stepped)
        stalled = follower.node_id
        # Asked of the stepped broker only: the paused one answers nothing.
        admin = AdminClient({"bootstrap.servers": local.broker(stepped).bootstrap})
        with paused(follower):
            # It stands still well within its lease (10 s), so only the leader's lag
            # rule can take it out of the ISR: within the lag window, not an hour
            # later; acks=all writes go on with the two left (min.insync.replicas 2).
            until(
                lambda: (
                    _answered(isrs := _isrs(admin)) and all(stalled not in isrs[p] for p in led)
                ),
                LAG_MS / 1000 + 4,
                "the stalled follower out of the stepped leader's ISRs",
            )
            acked = len(ledger.acked)
            until(lambda: len(ledger.acked) > acked + 100, 10, "writes without it")
        until(lambda: all(len(_isrs(admin)[p]) == 3 for p in led), 30, "back in the ISR")
        assert len(assignments) == 1, f"the group rebalanced: {assignments}"
    stop.set()
    reader.join(30)
    assert not ledger.failed, ledger.failed
    check_no_loss_no_duplicates(ledger, read_all(local.bootstrap, TOPIC, PARTITIONS))
    assert local.broker(stepped).alive
    # The stepped broker did live an hour ahead: what it stamped then says so.
    assert stamps and max(stamps) - time.time() * 1000 > 3_000_000, stamps
