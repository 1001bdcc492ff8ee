"""etcd as a quorum (#30): three etcd members, the production layout, under a cluster of
three brokers. Losing the quorum stops metadata changes, not healthy partitions; a dead
member first in the endpoint list costs nothing. (Losing any one member, each in turn,
is tried on three hosts: tests/cluster/test_hosts.py.)"""

from __future__ import annotations

import time
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from partita.local.cluster import EtcdProcess, LocalCluster, free_port
from tests.cluster.conftest import Factory, until
from tests.cluster.faults import check_no_loss_no_duplicates, producing, read_all

PARTITIONS = 6
FENCED = "cannot renew its cluster lease"  # what a fenced leader answers producers


@pytest.fixture
def quorum(cluster_factory: Factory) -> LocalCluster:
    return cluster_factory(3, etcd_members=3, min_insync_replicas="2")


def _longest_gap(times: list[float], since: float) -> float:
    """The longest time without an acknowledgement from ``since`` until now."""
    moments = [since, *sorted(t for t in times if t >= since), time.monotonic()]
    return max(b - a for a, b in pairwise(moments))


@pytest.mark.timeout(240)
def test_losing_the_etcd_quorum_stops_metadata_changes_not_healthy_partitions(
    quorum: LocalCluster,
) -> None:
    """Two of three members killed: etcd can decide nothing, so no broker can be
    replaced; leaders whose ISR still fetches from them go on acknowledging acks=all
    writes past their lease, topic creation waits, and everything resumes when etcd has
    its quorum again (a new etcd leader extends every lease: no broker re-registers)."""
    etcd = quorum.etcd_cluster
    assert etcd is not None
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    admin.create_topics([NewTopic("healthy", PARTITIONS, 3)])["healthy"].result(30)
    lost = etcd.members[:2]
    with producing(quorum.bootstrap, "healthy", PARTITIONS) as ledger:
        until(lambda: len(ledger.acked) > 200, 20, "writes acknowledged")
        for member in lost:
            member.kill()
        killed = time.monotonic()
        time.sleep(6)  # twice a broker's lease
        gap = _longest_gap(ledger.ack_times, killed)
        acked_during = sum(1 for t in ledger.ack_times if t > killed)
        refused = admin.create_topics([NewTopic("waits", 1, 3)], request_timeout=8)["waits"]
        with pytest.raises(KafkaException):
            refused.result(20)
        for member in lost:
            member.start(wait=False)
        for member in etcd.members:
            member.wait_healthy(30)
        admin.create_topics([NewTopic("later", 1, 3)])["later"].result(30)
        until(lambda: len(ledger.acked) > acked_during + 400, 20, "writes after")
    print(
        f"etcd quorum lost for 6 s: {acked_during} writes acknowledged meanwhile, "
        f"longest pause {gap:.2f} s"
    )
    assert not ledger.failed, ledger.failed
    assert gap < 2.0, f"writes stopped for {gap:.2f} s while etcd had no quorum"
    check_no_loss_no_duplicates(ledger, read_all(quorum.bootstrap, "healthy", PARTITIONS))
    for broker in quorum.brokers:
        logs = broker.logs(3000)
        assert "etcd has lost its quorum" in logs
        assert "lease lost" not in logs  # nobody had to register again
    assert all(b.alive for b in quorum.brokers)


def test_an_endpoint_list_whose_first_member_is_dead_is_used_from_the_next(
    tmp_path: Path,
) -> None:
    """The brokers' client spreads calls over the members and drops one that refuses:
    a dead member first in ``etcd://...`` costs neither the start nor a write."""
    etcd = EtcdProcess(tmp_path / "etcd")
    etcd.start()
    cluster = LocalCluster(
        tmp_path / "cluster", 2, etcd_endpoints=f"127.0.0.1:{free_port()},{etcd.endpoint}"
    )
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("first-dead", 2, 2)])["first-dead"].result(30)
        with producing(cluster.bootstrap, "first-dead", 2) as ledger:
            until(lambda: len(ledger.acked) > 100, 20, "writes acknowledged")
        assert not ledger.failed, ledger.failed
        check_no_loss_no_duplicates(ledger, read_all(cluster.bootstrap, "first-dead", 2))
    finally:
        cluster.kill()
        etcd.kill()
