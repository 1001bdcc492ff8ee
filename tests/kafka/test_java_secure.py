"""Apache Kafka's Java client over partita's secured listeners (#28): SASL_SSL with
SCRAM-SHA-512, and mutual TLS with the certificate's DN as the principal (an ACL names
it). The default producer (idempotent, acks=all) places every key as murmur2 does, and a
group of two consumers shares the topic, exactly as in the clear (test_java_client)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from partita.client.admin import AsyncAdmin
from partita.client.murmur2 import partition_for_key
from partita.client.security_admin import create_acls, upsert_scram_user
from partita.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from partita.security.certificates import CertificateAuthority
from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import JavaProgram
from tests.kafka.test_java_client import PARTITIONS, create_topic, produce, run_group

pytestmark = pytest.mark.kafka

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


class Secured:
    def __init__(self, directory: Path) -> None:
        ca = CertificateAuthority.create()
        self.ca = ca.write(directory)
        self.broker_cert = ca.issue(directory, "broker", hosts=("127.0.0.1", "localhost"))
        self.alice = ca.issue(directory, "alice")
        self.directory = directory

    def properties(self, name: str, values: dict[str, str]) -> Path:
        path = self.directory / f"{name}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path


@pytest.fixture(scope="module")
def secured(
    kafka_jars: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, Secured]]:
    setup = Secured(tmp_path_factory.mktemp("java-certs"))
    broker = BrokerProcess(
        tmp_path_factory.mktemp("java-secure") / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(setup.broker_cert.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(setup.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # The plaintext listener is the test's own back door (as a super user).
            "super.users": "User:ANONYMOUS;User:admin",
            "group.initial.rebalance.delay.ms": "0",
        },
    )
    broker.start()

    async def users_and_acls() -> None:
        async with AsyncAdmin(f"127.0.0.1:{broker.ports['PLAINTEXT']}") as admin:
            await upsert_scram_user(admin, "java", "java-secret", "SCRAM-SHA-512")
            await create_acls(
                admin,
                [
                    AclBinding(kind, name, PatternType.PREFIXED, principal, "*", op,
                               Permission.ALLOW)
                    for principal in ("User:java", "User:alice")
                    for kind, name, op in (
                        (ResourceType.TOPIC, "java-", Operation.ALL),
                        (ResourceType.GROUP, "java-", Operation.ALL),
                    )
                ]
                + [
                    AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                               principal, "*", Operation.IDEMPOTENT_WRITE, Permission.ALLOW)
                    for principal in ("User:java", "User:alice")
                ],
            )  # fmt: skip

    asyncio.run(users_and_acls())
    yield broker, setup
    broker.close()


@pytest.mark.parametrize("listener", ["SASL_SSL", "SSL"])
def test_the_java_client_over_a_secured_listener(
    client_check: JavaProgram, secured: tuple[BrokerProcess, Secured], listener: str
) -> None:
    broker, setup = secured
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(setup.ca)}
    if listener == "SASL_SSL":
        config = setup.properties(
            "scram",
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                'required username="java" password="java-secret";',
                **trust,
            },
        )
    else:
        config = setup.properties(
            "mtls",
            {
                "security.protocol": "SSL",
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(setup.alice.keystore),
                **trust,
            },
        )
    topic = f"java-{listener.lower()}"
    create_topic(f"127.0.0.1:{broker.ports['PLAINTEXT']}", topic)
    bootstrap = f"127.0.0.1:{broker.ports[listener]}"
    placed = produce(client_check, bootstrap, topic, config)
    for key, (partition, _offset) in placed.items():
        assert partition == partition_for_key(key.encode(), PARTITIONS), key
    run_group(client_check, bootstrap, f"java-{listener.lower()}-group", "default", topic, config)
    # Nothing else is allowed: a topic outside the prefix is refused to both principals.
    refused = client_check.run("produce", bootstrap, "elsewhere", "1", config=config)
    assert refused.returncode != 0
    assert "TopicAuthorizationException" in refused.stdout + refused.stderr
