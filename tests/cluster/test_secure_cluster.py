"""A secured cluster (#28): three brokers whose only listener is SASL_SSL, so followers
fetch over TLS and log in to their leaders (sasl.mechanism.inter.broker.protocol), with
the ACL authorizer on. An application user (SCRAM-SHA-512, allowed its topic and group)
produces with acks=all while the leader of a partition is killed with -9: nothing it was
acknowledged is lost or doubled, and the killed broker, restarted, logs in again and
catches up into the ISR."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.protocol.admin import DescribeAclsRequest

from partita.client.admin import AsyncAdmin
from partita.client.connection import BrokerConnection
from partita.client.security import ClientSecurity
from partita.client.security_admin import alter_client_quotas
from partita.local.cluster import LocalCluster
from partita.security.certificates import CertificateAuthority
from tests.cluster.conftest import until

TOPIC = "payments"
PARTITIONS = 3


@pytest.fixture
def secure_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    ca = CertificateAuthority.create()
    certs = tmp_path / "certs"
    ca_file = ca.write(certs)
    broker_cert = ca.issue(certs, "broker", hosts=("127.0.0.1", "localhost"))
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_admin="admin-secret";'
    )
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(broker_cert.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca_file),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
        "min.insync.replicas": "2",
        "group.initial.rebalance.delay.ms": "0",
        "replica.lag.time.max.ms": "10000",
    }
    cluster = LocalCluster(tmp_path / "cluster", 3, settings=settings)
    try:
        cluster.start()
        yield cluster, ca_file
    finally:
        cluster.kill()


def secured(
    cluster: LocalCluster, ca_file: Path, user: str, password: str, mechanism: str
) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca_file),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def test_a_sasl_ssl_cluster_replicates_and_loses_nothing_under_kill(
    secure_cluster: tuple[LocalCluster, Path],
) -> None:
    cluster, ca_file = secure_cluster
    # Passwords stay out of the brokers' command lines, which any local user can read.
    for broker in cluster.brokers:
        assert broker.proc is not None
        argv = Path(f"/proc/{broker.proc.pid}/cmdline").read_bytes()
        assert b"broker-secret" not in argv and b"admin-secret" not in argv, argv
    admin_config = secured(cluster, ca_file, "admin", "admin-secret", "PLAIN")
    admin = AdminClient(admin_config)
    upsert = UserScramCredentialUpsertion(
        "app", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"app-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=20)
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)]).values():
        future.result(timeout=20)
    grants = [
        AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:app", "*",
                   operation, AclPermissionType.ALLOW)
        for operation in (AclOperation.WRITE, AclOperation.READ)
    ] + [
        AclBinding(ResourceType.GROUP, "auditors", ResourcePatternType.LITERAL, "User:app",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
    ]  # fmt: skip
    for future in admin.create_acls(grants).values():
        future.result(timeout=20)
    # Effective on every broker within a second: each one (asked itself, not through
    # the cluster) lists them.
    created = time.monotonic()
    for broker in cluster.brokers:
        host, port = broker.bootstrap.rsplit(":", 1)
        until(lambda h=host, p=int(port): _acls_on(h, p, admin_config) == 3, 1.0, broker.bootstrap)
    assert time.monotonic() - created < 1.5

    # Replication over SASL_SSL: every partition's ISR fills up.
    def full_isrs() -> bool:
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        return all(len(p.isrs) == 3 for p in topic.partitions.values())

    until(full_isrs, 30, "every replica in sync over SASL_SSL")

    app = secured(cluster, ca_file, "app", "app-secret", "SCRAM-SHA-512")
    acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    failed: list[str] = []
    lock = threading.Lock()

    def on_delivery(error: Any, message: Any) -> None:
        with lock:
            if error is None:
                acked[message.partition()].append(message.value())
            else:
                failed.append(str(error))

    producer = Producer(
        {**app, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
         "message.timeout.ms": 60000}
    )  # fmt: skip
    total, killed_at = 3000, 1000
    leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
    for i in range(total):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=on_delivery)  # fmt: skip
        producer.poll(0)
        if i == killed_at:
            producer.flush(30)
            cluster.broker(leader).kill()  # kill -9
        time.sleep(0.001)
    assert producer.flush(60) == 0
    assert not failed, failed[:5]
    assert sum(len(v) for v in acked.values()) == total

    # The killed broker comes back on the port it had (clients and followers hold that
    # address), logs in to the new leaders and catches up.
    address = cluster.broker(leader).bootstrap
    cluster.broker(leader).start()
    assert cluster.broker(leader).bootstrap == address
    until(full_isrs, 60, "the restarted broker back in every ISR")

    consumer = Consumer({**app, "group.id": "auditors", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    read: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 60
    while sum(len(v) for v in read.values()) < total and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read[message.partition()].append(message.value())
    consumer.close()
    for partition in range(PARTITIONS):
        # Every acknowledged value, once, in the order it was acknowledged.
        assert read[partition] == acked[partition], partition


def test_replication_is_never_throttled_by_client_quotas(cluster_factory: Any) -> None:
    """A tiny default quota for every client id (followers fetch with client ids too)
    holds clients back, never replication: acks=all writes commit as fast as before."""
    cluster = cluster_factory(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic("quota-replicated", 1, 3)]).values():
        future.result(timeout=20)

    async def tiny_default() -> None:
        async with AsyncAdmin(cluster.bootstrap) as client:
            await alter_client_quotas(
                client,
                (("client-id", None),),
                {"consumer_byte_rate": 1024.0, "request_percentage": 1.0},
                [],
            )

    asyncio.run(tiny_default())
    time.sleep(1)  # every broker's image has the quota
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "client.id": "exempt-producer"}
    )
    started = time.monotonic()
    for i in range(2000):
        producer.produce("quota-replicated", b"r" * 1000, key=str(i).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    # 2 MB acknowledged by all three replicas: followers fetched at full speed (a 1 KiB/s
    # follower would need half an hour).
    assert time.monotonic() - started < 30
    topic = admin.list_topics("quota-replicated", timeout=10).topics["quota-replicated"]
    assert len(topic.partitions[0].isrs) == 3
    # The control: the quota is in force, a client reading the same data is throttled.
    throttled: list[float] = []
    reader = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "client.id": "quota-control",
            "group.id": "quota-control",
            "throttle_cb": lambda event: throttled.append(event.throttle_time),
        }
    )
    reader.assign([TopicPartition("quota-replicated", 0, 0)])
    deadline = time.monotonic() + 15
    while not throttled and time.monotonic() < deadline:
        reader.poll(0.2)
    reader.close()
    assert throttled, "the default client quota did not hold the control client back"


def _acls_on(host: str, port: int, config: dict[str, Any]) -> int:
    """How many bindings of User:app this one broker lists (DescribeAcls, asked of it)."""

    async def ask() -> int:
        connection = BrokerConnection(host, port, security=ClientSecurity.from_config(config))
        await connection.connect()
        try:
            response = await connection.request(
                DescribeAclsRequest(
                    version=3,
                    resource_type_filter=1,  # ANY
                    resource_name_filter=None,
                    pattern_type_filter=1,
                    principal_filter="User:app",
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                )
            )
        finally:
            await connection.close()
        return sum(len(r.acls) for r in response.resources)

    return asyncio.run(ask())
