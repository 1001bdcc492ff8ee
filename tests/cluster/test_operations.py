"""Operating a cluster: preferred leaders back after a restart (on request and by
itself), reassignment under load and its cancellation, draining a broker, and consumers
reading from the replica in their rack. Real etcd, real brokers, real clients and CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition

from partita.local.cluster import LocalCluster
from tests.cluster.conftest import Factory, layout, until
from tests.cluster.faults import check_no_loss_no_duplicates, producing, read_all

pytestmark = pytest.mark.timeout(300)


def _create(cluster: LocalCluster, topic: str, partitions: int, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)


def _leaders(cluster: LocalCluster, topic: str) -> Counter[int]:
    asker = next(b for b in cluster.brokers if b.alive)
    return Counter(p.leader_id for p in layout(asker, topic).values())


def _partita(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.cli.main", "-b", cluster.bootstrap, *args],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip


def test_preferred_leaders_come_back_on_request(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, auto_leader_rebalance_enable="false")
    _create(cluster, "pref", 6)
    assert _leaders(cluster, "pref") == {1: 2, 2: 2, 3: 2}
    cluster.broker(1).kill()
    until(lambda: 1 not in _leaders(cluster, "pref"), 20, "leaders move off broker 1")
    cluster.broker(1).start()
    until(
        lambda: all(1 in p.isr_nodes for p in layout(cluster.broker(2), "pref").values()),
        30,
        "broker 1 back in every ISR",
    )
    assert _leaders(cluster, "pref")[1] == 0  # nothing moves back by itself when disabled
    # kafka-python's elect_leaders (ElectLeaders, preferred) for one partition, sent to
    # the controller; then partita's CLI for the rest.
    first_of_1 = next(i for i, p in layout(cluster.broker(2), "pref").items()
                      if p.replica_nodes[0] == 1)  # fmt: skip
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.elect_leaders(0, {"pref": [first_of_1]})
    admin.close()
    until(lambda: layout(cluster.broker(3), "pref")[first_of_1].leader_id == 1, 20)
    result = _partita(cluster, "leaders", "elect", "pref")
    assert result.returncode == 0, result.stderr
    until(lambda: _leaders(cluster, "pref") == {1: 2, 2: 2, 3: 2}, 20, "balanced leaders")
    again = _partita(cluster, "leaders", "elect", "pref")
    assert again.returncode == 0 and "already led by its preferred leader" in again.stdout


def test_confluent_elect_leaders_reports_kafkas_errors(cluster: LocalCluster) -> None:
    from confluent_kafka import ElectionType  # noqa: PLC0415

    _create(cluster, "celect", 3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("celect", 0)])
    outcome = future.result(30)
    error = outcome[TopicPartition("celect", 0)]
    assert error is not None and error.name() == "ELECTION_NOT_NEEDED"


def test_preferred_leaders_come_back_by_themselves(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, leader_imbalance_check_interval_seconds="2")
    _create(cluster, "auto", 6)
    cluster.broker(2).kill()
    until(lambda: 2 not in _leaders(cluster, "auto"), 20)
    cluster.broker(2).start()
    until(lambda: _leaders(cluster, "auto") == {1: 2, 2: 2, 3: 2}, 40, "automatic rebalance")
    assert "preferred leaders restored" in "".join(b.logs(400) for b in cluster.brokers)


def test_a_reassignment_under_load_moves_every_record(cluster_factory: Factory) -> None:
    cluster = cluster_factory(4, min_insync_replicas="2")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("moving", 1, replica_assignment=[[1, 2, 3]])])["moving"].result(
        30
    )
    with producing(cluster.bootstrap, "moving", 1, rate=300) as ledger:
        until(lambda: len(ledger.acked) > 500, 30)
        kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        kp.alter_partition_reassignments({KpTopicPartition("moving", 0): [4, 2, 3]})
        until(lambda: layout(cluster.broker(2), "moving")[0].replica_nodes == [4, 2, 3], 60,
              "the move completes")  # fmt: skip
        assert (
            kp.list_partition_reassignments() in ({}, None) or not kp.list_partition_reassignments()
        )
        kp.close()
        count = len(ledger.acked)
        until(lambda: len(ledger.acked) > count + 200, 30, "writes go on after the move")
    assert not ledger.failed
    until(lambda: not (cluster.broker(1).data_dir / "moving-0").exists(), 20, "files deleted")
    check_no_loss_no_duplicates(ledger, read_all(cluster.bootstrap, "moving", 1))
    # Broker 4 alone holds every record: stop 2 and 3 and read everything from it.
    until(lambda: sorted(layout(cluster.broker(4), "moving")[0].isr_nodes) == [2, 3, 4], 30)
    cluster.broker(2).kill()
    cluster.broker(3).kill()
    until(lambda: layout(cluster.broker(4), "moving")[0].leader_id == 4, 20)
    check_no_loss_no_duplicates(ledger, read_all(cluster.broker(4).bootstrap, "moving", 1))


@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_cancelled_reassignment_returns_to_the_original_replicas(
    cluster_factory: Factory, side: str
) -> None:
    # Throttled on one side only: a move that cannot finish before it is cancelled is
    # the proof that each side's throttle holds.
    cluster = cluster_factory(4, **{f"{side}_replication_throttled_rate": "20000"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("undo", 1, replica_assignment=[[1, 2, 3]])])["undo"].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _ in range(200):
        producer.produce("undo", b"x" * 5000)
    assert producer.flush(30) == 0
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    kp.alter_partition_reassignments(
        {KpTopicPartition("undo", 0): [4, 2, 3]}
    )  # throttled: 1 MB at 20 kB/s
    until(lambda: bool(kp.list_partition_reassignments()), 10, "the move is in progress")
    time.sleep(2)  # unthrottled, 1 MB moves in well under a second here
    assert kp.list_partition_reassignments(), "the throttle did not hold the move back"
    kp.alter_partition_reassignments({KpTopicPartition("undo", 0): None})
    until(lambda: sorted(layout(cluster.broker(1), "undo")[0].replica_nodes) == [1, 2, 3], 30)
    assert not kp.list_partition_reassignments()
    kp.close()
    until(lambda: not (cluster.broker(4).data_dir / "undo-0").exists(), 20, "4's copy goes")


def test_drain_and_plan_through_the_cli(cluster_factory: Factory, tmp_path: Path) -> None:
    cluster = cluster_factory(4)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("spread", 8, 3)])["spread"].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(400):
        producer.produce("spread", b"%d" % i, partition=i % 8)
    assert producer.flush(30) == 0
    drained = _partita(cluster, "cluster", "drain", "--broker", "4")
    assert drained.returncode == 0, drained.stderr + drained.stdout
    parts = layout(cluster.broker(1), "spread")
    assert all(4 not in p.replica_nodes for p in parts.values())
    assert Counter(r for p in parts.values() for r in p.replica_nodes) == {1: 8, 2: 8, 3: 8}
    # And back: a plan over 4 brokers moves exactly broker 4's share.
    planned = _partita(cluster, "reassign", "plan", "--topics", "spread", "--brokers", "1,2,3,4")
    assert planned.returncode == 0, planned.stderr
    assert "replicas move" in planned.stderr
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout)
    moves = sum(4 in e["replicas"] for e in json.loads(planned.stdout)["partitions"])
    assert moves == 6  # 24 replicas over 4 brokers
    executed = _partita(cluster, "reassign", "execute", str(plan_file))
    assert executed.returncode == 0, executed.stderr
    verified = _partita(cluster, "reassign", "verify", str(plan_file))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    load = Counter(r for p in layout(cluster.broker(1), "spread").values() for r in p.replica_nodes)
    assert max(load.values()) - min(load.values()) <= 1
    assert len(read_all(cluster.bootstrap, "spread", 8)) == 8
    # A plan naming a topic that does not exist, or not JSON at all, starts nothing.
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"version": 1, "partitions": [
            {"topic": "spread", "partition": 0, "replicas": [4, 1, 2]},
            {"topic": "nosuch", "partition": 0, "replicas": [1, 2, 3]},
        ]})
    )  # fmt: skip
    before = layout(cluster.broker(1), "spread")[0].replica_nodes
    refused = _partita(cluster, "reassign", "execute", str(bad))
    assert refused.returncode == 1
    assert "nosuch-0" in refused.stderr and "Traceback" not in refused.stderr
    assert layout(cluster.broker(1), "spread")[0].replica_nodes == before
    bad.write_text("{not json")
    garbled = _partita(cluster, "reassign", "execute", str(bad))
    assert garbled.returncode == 1 and "is not a reassignment plan" in garbled.stderr


def test_a_consumer_reads_from_the_replica_in_its_rack(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, ["a", "b", "c"], replica_selector_class="rack-aware")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("near", 1, replica_assignment=[[1, 2, 3]])])["near"].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("near", b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "near",
            "client.rack": "b",  # broker 2's rack; broker 1 leads
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.assign([TopicPartition("near", 0, 0)])
    got = 0
    deadline = time.monotonic() + 30
    while got < 100 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    consumer.close()
    assert got == 100
    assert "serving a consumer from a follower replica" in cluster.broker(2).logs(300)
    assert "serving a consumer from a follower replica" not in cluster.broker(3).logs(300)

    # partita's own consumer, in rack c: broker 3's follower serves it.
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    async def own() -> int:
        consumer = AsyncConsumer(
            bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", client_rack="c"
        )
        await consumer.start()
        try:
            consumer.assign([("near", 0)])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 100 and time.monotonic() < deadline:
                seen += len(await consumer.getmany(timeout_ms=500))
            return seen
        finally:
            await consumer.stop()

    assert asyncio.run(own()) == 100
    assert "serving a consumer from a follower replica" in cluster.broker(3).logs(300)
