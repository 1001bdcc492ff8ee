"""Replication under faults, with real brokers, real etcd and real clients: no
acknowledged record lost or duplicated, replicas identical on disk, Kafka's min ISR
rules, divergent logs truncated, consumer groups surviving their coordinator's death."""

from __future__ import annotations

import asyncio
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

from partita.client.consumer import AsyncConsumer
from partita.local.cluster import BrokerNode, LocalCluster
from tests.cluster.conftest import Factory, layout, request, until
from tests.cluster.faults import (
    check_no_loss_no_duplicates,
    leader_of,
    paused,
    producing,
    read_all,
    segment_digests,
    watermarks,
)

pytestmark = pytest.mark.timeout(240)

OFFSET_NOT_AVAILABLE = 78

PARTITIONS = 3


def _topic(cluster: LocalCluster, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(20)


def _isr(cluster: LocalCluster, topic: str, partition: int) -> list[int]:
    asker = next(b for b in cluster.brokers if b.alive)
    return sorted(layout(asker, topic)[partition].isr_nodes)


def _settle(cluster: LocalCluster, topic: str, partitions: int = PARTITIONS) -> None:
    """Every broker alive and back in every ISR, so the replicas can be compared."""
    for p in range(partitions):
        until(lambda p=p: _isr(cluster, topic, p) == [1, 2, 3], 30, f"{topic}-{p} fully in sync")


def _replicas_identical(cluster: LocalCluster, topic: str, partitions: int = PARTITIONS) -> None:
    def same() -> bool:
        return all(
            len(set(segment_digests(cluster, topic, p).values())) == 1 for p in range(partitions)
        )

    until(same, 20, "replicas byte-identical on disk")


@pytest.fixture
def rf3(cluster_factory: Factory) -> LocalCluster:
    return cluster_factory(3, None, min_insync_replicas="2")


@pytest.mark.parametrize("fault", ["kill", "pause", "term", "kill-follower"])
def test_a_leader_fails_under_an_idempotent_acks_all_producer(
    rf3: LocalCluster, fault: str
) -> None:
    _topic(rf3, "chaos")
    victim = leader_of(rf3, "chaos", 0)
    if fault == "kill-follower":
        # A follower dies mid-append (copying under load) and must recover to a prefix
        # of its leader's log.
        follower = layout(rf3.broker(1), "chaos")[0].replica_nodes
        victim = rf3.broker(next(r for r in follower if r != victim.node_id))
    with producing(rf3.bootstrap, "chaos", PARTITIONS) as ledger:
        until(lambda: len(ledger.acked) > 300, 30, "a steady stream of acks")
        if fault in ("kill", "kill-follower"):
            victim.kill()
        elif fault == "pause":
            with paused(victim):
                # Past its 3 s lease: the others elect a new leader while it sleeps. Ask
                # a broker that is awake (the paused one answers nothing).
                awake = next(b for b in rf3.brokers if b is not victim)
                until(lambda: layout(awake, "chaos")[0].leader_id not in (-1, victim.node_id), 20)
                acked_before = len(ledger.acked)
                until(
                    lambda: len(ledger.acked) > acked_before + 200, 30, "acks from the new leader"
                )
            # Awake, the zombie must acknowledge nothing as leader of partition 0.
        else:
            stopped = time.monotonic()
            victim.signal(signal.SIGTERM)
            assert victim.proc is not None
            victim.proc.wait(30)
            assert victim.proc.returncode == 0
            assert time.monotonic() - stopped < 15
        count = len(ledger.acked)
        until(lambda: len(ledger.acked) > count + 300, 60, "acks after the fault")
        if fault != "pause":
            victim.start()
        until(lambda: len(ledger.acked) > count + 600, 60)
    assert not ledger.failed, list(ledger.failed.items())[:5]
    check_no_loss_no_duplicates(ledger, read_all(rf3.bootstrap, "chaos", PARTITIONS))
    _settle(rf3, "chaos")
    _replicas_identical(rf3, "chaos")


def test_min_insync_replicas_refuses_acks_all_and_the_isr_grows_back(rf3: LocalCluster) -> None:
    _topic(rf3, "minisr", 1)
    leader = leader_of(rf3, "minisr", 0)
    others = [b for b in rf3.brokers if b is not leader]
    for broker in others:
        broker.kill()
    until(lambda: _isr(rf3, "minisr", 0) == [leader.node_id], 20, "the ISR shrinks to the leader")
    strict = Producer({"bootstrap.servers": leader.bootstrap, "acks": "all",
                       "message.timeout.ms": 3000, "retries": 0})  # fmt: skip
    errors: list[str] = []
    strict.produce("minisr", b"x", on_delivery=lambda e, _m: errors.append(e.name() if e else ""))
    strict.flush(10)
    assert errors == ["NOT_ENOUGH_REPLICAS"]
    relaxed = Producer({"bootstrap.servers": leader.bootstrap, "acks": "1"})
    relaxed.produce("minisr", b"y", on_delivery=lambda e, _m: errors.append(e.name() if e else ""))
    relaxed.flush(10)
    assert errors[1] == ""
    for broker in others:
        broker.start()
    until(lambda: _isr(rf3, "minisr", 0) == [1, 2, 3], 30, "the ISR grows back by itself")
    strict.produce("minisr", b"z", on_delivery=lambda e, _m: errors.append(e.name() if e else ""))
    strict.flush(10)
    assert errors[2] == ""
    # Each returning broker is proposed once, when it runs: a broker still starting, put
    # in by the leader, was taken out again by the controller, several times over.
    proposals = [line for line in leader.logs(400).splitlines() if "minisr-0" in line
                 and "proposing an ISR change" in line and "caught up" in line]  # fmt: skip
    for broker in others:
        assert sum(f"follower {broker.node_id} caught up" in ln for ln in proposals) == 1, proposals


def test_a_diverged_former_leader_truncates_and_nobody_saw_what_it_lost(
    rf3: LocalCluster,
) -> None:
    _topic(rf3, "diverge", 1)
    old = leader_of(rf3, "diverge", 0)
    followers = [b for b in rf3.brokers if b is not old]
    committed = Producer({"bootstrap.servers": rf3.bootstrap, "acks": "all"})
    for i in range(50):
        committed.produce("diverge", b"c%03d" % i, partition=0)
    assert committed.flush(20) == 0
    for f in followers:
        f.signal(signal.SIGSTOP)
    try:
        # Taken by the leader alone, acknowledged with acks=1, one batch at a time. A
        # follower's fetch that was already parked at the leader may carry the first
        # batch into its socket before it stopped; the rest it never fetches.
        lonely = Producer({"bootstrap.servers": old.bootstrap, "acks": "1", "linger.ms": 0})
        for i in range(20):
            lonely.produce("diverge", b"lost%03d" % i, partition=0)
            assert lonely.flush(10) == 0
        # Consumers never see them: the HW waits for the (paused) ISR.
        seen = [v for _, v in read_all(old.bootstrap, "diverge", 1, timeout=5)[0]]
        assert seen == [b"c%03d" % i for i in range(50)]
        old.kill()
    finally:
        for f in followers:
            f.signal(signal.SIGCONT)
    until(lambda: leader_of(rf3, "diverge", 0) is not old, 20, "a follower takes over")
    fresh = Producer({"bootstrap.servers": ",".join(f.bootstrap for f in followers), "acks": "all"})
    for i in range(30):
        fresh.produce("diverge", b"n%03d" % i, partition=0)
    assert fresh.flush(30) == 0
    old.start()
    _settle(rf3, "diverge", 1)
    _replicas_identical(rf3, "diverge", 1)
    values = [v for _, v in read_all(rf3.bootstrap, "diverge", 1)[0]]
    leaked = [v for v in values if v.startswith(b"lost")]
    assert leaked == [b"lost%03d" % i for i in range(len(leaked))]  # a prefix, if any
    assert len(leaked) < 20
    assert values == (
        [b"c%03d" % i for i in range(50)] + leaked + [b"n%03d" % i for i in range(30)]
    )
    assert "truncated a diverged log" in old.logs(400)


def test_a_leader_replaced_before_it_wrote_anything_follows_again(cluster_factory: Factory) -> None:
    """A broker that took leadership and wrote nothing in its epoch before the preferred
    leader came back holds an epoch its new leader never had. Its fetches must converge
    (Kafka drops such an epoch when it truncates at its log end) instead of being
    answered with the same DivergingEpoch until replica.lag.time.max.ms (30 s) throws it
    out of the ISR, stalling acks=all and the high watermark meanwhile."""
    cluster = cluster_factory(3, auto_leader_rebalance_enable="false", min_insync_replicas="2")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("idle", 1, replica_assignment=[[1, 2, 3]])])["idle"].result(20)
    strict = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                       "message.timeout.ms": 8000})  # fmt: skip
    for i in range(10):
        strict.produce("idle", b"before%d" % i, partition=0)
    assert strict.flush(20) == 0
    cluster.broker(1).kill()
    until(lambda: leader_of(cluster, "idle", 0).node_id == 2, 20, "broker 2 takes over")
    cluster.broker(1).start()  # nothing is written while broker 2 leads
    until(lambda: _isr(cluster, "idle", 0) == [1, 2, 3], 30, "broker 1 back in the ISR")
    elected = AdminClient({"bootstrap.servers": cluster.bootstrap})
    outcome = elected.elect_leaders(ElectionType.PREFERRED, [TopicPartition("idle", 0)])
    assert outcome.result(30)[TopicPartition("idle", 0)] is None
    until(lambda: leader_of(cluster, "idle", 0).node_id == 1, 20, "broker 1 leads again")
    errors: list[str] = []
    started = time.monotonic()
    strict.produce("idle", b"after", partition=0,
                   on_delivery=lambda e, _m: errors.append(e.name() if e else ""))  # fmt: skip
    strict.flush(15)
    assert errors == [""], f"acks=all after the election: {errors}"
    assert time.monotonic() - started < 5, "acks=all waited for a follower stuck on an epoch"
    assert _isr(cluster, "idle", 0) == [1, 2, 3]
    values = [v for _, v in read_all(cluster.bootstrap, "idle", 1)[0]]
    assert values == [b"before%d" % i for i in range(10)] + [b"after"]


def _latest(broker: BrokerNode, topic: str) -> tuple[int, int]:
    """(error code, offset) of a consumer's ListOffsets latest for partition 0, asked of
    ``broker`` itself."""
    ask = ListOffsetsRequest(
        version=7, replica_id=-1, isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])])  # fmt: skip
    answer = request(broker, ask, ListOffsetsResponse).topics[0].partitions[0]
    return answer.error_code, answer.offset


def test_a_new_leader_never_tells_a_consumer_an_end_behind_what_was_acknowledged(
    cluster_factory: Factory,
) -> None:
    """Followers learn the leader's high watermark a fetch later. A follower elected in
    that window starts with a high watermark below records already acknowledged; until its
    followers' first fetches move it past the start of its epoch it answers ListOffsets
    latest with OFFSET_NOT_AVAILABLE (Kafka's rule), never the lagging offset, and
    partita's own client waits it out."""
    cluster = cluster_factory(3, auto_leader_rebalance_enable="false", min_insync_replicas="2")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("ends", 1, replica_assignment=[[1, 2, 3]])])["ends"].result(20)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(20):
        producer.produce("ends", b"%d" % i, partition=0)
        assert producer.flush(10) == 0
    new_leader = cluster.broker(2)
    answers: list[tuple[int, int]] = []
    with paused(cluster.broker(3)):  # so that the new leader's high watermark cannot move
        cluster.broker(1).kill()
        until(lambda: layout(new_leader, "ends")[0].leader_id == 2, 20, "broker 2 leads")
        for _ in range(10):
            answers.append(_latest(new_leader, "ends"))
            time.sleep(0.05)

        async def listed() -> int:
            consumer = AsyncConsumer(new_leader.bootstrap)
            await consumer.start()
            try:
                return (await consumer.end_offsets([("ends", 0)]))[("ends", 0)]
            finally:
                await consumer.stop()

        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(asyncio.run, listed())
            time.sleep(0.5)
            cluster.broker(3).signal(signal.SIGCONT)
            assert waiting.result(20) == 20
    assert all(code == OFFSET_NOT_AVAILABLE or (code, offset) == (0, 20)
               for code, offset in answers), answers  # fmt: skip
    assert until(lambda: _latest(new_leader, "ends") == (0, 20), 20, "the end known again")


def test_a_topic_deleted_and_created_again_while_a_broker_was_away_starts_afresh_there(
    cluster_factory: Factory,
) -> None:
    """Broker 3 misses the deletion of a topic and the creation of another of the same
    name. Back, and given the new topic's partition by a reassignment, its old directory
    (same name, another topic id) must not pass for the new replica: it would keep old
    records at offsets the new leader gave to new ones, at the same epoch 0, where no
    truncation rule can see them. Kafka treats such a directory as stray (KIP-516)."""
    cluster = cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("again", 1, replica_assignment=[[1, 2, 3]])])["again"].result(20)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(50):  # one batch each, so that a cut at any offset keeps some
        producer.produce("again", b"old%02d" % i)
        assert producer.flush(20) == 0
    assert cluster.broker(3).stop() == 0
    admin.delete_topics(["again"])["again"].result(20)
    until(lambda: "again" not in admin.list_topics(timeout=10).topics, 20, "the topic is gone")
    admin.create_topics([NewTopic("again", 1, replica_assignment=[[1, 2]])])["again"].result(20)
    for i in range(20):
        producer.produce("again", b"new%02d" % i)
    assert producer.flush(20) == 0
    cluster.broker(3).start()
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    kp.alter_partition_reassignments({KpTopicPartition("again", 0): [1, 2, 3]})
    kp.close()
    until(lambda: _isr(cluster, "again", 0) == [1, 2, 3], 30, "broker 3 in sync with the new topic")
    _replicas_identical(cluster, "again", 1)
    cluster.broker(1).kill()
    cluster.broker(2).kill()
    until(lambda: layout(cluster.broker(3), "again")[0].leader_id == 3, 20, "broker 3 leads")
    values = [v for _, v in read_all(cluster.broker(3).bootstrap, "again", 1)[0]]
    assert values == [b"new%02d" % i for i in range(20)]
    assert "belongs to an earlier topic of this name" in cluster.broker(3).logs(400)


def test_a_consumer_group_survives_its_coordinators_death(rf3: LocalCluster) -> None:
    _topic(rf3, "grouped")
    producer = Producer({"bootstrap.servers": rf3.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce("grouped", b"g%04d" % i, partition=i % PARTITIONS)
    assert producer.flush(20) == 0
    config = {
        "bootstrap.servers": rf3.bootstrap,
        "group.id": "survivors",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
    }
    consumer = Consumer(config)
    consumer.subscribe(["grouped"])
    seen: list[bytes] = []
    while len(seen) < 150:
        msg = consumer.poll(1)
        if msg is not None and not msg.error():
            seen.append(msg.value())
    consumer.commit(asynchronous=False)
    committed = {
        tp.partition: tp.offset
        for tp in consumer.committed([TopicPartition("grouped", p) for p in range(PARTITIONS)])
    }
    consumer.close()
    from partita.coordinator.offset_records import group_partition  # noqa: PLC0415

    coordinator = leader_of(rf3, "__consumer_offsets", group_partition("survivors", 50))
    coordinator.kill()
    survivors = ",".join(b.bootstrap for b in rf3.brokers if b.alive)
    consumer = Consumer({**config, "bootstrap.servers": survivors})
    consumer.subscribe(["grouped"])
    deadline = time.monotonic() + 60
    rest: list[bytes] = []
    while len(seen) + len(rest) < 300 and time.monotonic() < deadline:
        try:
            msg = consumer.poll(1)
        except KafkaException:
            continue
        if msg is not None and not msg.error():
            rest.append(msg.value())
    after = {
        tp.partition: tp.offset
        for tp in consumer.committed([TopicPartition("grouped", p) for p in range(PARTITIONS)], 20)
    }
    consumer.close()
    assert after == committed  # nothing committed was lost or moved back
    assert sorted(seen + rest) == sorted(b"g%04d" % i for i in range(300))


def test_deleted_records_stay_deleted_after_a_failover(rf3: LocalCluster) -> None:
    _topic(rf3, "trimmed", 1)
    producer = Producer({"bootstrap.servers": rf3.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("trimmed", b"%d" % i)
    assert producer.flush(20) == 0
    admin = AdminClient({"bootstrap.servers": rf3.bootstrap})
    admin.delete_records([TopicPartition("trimmed", 0, 60)])[
        TopicPartition("trimmed", 0, 60)
    ].result(20)
    producer.produce("trimmed", b"more")  # the followers' next fetch carries the log start
    assert producer.flush(20) == 0
    leader = leader_of(rf3, "trimmed", 0)
    leader.kill()
    until(lambda: leader_of(rf3, "trimmed", 0) is not leader, 20, "a new leader")
    consumer = Consumer({"bootstrap.servers": rf3.bootstrap, "group.id": "trim"})
    # A new leader's HW catches up once its followers fetch from it, as in Kafka; its log
    # start is the one DeleteRecords set, never 0 again.
    until(
        lambda: watermarks(consumer, TopicPartition("trimmed", 0)) == (60, 101),
        20,
        "log start 60 and every record on the new leader",
    )
    consumer.close()
