"""Beyond one host (#30): three hosts -- network namespaces with addresses of their own --
each running a broker and an etcd member, as three machines would. Clients on a fourth
host reach the cluster through advertised addresses alone; losing any etcd member costs
no acknowledged write; a host cut off from the others (its broker and its etcd member
together) loses its leaderships and takes its place again when healed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from partita.local.cluster import BrokerNode, ClusterStartError, EtcdProcess, LocalCluster
from partita.local.hosts import HostLab
from tests.cluster.conftest import _FAILED, layout, until
from tests.cluster.faults import check_no_loss_no_duplicates, producing, read_all

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 6
FENCED = "cannot renew its cluster lease"  # what a fenced leader answers producers


@pytest.fixture
def lab() -> Iterator[HostLab]:
    lab = HostLab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def hosts(request: pytest.FixtureRequest, lab: HostLab, tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path / "cluster",
        3,
        etcd_members=3,
        lab=lab,
        settings={"min.insync.replicas": "2"},
    )
    try:
        cluster.start()
        yield cluster
    finally:
        if request.node.stash.get(_FAILED, False):
            for broker in cluster.brokers:
                print(f"--- broker {broker.node_id}: {broker.log_path}\n{broker.logs(60)}")
        cluster.kill()


# A client run on the client host: it knows one broker's address and nothing else.
CLIENT = """
import json, sys
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(30)
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
acked = []
for i in range(600):
    producer.produce(topic, b"v%d" % i, partition=i % 6,
                     on_delivery=lambda err, msg: acked.append(err is None))
producer.flush(60)
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
read = []
while len(read) < 600:
    msg = consumer.poll(20)
    if msg is None:
        break
    if not msg.error():
        read.append(msg.value().decode())
consumer.close()
brokers = admin.list_topics(timeout=10).brokers
print(json.dumps({"acked": sum(acked), "read": len(set(read)),
                  "brokers": sorted(f"{b.host}:{b.port}" for b in brokers.values())}))
"""


def test_clients_on_a_fourth_host_use_the_cluster_through_advertised_addresses(
    hosts: LocalCluster, lab: HostLab
) -> None:
    client = lab.add("client", 200)
    first = hosts.brokers[0].bootstrap  # one address; the rest comes from metadata
    ran = subprocess.run(
        [*client.launcher, sys.executable, "-c", CLIENT, first, "hosts"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    answer = json.loads(ran.stdout.strip().splitlines()[-1])
    addresses = sorted(f"{h.address}:9092" for h in hosts.hosts)
    assert answer == {"acked": 600, "read": 600, "brokers": addresses}
    # Every replica fetched from its leader on another host: all three in every ISR.
    entries = layout(hosts.brokers[1], "hosts")
    assert all(sorted(p.isr_nodes) == [1, 2, 3] for p in entries.values())


def _longest_gap(times: list[float], since: float) -> float:
    moments = [since, *sorted(t for t in times if t >= since), time.monotonic()]
    return max(b - a for a, b in pairwise(moments))


def test_killing_each_hosts_etcd_member_in_turn_loses_no_write_and_fences_no_broker(
    hosts: LocalCluster,
) -> None:
    """kill -9 of each member in turn, etcd's leader first, under acks=all writes:
    lease renewals move to the members left, and no broker fences itself."""
    etcd = hosts.etcd_cluster
    assert etcd is not None
    admin = AdminClient({"bootstrap.servers": hosts.bootstrap})
    admin.create_topics([NewTopic("quorum", PARTITIONS, 3)])["quorum"].result(30)
    leader = until(etcd.leader, 10, "an etcd leader")
    order: list[EtcdProcess] = [leader, *(m for m in etcd.members if m is not leader)]
    gaps = []
    with producing(hosts.bootstrap, "quorum", PARTITIONS) as ledger:
        until(lambda: len(ledger.acked) > 200, 20, "writes acknowledged")
        for member in order:
            killed = time.monotonic()
            member.kill()
            # Longer than a broker's lease (3 s): a broker that could not renew would
            # have fenced itself by now.
            time.sleep(4)
            gaps.append(_longest_gap(ledger.ack_times, killed))
            until(etcd.leader, 15, f"a leader without {member.name}")
            member.start(wait=False)
            member.wait_healthy(30)
            time.sleep(1)
        until(lambda: len(ledger.acked) > 400, 20, "writes acknowledged after")
    print(
        f"acknowledged {len(ledger.acked)}; longest pause between acks with each member "
        f"killed ({', '.join(m.name for m in order)}): {', '.join(f'{g:.2f}' for g in gaps)} s"
    )
    assert not ledger.failed, ledger.failed
    check_no_loss_no_duplicates(ledger, read_all(hosts.bootstrap, "quorum", PARTITIONS))
    fenced = {b.node_id for b in hosts.brokers if FENCED in b.logs(2000)}
    assert not fenced, f"brokers {fenced} fenced themselves while one etcd member was down"
    assert all(b.alive for b in hosts.brokers)


def _leaders(cluster: LocalCluster, asker: int, topic: str) -> dict[int, int]:
    return {p: e.leader_id for p, e in layout(cluster.broker(asker), topic).items()}


def test_an_isolated_host_loses_its_leaderships_and_rejoins_when_healed(
    hosts: LocalCluster, lab: HostLab
) -> None:
    """Host 1 cut off from hosts 2 and 3 (its broker and its etcd member together; the
    clients, on this machine, still reach it): its etcd member is in the minority, so
    broker 1 can renew nothing; the others elect new leaders for its partitions, and
    writes go on there. Healed, broker 1 comes back into every ISR. No acknowledged
    write is lost or duplicated."""
    admin = AdminClient({"bootstrap.servers": hosts.bootstrap})
    admin.create_topics([NewTopic("iso", PARTITIONS, 3)])["iso"].result(30)
    until(lambda: 1 in _leaders(hosts, 2, "iso").values(), 10, "broker 1 leading")
    with producing(hosts.bootstrap, "iso", PARTITIONS) as ledger:
        until(lambda: len(ledger.acked) > 200, 20, "writes acknowledged")
        isolated = time.monotonic()
        lab.isolate("h1")
        until(lambda: 1 not in _leaders(hosts, 2, "iso").values(), 30, "leaders moved off 1")
        moved = time.monotonic() - isolated
        before = len(ledger.acked)
        until(lambda: len(ledger.acked) > before + 300, 30, "writes while host 1 is cut off")
        lab.heal("h1")
        healed = time.monotonic()
        until(
            lambda: all(
                sorted(e.isr_nodes) == [1, 2, 3] for e in layout(hosts.broker(2), "iso").values()
            ),
            90,
            "broker 1 back in every ISR",
        )
        rejoined = time.monotonic() - healed
    print(f"host 1 isolated: leaders moved in {moved:.1f} s; back in every ISR {rejoined:.1f} s")
    assert not ledger.failed, ledger.failed
    check_no_loss_no_duplicates(ledger, read_all(hosts.bootstrap, "iso", PARTITIONS))
    assert all(b.alive for b in hosts.brokers)


@pytest.mark.parametrize(
    ("node_id", "advertises_host_2", "refusal"),
    [
        (4, True, "is advertised by live broker 2"),  # another host's address
        (1, False, "node id 1 is already registered"),  # another host's node id
    ],
)
def test_a_broker_with_another_hosts_address_or_node_id_is_refused(
    hosts: LocalCluster,
    lab: HostLab,
    tmp_path: Path,
    node_id: int,
    advertises_host_2: bool,
    refusal: str,
) -> None:
    """Misconfigured on a fourth host: it exits with one clear line once the other's
    registration has outlived a session (it might have been its own previous life), and
    the cluster goes on as before."""
    stray = lab.add("stray", 100)
    settings = (
        {"advertised.listeners": f"PLAINTEXT://{hosts.host(2).address}:9092"}
        if advertises_host_2
        else {}
    )
    broker = BrokerNode(node_id, tmp_path / "stray", hosts.metadata, None, settings)
    broker.host, broker.port, broker.launcher = stray.address, 9092, stray.launcher
    broker.data_dir.mkdir()
    with pytest.raises(ClusterStartError, match="exited with 1"):
        broker.start(timeout=60)
    assert refusal in broker.logs(), broker.logs()
    described = AdminClient({"bootstrap.servers": hosts.bootstrap}).list_topics(timeout=10)
    assert sorted(described.brokers) == [1, 2, 3]
    assert {f"{b.host}:{b.port}" for b in described.brokers.values()} == {
        f"{h.address}:9092" for h in hosts.hosts
    }


def test_a_fourth_host_joins_with_a_server_properties_alone(
    hosts: LocalCluster, lab: HostLab, tmp_path: Path
) -> None:
    """What docs/deployment.md tells an operator to write on each machine."""
    host = lab.add("h4", 4)
    properties = tmp_path / "server.properties"
    properties.write_text(
        "node.id=4\n"
        f"log.dirs={tmp_path / 'data'}\n"
        f"listeners=PLAINTEXT://{host.address}:9092\n"
        f"metadata.url={hosts.metadata}\n"
    )
    ready = tmp_path / "ready"
    command = [sys.executable, "-m", "partita.cli.main", "broker", "--config", str(properties)]
    with (tmp_path / "broker-4.log").open("wb") as log:
        proc = subprocess.Popen(
            [*host.launcher, *command, "--ready-file", str(ready)], stdout=log, stderr=log
        )
    try:
        until(lambda: ready.exists() and ready.read_text().strip(), 60, "broker 4 ready")
        described = AdminClient({"bootstrap.servers": hosts.bootstrap}).list_topics(timeout=10)
        assert described.brokers[4].host == host.address
        assert (tmp_path / "data" / "meta.properties").exists()
        admin = AdminClient({"bootstrap.servers": hosts.bootstrap})
        admin.create_topics([NewTopic("four", 4, 4)])["four"].result(30)
        until(
            lambda: all(
                sorted(e.isr_nodes) == [1, 2, 3, 4]
                for e in layout(hosts.broker(1), "four").values()
            ),
            30,
            "broker 4 in every ISR",
        )
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
