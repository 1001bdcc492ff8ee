"""The console on a secured cluster (SASL, the ACL authorizer): it logs in as the principal
its settings name and sees what that principal may see; what it may not see is said on
the page, never a trace; a wrong password is one clear line; read-only executes nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
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

from partita.local.cluster import LocalCluster
from tests.console.conftest import ConsoleServer, until

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="broker" password="broker-secret" '
        'user_broker="broker-secret" user_admin="admin-secret";'
    )
    settings = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin",
    }
    cluster = LocalCluster(tmp_path_factory.mktemp("secure-console") / "c", 3, settings=settings)
    cluster.start()
    admin = AdminClient(sasl(cluster, "admin", "admin-secret", "PLAIN"))
    upsert = UserScramCredentialUpsertion(
        "viewer", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"viewer-secret"
    )
    try:
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=20)
        for name in ("visible", "hidden"):
            admin.create_topics([NewTopic(name, 3, 3)])[name].result(30)
        # The viewer may describe one topic and every group, nothing on the cluster.
        grants = [
            AclBinding(ResourceType.TOPIC, "visible", ResourcePatternType.LITERAL,
                       "User:viewer", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL,
                       "User:viewer", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ]  # fmt: skip
        for future in admin.create_acls(grants).values():
            future.result(timeout=20)
        yield cluster
    finally:
        cluster.kill()


def sasl(cluster: LocalCluster, user: str, password: str, mechanism: str) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def console_as(
    cluster: LocalCluster, tmp_path: Path, user: str, password: str, *extra: str
) -> ConsoleServer:
    settings = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-512",
                "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]  # fmt: skip
    return ConsoleServer(cluster, tmp_path / "console.log", settings, list(extra))


def test_the_console_sees_what_its_principal_may_and_says_what_it_may_not(
    sasl_cluster: LocalCluster, tmp_path: Path
) -> None:
    console = console_as(sasl_cluster, tmp_path, "viewer", "viewer-secret", "--read-only")
    try:
        page = until(lambda: (p := console.get("/topics")[1]) and "visible" in p and p, 30)
        assert 'data-topic="hidden"' not in page  # Metadata leaves out what it may not describe
        assert "Traceback" not in page
        # DescribeLogDirs and ListPartitionReassignments need Describe on the cluster: the
        # page says so in words.
        cluster_page = console.get("/cluster")[1]
        assert "reassignments" in cluster_page and "uthoriz" in cluster_page
        assert "read-only" in cluster_page
        status, refused = console.post("/reassign/execute", {"token": "x"})
        assert status == 403 and "read-only" in refused
    finally:
        console.stop()


def test_a_wrong_password_is_one_clear_line_on_every_page(
    sasl_cluster: LocalCluster, tmp_path: Path
) -> None:
    console = console_as(sasl_cluster, tmp_path, "viewer", "not-the-password")
    try:
        page = until(
            lambda: (p := console.get("/cluster")[1]) and "cannot read the cluster" in p and p, 30
        )
        assert "Invalid client credentials" in page
        assert "Traceback" not in page
    finally:
        console.stop()


def test_the_console_command_refuses_a_bad_listen_address() -> None:
    import subprocess  # noqa: PLC0415

    done = subprocess.run(
        [sys.executable, "-m", "partita.cli.main", "console", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["error: --listen expects HOST:PORT, got 'nowhere'"]
