"""A replica's bad days: fetches that lie about who they are or ask for what does not
exist, and a follower or a leader whose disk fills up."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.consumer import FetchRequest, FetchResponse

from partita.local.cluster import LocalCluster
from tests.cluster.conftest import Factory, layout, request, until
from tests.cluster.faults import check_no_loss_no_duplicates, fill, producing, read_all, tmpfs

pytestmark = pytest.mark.timeout(180)

NOT_LEADER_OR_FOLLOWER = 6
OFFSET_OUT_OF_RANGE = 1


def _follower_fetch(broker_port_owner: object, replica: int, offset: int, epoch: int = -1) -> int:
    req = FetchRequest(
        version=11,
        replica_id=replica,
        max_wait_ms=10,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="lies",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    response = request(broker_port_owner, req, FetchResponse)  # type: ignore[arg-type]
    return int(response.responses[0].partitions[0].error_code)


def test_follower_fetches_that_lie_are_refused_and_harmless(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("lies", 1, 2)])["lies"].result(20)
    p = layout(cluster.broker(1), "lies")[0]
    leader = cluster.broker(p.leader_id)
    outsider = next(n for n in (1, 2, 3) if n not in p.replica_nodes)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("lies", b"%d" % i)
    assert producer.flush(20) == 0
    # A broker that holds no replica of the partition, and an id no broker has.
    assert _follower_fetch(leader, outsider, 0) == NOT_LEADER_OR_FOLLOWER
    assert _follower_fetch(leader, 77, 0) == NOT_LEADER_OR_FOLLOWER
    follower = next(r for r in p.replica_nodes if r != p.leader_id)
    # Past the leader's log end, and at a stale leader epoch.
    assert _follower_fetch(leader, follower, 10_000) == OFFSET_OUT_OF_RANGE
    assert _follower_fetch(leader, follower, 0, epoch=p.leader_epoch + 5) == 75  # UNKNOWN
    # None of it moved the ISR or the high watermark back, and the broker is fine.
    assert sorted(layout(cluster.broker(1), "lies")[0].isr_nodes) == sorted(p.replica_nodes)
    producer.produce("lies", b"after")
    assert producer.flush(20) == 0
    assert all(b.alive for b in cluster.brokers)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB disk for one broker's data."""
    with tmpfs(tmp_path / "tmpfs", 6) as mount:
        yield mount


def test_a_follower_with_a_full_disk_leaves_the_isr_not_the_cluster(
    tmp_path: Path, small_disk: Path
) -> None:
    cluster = LocalCluster(tmp_path / "c", 3, settings={"replica.lag.time.max.ms": "3000"})
    # Broker 3 keeps its data on a 6 MiB disk.
    cluster.broker(3).data_dir = small_disk / "data"
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Broker 1 leads; broker 3 follows.
        admin.create_topics([NewTopic("big", 1, replica_assignment=[[1, 2, 3]])])["big"].result(20)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1",
                             "linger.ms": 20})  # fmt: skip
        payload = b"x" * 10_000
        for _ in range(1500):  # 15 MB: more than broker 3's disk holds
            producer.produce("big", payload)
            producer.poll(0)
        assert producer.flush(60) == 0

        def isr() -> list[int]:
            return sorted(layout(cluster.broker(1), "big")[0].isr_nodes)

        until(lambda: 3 not in isr(), 30, "the full replica leaves the ISR")
        assert cluster.broker(3).alive
        # Broker 3 still serves as a member: metadata, and the partitions it leads.
        time.sleep(1)
        assert 3 in {b.node_id for b in _brokers(cluster)}
        assert "replica offline" in cluster.broker(3).logs(400)
    finally:
        cluster.kill()


def _brokers(cluster: LocalCluster) -> list[object]:
    from tests.cluster.conftest import metadata  # noqa: PLC0415

    return list(metadata(cluster.broker(1)).brokers)


def test_a_leader_whose_disk_fills_hands_the_partition_over_and_loses_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    """The leader's own append fails: the producer is told KAFKA_STORAGE_ERROR (retriable)
    for what was not written, the broker reports its replica offline, the controller
    elects an in-sync follower, and the idempotent producer goes on there. Every
    acknowledged value is read back once, in order, and the broker stays up."""
    cluster = LocalCluster(tmp_path / "c", 3, settings={"min.insync.replicas": "2"})
    cluster.broker(1).data_dir = small_disk / "data"  # broker 1 leads on a 6 MiB disk
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Small segments: the space reserved past a segment's end is small too, so the
        # leader's appends meet the full disk at once.
        brim = NewTopic(
            "brim", 1, replica_assignment=[[1, 2, 3]], config={"segment.bytes": "16384"}
        )
        admin.create_topics([brim])["brim"].result(20)
        with producing(cluster.bootstrap, "brim", 1, rate=400) as ledger:
            time.sleep(1)
            fill(small_disk)
            until(
                lambda: layout(cluster.broker(2), "brim")[0].leader_id in (2, 3),
                20,
                "an in-sync follower takes over from the leader whose disk filled",
            )
            moved = len(ledger.acked)
            until(lambda: len(ledger.acked) > moved + 200, 20, "acknowledgements go on")
        assert not ledger.failed, list(ledger.failed.items())[:5]
        assert "replica offline: an append as leader failed" in cluster.broker(1).logs(400)
        assert cluster.broker(1).alive
        partition = layout(cluster.broker(2), "brim")[0]
        assert 1 not in partition.isr_nodes and 1 in partition.offline_replicas
        check_no_loss_no_duplicates(ledger, read_all(cluster.broker(2).bootstrap, "brim", 1))
    finally:
        cluster.kill()
