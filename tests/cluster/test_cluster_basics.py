"""Three brokers on etcd: placement, metadata, routing to leaders, admin through any
broker, a controller that fails over, and the refusals a cluster member must make."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import NewTopic as KpNewTopic
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from partita.local.cluster import BrokerNode, LocalCluster, free_port
from partita.protocol.records import Record, build_batch
from tests.cluster.conftest import Factory, layout, metadata, request, until

pytestmark = pytest.mark.timeout(180)

NOT_LEADER_OR_FOLLOWER = 6
RACKS = {1: "a", 2: "b", 3: "c"}


def _create(bootstrap: str, topic: str, partitions: int = 6, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(20)


def _produce_raw(broker: BrokerNode, topic: str, partition: int) -> int:
    batch = build_batch([Record(0, int(time.time() * 1000), b"k", b"v")])
    req = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=partition, records=batch
                    )
                ],
            )
        ],
    )
    response = request(broker, req, ProduceResponse)
    return int(response.responses[0].partition_responses[0].error_code)


def test_six_partitions_rf3_over_three_racks(cluster: LocalCluster) -> None:
    _create(cluster.broker(2).bootstrap, "spread")
    parts = layout(cluster.broker(3), "spread")
    leaders = Counter(p.leader_id for p in parts.values())
    replicas = Counter(r for p in parts.values() for r in p.replica_nodes)
    assert leaders == {1: 2, 2: 2, 3: 2}
    assert replicas == {1: 6, 2: 6, 3: 6}
    for p in parts.values():
        assert {RACKS[r] for r in p.replica_nodes} == {"a", "b", "c"}
        assert p.leader_id == p.replica_nodes[0]
        assert sorted(p.isr_nodes) == [1, 2, 3]
    md = metadata(cluster.broker(1))
    assert sorted((b.node_id, b.rack) for b in md.brokers) == sorted(RACKS.items())
    assert md.controller_id in (1, 2, 3)
    # Every broker answers from the same image.
    for node in (1, 2):
        other = layout(cluster.broker(node), "spread")
        assert {i: (p.leader_id, p.leader_epoch) for i, p in other.items()} == {
            i: (p.leader_id, p.leader_epoch) for i, p in parts.items()
        }


def test_rf_above_the_live_brokers_is_refused(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
    with pytest.raises(Exception, match=r"INVALID_REPLICATION_FACTOR|larger than the 3"):
        admin.create_topics([NewTopic("toomany", 3, 4)])["toomany"].result(20)
    # An explicit assignment is honoured as given.
    admin.create_topics([NewTopic("explicit", 2, replica_assignment=[[3, 1], [3, 2]])])[
        "explicit"
    ].result(20)
    parts = layout(cluster.broker(2), "explicit")
    assert [parts[0].replica_nodes, parts[1].replica_nodes] == [[3, 1], [3, 2]]
    assert parts[0].leader_id == 3
    admin.create_partitions([NewPartitions("explicit", 4)])["explicit"].result(20)
    assert len(layout(cluster.broker(1), "explicit")) == 4


def test_a_broker_that_does_not_lead_refuses_and_clients_go_to_the_leader(
    cluster: LocalCluster,
) -> None:
    _create(cluster.broker(1).bootstrap, "routed", 3, 2)
    parts = layout(cluster.broker(1), "routed")
    for index, p in parts.items():
        for node in (1, 2, 3):
            code = _produce_raw(cluster.broker(node), "routed", index)
            assert code == (0 if node == p.leader_id else NOT_LEADER_OR_FOLLOWER), (index, node)


def test_three_client_libraries_bootstrapped_to_one_broker(cluster: LocalCluster) -> None:
    one = cluster.broker(2).bootstrap
    _create(one, "clients")
    # confluent-kafka
    producer = Producer({"bootstrap.servers": one, "partitioner": "murmur2_random"})
    for i in range(300):
        producer.produce("clients", key=f"c{i}".encode(), value=f"c{i}".encode())
    assert producer.flush(30) == 0
    # kafka-python
    kp = KafkaProducer(bootstrap_servers=one)
    for i in range(300):
        kp.send("clients", key=f"k{i}".encode(), value=f"k{i}".encode())
    kp.flush(30)
    kp.close()

    # aiokafka
    async def aio() -> None:
        from aiokafka import AIOKafkaProducer  # noqa: PLC0415

        ap = AIOKafkaProducer(bootstrap_servers=one)
        await ap.start()
        try:
            for i in range(300):
                await ap.send("clients", key=f"a{i}".encode(), value=f"a{i}".encode())
            await ap.flush()
        finally:
            await ap.stop()

    asyncio.run(aio())
    consumer = Consumer({"bootstrap.servers": one, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("clients", p, 0) for p in range(6)])
    seen: set[bytes] = set()
    per_partition: Counter[int] = Counter()
    deadline = time.monotonic() + 60
    while len(seen) < 900 and time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            seen.add(msg.value())
            per_partition[msg.partition()] += 1
    consumer.close()
    assert len(seen) == 900
    assert set(per_partition) == set(range(6))
    kc = KafkaConsumer(bootstrap_servers=one, consumer_timeout_ms=5000)
    kc.assign([KpTopicPartition("clients", p) for p in range(6)])
    kc.seek_to_beginning()
    assert len({m.value for m in kc}) == 900
    kc.close()


def test_admin_through_any_broker(cluster: LocalCluster) -> None:
    for node in (1, 2, 3):
        admin = KafkaAdminClient(bootstrap_servers=cluster.broker(node).bootstrap)
        name = f"admin-{node}"
        admin.create_topics([KpNewTopic(name, 2, 2)])
        until(lambda n=name: n in (t.name for t in metadata(cluster.broker(1)).topics))
        admin.delete_topics([name])
        until(lambda n=name: all(t.name != n for t in metadata(cluster.broker(3)).topics))
        admin.close()


def test_the_controller_fails_over_and_leaders_move(cluster: LocalCluster) -> None:
    _create(cluster.broker(1).bootstrap, "failover", 6, 3)
    controller = metadata(cluster.broker(1)).controller_id
    before = layout(cluster.broker(1), "failover")
    killed_at = time.monotonic()
    cluster.broker(controller).kill()
    survivor = cluster.broker(1 if controller != 1 else 2)

    def new_controller() -> int:
        c = metadata(survivor).controller_id
        return c if c not in (-1, controller) else 0

    until(new_controller, 15, "a new controller")
    elapsed = time.monotonic() - killed_at
    assert elapsed < 10, elapsed

    def moved() -> bool:
        parts = layout(survivor, "failover")
        return all(p.leader_id not in (-1, controller) for p in parts.values())

    until(moved, 15, "new leaders for the dead broker's partitions")
    after = layout(survivor, "failover")
    for index, p in after.items():
        if before[index].leader_id == controller:
            assert p.leader_epoch == before[index].leader_epoch + 1
            assert p.leader_id == next(r for r in before[index].replica_nodes if r != controller)
        assert controller not in p.isr_nodes
        assert controller in p.offline_replicas
    # Admin keeps working, through either survivor.
    _create(survivor.bootstrap, "after-failover", 2, 2)
    producer = Producer({"bootstrap.servers": survivor.bootstrap})
    for p in range(6):
        producer.produce("failover", value=b"x", partition=p)
    assert producer.flush(30) == 0


def test_a_live_node_id_cannot_join_twice(cluster: LocalCluster, tmp_path: Path) -> None:
    twin = BrokerNode(2, tmp_path / "twin", cluster.metadata)
    twin.data_dir.mkdir()
    with pytest.raises(Exception, match="node id 2 is already registered"):
        twin.start(timeout=30)
    assert twin.proc is not None and twin.proc.returncode == 1


def test_unreachable_etcd_is_one_clear_error(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "partita.cli.main", "broker", "--node-id", "1",
         "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
         "--metadata", f"etcd://127.0.0.1:{port}"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(lines) == 1, result.stderr
    assert f"cannot reach the cluster metadata store at etcd://127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_a_data_dir_of_another_cluster_is_refused_before_a_log_is_opened(
    cluster_factory: Factory,
) -> None:
    """Kafka's InconsistentClusterIdException: a broker pointed at another cluster's
    metadata (a wiped or swapped etcd, a wrong --metadata) keeps its logs out of it."""
    first = cluster_factory(1)
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic("kept", 1, 1)])["kept"].result(20)
    producer = Producer({"bootstrap.servers": first.bootstrap})
    producer.produce("kept", b"x")
    assert producer.flush(20) == 0
    old = first.broker(1)
    assert old.stop() == 0
    second = cluster_factory(2)  # its own etcd: another cluster id
    assert second.broker(1).stop() == 0  # node id 1 is free there
    stranger = BrokerNode(1, old.data_dir, second.metadata)
    with pytest.raises(Exception, match="trying to join the wrong cluster"):
        stranger.start(timeout=30)
    assert stranger.proc is not None and stranger.proc.returncode == 1
    assert "Traceback" not in stranger.logs()
    assert (old.data_dir / "kept-0").is_dir()  # nothing of it was touched
    assert (
        "kept"
        not in AdminClient({"bootstrap.servers": second.bootstrap}).list_topics(timeout=10).topics
    )
    old.start()  # its own cluster still takes it back
    assert layout(old, "kept")[0].leader_id == 1


def test_a_paused_leader_stops_acknowledging_once_replaced(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3)
    _create(cluster.broker(1).bootstrap, "zombie", 3, 3)
    parts = layout(cluster.broker(1), "zombie")
    victim = cluster.broker(parts[0].leader_id)
    other = cluster.broker(next(n for n in (1, 2, 3) if n != victim.node_id))
    victim.signal(signal.SIGSTOP)
    try:
        until(
            lambda: layout(other, "zombie")[0].leader_id not in (-1, victim.node_id),
            20,
            "a new leader while the old one is paused",
        )
    finally:
        victim.signal(signal.SIGCONT)
    # Awake, it must not take a write as leader of partition 0, whatever its image says.
    assert _produce_raw(victim, "zombie", 0) == NOT_LEADER_OR_FOLLOWER
    new_leader = cluster.broker(layout(other, "zombie")[0].leader_id)
    assert _produce_raw(new_leader, "zombie", 0) == 0
    # It registers again and serves as a member of the cluster.
    until(lambda: victim.node_id in {b.node_id for b in metadata(other).brokers}, 20)


def test_losing_etcd_stops_leading_and_finding_it_again_resumes(cluster: LocalCluster) -> None:
    _create(cluster.broker(1).bootstrap, "etcdloss", 3, 3)
    parts = layout(cluster.broker(1), "etcdloss")
    leader = cluster.broker(parts[0].leader_id)
    assert _produce_raw(leader, "etcdloss", 0) == 0
    assert cluster.etcd is not None
    cluster.etcd.kill()
    # Past the lease (3 s) no broker can know it still leads: nothing is acknowledged.
    until(lambda: _produce_raw(leader, "etcdloss", 0) == NOT_LEADER_OR_FOLLOWER, 15)
    assert "lease renewal failed" in leader.logs(200)
    cluster.etcd.start()

    def current_leader_takes_writes() -> bool:
        now = layout(cluster.broker(2), "etcdloss")[0].leader_id
        return now >= 0 and _produce_raw(cluster.broker(now), "etcdloss", 0) == 0

    until(current_leader_takes_writes, 30, "writes accepted again once etcd is back")
    assert all(b.alive for b in cluster.brokers)


def test_partitas_own_client_follows_leaders(cluster: LocalCluster) -> None:
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415
    from partita.client.producer import AsyncProducer  # noqa: PLC0415

    one = cluster.broker(3).bootstrap
    _create(one, "own", 6, 3)

    async def run() -> int:
        producer = AsyncProducer(bootstrap_servers=one)
        await producer.start()
        try:
            for i in range(600):
                await producer.send("own", value=f"v{i}".encode(), key=f"k{i}".encode())
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AsyncConsumer(bootstrap_servers=one, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([("own", p) for p in range(6)])
            seen: set[bytes] = set()
            deadline = time.monotonic() + 30
            while len(seen) < 600 and time.monotonic() < deadline:
                for record in await consumer.getmany(timeout_ms=500):
                    seen.add(record.value)
            return len(seen)
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == 600


def test_partitas_end_offsets_wait_out_a_leaders_death(cluster: LocalCluster) -> None:
    """As Kafka's consumer does, end_offsets retries through a failover: the dead
    leader's connection refused, no leader yet, a new leader still catching its high
    watermark up (OFFSET_NOT_AVAILABLE); it answers once the partition is led again."""
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    one = cluster.broker(3).bootstrap
    _create(one, "ends", 1, 3)
    producer = Producer({"bootstrap.servers": one, "acks": "all"})
    for i in range(30):
        producer.produce("ends", b"%d" % i)
    assert producer.flush(20) == 0
    leader = layout(cluster.broker(3), "ends")[0].leader_id
    survivor = next(b for b in cluster.brokers if b.node_id != leader)

    async def run() -> tuple[int, int]:
        consumer = AsyncConsumer(bootstrap_servers=survivor.bootstrap)
        await consumer.start()
        try:
            before = (await consumer.end_offsets([("ends", 0)]))[("ends", 0)]
            cluster.broker(leader).kill()  # its metadata still names the dead leader
            after = (await consumer.end_offsets([("ends", 0)]))[("ends", 0)]
            return before, after
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == (30, 30)
    assert layout(survivor, "ends")[0].leader_id not in (leader, -1)


def test_concurrent_auto_creates_through_different_brokers_all_succeed(
    cluster: LocalCluster,
) -> None:
    """Three producers, each bootstrapped to another broker, make the cluster auto-create
    the same topic at once: the losers of the race must get LEADER_NOT_AVAILABLE (ask
    again) or the topic, never TOPIC_ALREADY_EXISTS (fatal to a client)."""
    from partita.client.producer import AsyncProducer  # noqa: PLC0415

    async def one(topic: str, node: int) -> str:
        producer = AsyncProducer(bootstrap_servers=cluster.broker(node).bootstrap)
        await producer.start()
        try:
            await (await producer.send(topic, b"x"))
            return "ok"
        except Exception as exc:
            return repr(exc)
        finally:
            await producer.stop()

    async def race() -> list[str]:
        outcomes: list[str] = []
        for i in range(5):
            outcomes += await asyncio.gather(*(one(f"auto{i}", n) for n in (1, 2, 3)))
        return outcomes

    outcomes = asyncio.run(race())
    assert outcomes == ["ok"] * 15, [o for o in outcomes if o != "ok"][:3]
