"""Brokers and a secured etcd (#28): etcd serving TLS only to clients with a certificate
it trusts (--client-cert-auth), and with its own authentication on (a user allowed only
the cluster's key prefix). Brokers given the etcd.ssl.* and etcd.username/password
settings form a cluster and replicate; a broker without a certificate, or with a wrong
password, stops at start with one line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from etcd3aio import Etcd3Client
from etcd3aio.auth import PermissionType
from etcd3aio.kv import prefix_range_end

from partita.local.cluster import EtcdProcess, EtcdTls, LocalCluster
from partita.security.certificates import CertificateAuthority

PREFIX = "/partita-secure/"


@pytest.fixture
def secured_etcd(tmp_path: Path) -> Iterator[tuple[EtcdProcess, dict[str, str]]]:
    ca = CertificateAuthority.create()
    certs = tmp_path / "certs"
    ca_file = ca.write(certs)
    server = ca.issue(certs, "etcd", hosts=("127.0.0.1", "localhost"))
    client = ca.issue(certs, "broker")
    etcd = EtcdProcess(
        tmp_path / "etcd",
        tls=EtcdTls(ca_file, server.certificate, server.key, client.certificate, client.key),
    )
    etcd.start()

    async def enable_auth() -> None:
        admin = Etcd3Client(
            [etcd.endpoint],
            ca_cert=ca_file.read_bytes(),
            cert_key=client.key.read_bytes(),
            cert_chain=client.certificate.read_bytes(),
        )
        await admin.connect()
        auth = admin.auth
        assert auth is not None
        await auth.user_add("root", "root-secret")
        await auth.role_add("root")
        await auth.user_grant_role("root", "root")
        await auth.user_add("partita", "etcd-secret")
        await auth.role_add("partita")
        await auth.role_grant_permission(
            "partita", PREFIX, prefix_range_end(PREFIX), perm_type=PermissionType.READWRITE
        )
        await auth.user_grant_role("partita", "partita")
        await auth.auth_enable()
        await admin.close()

    asyncio.run(enable_auth())
    settings = {
        "etcd.ssl.ca.location": str(ca_file),
        "etcd.ssl.certificate.location": str(client.certificate),
        "etcd.ssl.key.location": str(client.key),
        "etcd.username": "partita",
        "etcd.password": "etcd-secret",
    }
    yield etcd, settings
    etcd.kill()


def test_brokers_use_a_tls_etcd_with_authentication(
    secured_etcd: tuple[EtcdProcess, dict[str, str]], tmp_path: Path
) -> None:
    etcd, settings = secured_etcd
    cluster = LocalCluster(
        tmp_path / "cluster",
        2,
        etcd_endpoints=etcd.endpoint,
        settings=settings,
        prefix=PREFIX.strip("/"),
    )
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("over-tls", 2, 2)]).values():
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce("over-tls", f"v{i}".encode(), partition=i % 2)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "etcd-tls"})
        consumer.assign([TopicPartition("over-tls", p, 0) for p in (0, 1)])
        seen = 0
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen += 1
            if seen == 100:
                break
        consumer.close()
        assert seen == 100
    finally:
        cluster.kill()

    # One line and exit 1: a wrong password, no client certificate.
    for changed, says in (
        ({"etcd.password": "wrong"}, "authentication failed"),
        (
            {"etcd.ssl.certificate.location": "", "etcd.ssl.key.location": ""},
            "cannot reach the cluster metadata store",
        ),
    ):
        args = [
            sys.executable, "-m", "partita.cli.main", "broker", "--data-dir",
            str(tmp_path / "refused"), "--metadata", f"etcd://{etcd.endpoint}{PREFIX}",
        ]  # fmt: skip
        for key, value in {**settings, **changed}.items():
            args += ["--set", f"{key}={value}"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().count("\n") == 0, result.stderr
        assert says in result.stderr.lower(), result.stderr
