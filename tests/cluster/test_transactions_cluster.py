"""Transactions on a 3-broker cluster under kill -9 (#29): the transaction coordinator
dies between a transaction's writes and its commit, in a run of transactions. A new
coordinator (the new leader of the id's ``__transaction_state`` partition) takes over
from the replicated state; every transaction ends committed everywhere or aborted
everywhere, and a read_committed reader sees each committed record exactly once and no
record of an aborted transaction."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partita.client.admin import AsyncAdmin
from partita.coordinator.transaction_records import TRANSACTION_TOPIC, transaction_partition
from partita.local.cluster import LocalCluster

TOPIC = "transfers"
PARTITIONS = 3
TID = "transfers-writer"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    settings = {"group.initial.rebalance.delay.ms": "0"}
    local = LocalCluster(tmp_path / "cluster", 3, settings=settings)
    try:
        local.start()
        yield local
    finally:
        local.kill()


def read_committed(cluster: LocalCluster, topic: str, expect: int) -> list[str]:
    """Every value a read_committed consumer reads from the start of ``topic``, until
    ``expect`` came (or 60 s), then two seconds more: a value too many must show."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"auditor-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while len(seen) < expect and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value().decode())
    for _ in range(4):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value().decode())
    consumer.close()
    return seen


def _leaders(cluster: LocalCluster, topic: str) -> dict[int, int]:
    """partition -> its leader, as the cluster describes ``topic``."""

    async def ask() -> dict[int, int]:
        async with AsyncAdmin(cluster.bootstrap) as admin:
            (found,) = await admin.describe_topics([topic])
            return {p.partition: p.leader for p in found.partitions}

    return asyncio.run(ask())


def _coordinator(cluster: LocalCluster) -> int:
    leaders = _leaders(cluster, TRANSACTION_TOPIC)
    return leaders[transaction_partition(TID, len(leaders))]


@pytest.mark.timeout(300)
def test_the_coordinators_death_before_a_commit_loses_and_doubles_nothing(
    cluster: LocalCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": TID, "linger.ms": 2}
    )
    producer.init_transactions(60)
    victim = _coordinator(cluster)

    committed: list[str] = []
    aborted: list[str] = []
    killed_at = 8
    for number in range(20):
        values = [f"t{number}-r{i}" for i in range(15)]
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
        if number == killed_at:
            producer.flush(30)
            cluster.broker(victim).kill()  # kill -9 the coordinator between writes and commit
        try:
            producer.commit_transaction(60)
            committed += values
        except KafkaException as exc:
            error = exc.args[0]
            assert error.txn_requires_abort() or error.retriable(), error
            producer.abort_transaction(60)
            aborted += values
    assert len(committed) >= 15 * 18, f"{len(aborted)} records aborted"
    assert _coordinator(cluster) != victim

    # The dead broker comes back; every replica converges on the same outcome.
    cluster.broker(victim).start()
    seen = read_committed(cluster, TOPIC, len(committed))
    assert sorted(seen) == sorted(committed)
    assert not set(seen) & set(aborted)


@pytest.mark.timeout(420)
def test_consume_transform_produce_across_a_leader_and_the_producer_killed(
    cluster: LocalCluster,
) -> None:
    """A librdkafka worker reads 'ctp-in' and writes 'ctp-out' with its input offsets in
    the same transaction. kill -9 of the leader of an output partition while it works,
    then kill -9 of the worker itself (wherever it is: mid-batch or mid-commit); a new
    worker with the same transactional id fences what the old one left open and goes on
    from the group's committed offsets. The output holds each input exactly once."""
    source, sink, total = "ctp-in", "ctp-out", 3000
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name in (source, sink):
        admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(30)
    feeder = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    for i in range(total):
        feeder.produce(source, value=f"in-{i}".encode(), partition=i % PARTITIONS)
    assert feeder.flush(30) == 0
    worker = [
        sys.executable, str(Path(__file__).with_name("ctp_worker.py")),
        cluster.bootstrap, source, sink, "ctp", "ctp-worker", "20", "0.05",
    ]  # fmt: skip

    def wait_for_commits(at_least: int, process: subprocess.Popen[bytes]) -> None:
        """Until the worker says it committed ``at_least`` records (it prints a line per
        commit), failing if it ends first."""
        assert process.stdout is not None
        while True:
            line = process.stdout.readline()
            assert line, "the worker ended early"
            if int(line.split()[1]) >= at_least:
                return

    first = subprocess.Popen(worker, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_commits(300, first)
        victim = _leaders(cluster, sink)[0]
        cluster.broker(victim).kill()
        wait_for_commits(1200, first)  # it went on past the failover
        first.kill()  # SIGKILL, wherever it is
        first.wait(10)
        second = subprocess.Popen(worker, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _out, err = second.communicate(timeout=300)
        assert second.returncode == 0, err.decode()[-4000:]
    finally:
        if first.poll() is None:
            first.kill()
    cluster.broker(victim).start()

    seen = read_committed(cluster, sink, total)
    duplicates = [v for v, n in Counter(seen).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} outputs twice, e.g. {duplicates[:3]}"
    assert sorted(seen) == sorted(f"out-in-{i}" for i in range(total))
