"""TLS (#28): one broker with three listeners -- PLAINTEXT, SSL with mutual TLS, and
SASL_SSL -- and real clients on each.

- SASL_SSL with SCRAM-SHA-512: librdkafka, kafka-python, aiokafka and partita's own
  client produce and consume; kcat logs in with PLAIN (Debian's kcat sends a wrong SCRAM
  nonce, see the design brief).
- Mutual TLS: the principal is the certificate's subject, mapped by
  ssl.principal.mapping.rules (an ACL naming User:alice binds alice's certificate); no
  certificate, one from another CA, or an expired one is refused at the handshake, with
  a log line naming the address; the broker serves on.
- A plaintext client on a TLS port gets nothing and is cut off.
- Metadata answers with the addresses of the listener the request came in on.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaError, Producer
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
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.metadata import MetadataRequest

from partita.client.cluster import NoBrokersAvailableError
from partita.client.sync import Consumer as PartitaConsumer
from partita.client.sync import Producer as PartitaProducer
from partita.security.certificates import CertificateAuthority, Issued
from tests.integration.conftest import BrokerProcess
from tests.integration.test_bad_input import encode, expect_closed
from tests.integration.test_sasl import auth_errors, consume

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_bob="bob-secret";'
)


class Certificates:
    def __init__(self, directory: Path) -> None:
        ca = CertificateAuthority.create()
        self.ca = ca.write(directory)
        self.broker = ca.issue(directory, "broker", hosts=("127.0.0.1", "localhost"))
        self.alice = ca.issue(directory, "alice")
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
        self.expired = ca.issue(directory, "expired", subject="alice", days=1, not_before=past)
        rogue = CertificateAuthority.create("rogue CA")
        self.rogue = rogue.issue(directory / "rogue", "alice", hosts=("127.0.0.1",))
        self.broker_p12 = ca.pkcs12(self.broker, "store-secret")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_broker(
    certs: Certificates, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        # A PKCS12 keystore (as Kafka's docs set it up) and a PEM truststore.
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(certs.broker_p12),
        "ssl.keystore.password": "store-secret",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": "User:admin;User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": "0",
    }
    broker = BrokerProcess(tmp_path_factory.mktemp("tls") / "data", settings)
    broker.start()
    yield broker
    broker.close()


def sasl_ssl(
    broker: BrokerProcess, certs: Certificates, user: str, password: str, mechanism: str
) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_SSL']}",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def mutual_tls(broker: BrokerProcess, certs: Certificates, issued: Issued) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.ports['SSL']}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(issued.certificate),
        "ssl.key.location": str(issued.key),
    }


def new_topic(config: dict[str, Any]) -> str:
    name = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        future.result(timeout=15)
    return name


def delivered(config: dict[str, Any], topic: str, values: list[bytes]) -> list[int | None]:
    outcome: list[int | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    for value in values:
        producer.produce(
            topic, value, on_delivery=lambda err, _m: outcome.append(err.code() if err else None)
        )
    producer.flush(15)
    return outcome


# The same reading and error-collecting clients as the SASL tests, over TLS here.
read = consume
handshake_errors = auth_errors


def test_clients_produce_and_consume_over_sasl_ssl_with_scram(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    admin_config = sasl_ssl(tls_broker, certs, "admin", "admin-secret", "PLAIN")
    admin = AdminClient(admin_config)
    upsert = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    carol = sasl_ssl(tls_broker, certs, "carol", "carol-secret", "SCRAM-SHA-512")
    topic = new_topic(carol)

    # librdkafka
    assert delivered(carol, topic, [b"librdkafka"]) == [None]
    # kafka-python
    kafka_python = {
        "bootstrap_servers": carol["bootstrap.servers"],
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(certs.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "carol",
        "sasl_plain_password": "carol-secret",
    }
    producer = KafkaProducer(**kafka_python)
    producer.send(topic, b"kafka-python").get(timeout=15)
    producer.close()

    # aiokafka
    async def with_aiokafka() -> list[bytes]:
        options = {
            "bootstrap_servers": carol["bootstrap.servers"],
            "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(certs.ca)),
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "carol",
            "sasl_plain_password": "carol-secret",
        }
        aio_producer = AIOKafkaProducer(**options)
        await aio_producer.start()
        try:
            await aio_producer.send_and_wait(topic, b"aiokafka")
        finally:
            await aio_producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(20):
                while len(got) < 3:
                    batch = await consumer.getmany(timeout_ms=500)
                    got += [m.value for ms in batch.values() for m in ms]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(with_aiokafka()) == [b"librdkafka", b"kafka-python", b"aiokafka"]

    # partita's own client, with the same settings librdkafka took
    security = {k: v for k, v in carol.items() if k != "bootstrap.servers"}
    ours = PartitaProducer(carol["bootstrap.servers"], security=security)
    ours.send(topic, b"partita").result(timeout=15)
    ours.close()
    consumer = PartitaConsumer(
        carol["bootstrap.servers"], security=security, auto_offset_reset="earliest"
    )
    consumer.assign([(topic, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 4 and time.monotonic() < deadline:
        got += [r.value for r in consumer.poll(500)]
    consumer.close()
    assert got == [b"librdkafka", b"kafka-python", b"aiokafka", b"partita"]

    # kafka-python reading with a consumer group over SASL_SSL
    reader = KafkaConsumer(
        topic, group_id="tls-group", auto_offset_reset="earliest", consumer_timeout_ms=10000,
        **kafka_python,
    )  # fmt: skip
    values = []
    for message in reader:
        values.append(message.value)
        if len(values) == 4:
            break
    reader.close()
    assert values == got

    # kcat, PLAIN over SASL_SSL
    kcat = subprocess.run(
        ["kcat", "-b", carol["bootstrap.servers"], "-X", "security.protocol=SASL_SSL",
         "-X", f"ssl.ca.location={certs.ca}", "-X", "sasl.mechanism=PLAIN",
         "-X", "sasl.username=admin", "-X", "sasl.password=admin-secret",
         "-C", "-t", topic, "-o", "beginning", "-c", "4", "-e", "-q"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert kcat.returncode == 0, kcat.stderr
    assert kcat.stdout.split() == ["librdkafka", "kafka-python", "aiokafka", "partita"]

    wrong = handshake_errors(sasl_ssl(tls_broker, certs, "carol", "nope", "SCRAM-SHA-512"))
    assert any("Authentication failed" in e or "credentials" in e for e in wrong), wrong


def test_big_fetches_over_tls(tls_broker: BrokerProcess, certs: Certificates) -> None:
    """Responses bigger than the sendfile threshold go through memory on a TLS listener
    (a region handed to asyncio's sendfile there closed the connection)."""
    bob = sasl_ssl(tls_broker, certs, "bob", "bob-secret", "PLAIN")
    topic = new_topic(bob)
    values = [bytes([i]) * 100_000 for i in range(40)]  # 4 MB, fetched a megabyte at a time
    assert delivered(bob, topic, values) == [None] * len(values)
    assert read(bob, topic, len(values)) == values
    assert read(mutual_tls(tls_broker, certs, certs.alice), topic, len(values)) == values


def test_mutual_tls_principal_is_the_certificates_subject(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    alice = mutual_tls(tls_broker, certs, certs.alice)
    topic = new_topic(alice)
    assert delivered(alice, topic, [b"a1"]) == [None]
    assert read(alice, topic, 1) == [b"a1"]
    # kafka-python and aiokafka show the same certificate and read it too.
    python_reader = KafkaConsumer(
        topic, bootstrap_servers=alice["bootstrap.servers"], security_protocol="SSL",
        ssl_cafile=str(certs.ca), ssl_certfile=str(certs.alice.certificate),
        ssl_keyfile=str(certs.alice.key), auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
    )  # fmt: skip
    assert [m.value for m in python_reader][:1] == [b"a1"]
    python_reader.close()

    async def with_aiokafka() -> list[bytes]:
        context = create_ssl_context(
            cafile=str(certs.ca),
            certfile=str(certs.alice.certificate),
            keyfile=str(certs.alice.key),
        )
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=alice["bootstrap.servers"], security_protocol="SSL",
            ssl_context=context, auto_offset_reset="earliest",
        )  # fmt: skip
        await consumer.start()
        try:
            async with asyncio.timeout(15):
                while True:
                    batch = await consumer.getmany(timeout_ms=500)
                    got = [m.value for ms in batch.values() for m in ms]
                    if got:
                        return got
        finally:
            await consumer.stop()

    assert asyncio.run(with_aiokafka()) == [b"a1"]

    # An ACL naming User:alice binds the certificate CN=alice,O=partita (the mapping rule).
    admin = AdminClient(sasl_ssl(tls_broker, certs, "admin", "admin-secret", "PLAIN"))
    # (Once the topic has ACLs, allow.everyone.if.no.acl.found no longer speaks for it.)
    everyone = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:*", "*",
        AclOperation.ALL, AclPermissionType.ALLOW,
    )  # fmt: skip
    deny = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, AclPermissionType.DENY,
    )  # fmt: skip
    for future in admin.create_acls([everyone, deny]).values():
        future.result(timeout=15)
    assert delivered(alice, topic, [b"a2"]) == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    bob = sasl_ssl(tls_broker, certs, "bob", "bob-secret", "PLAIN")
    assert delivered(bob, topic, [b"b1"]) == [None]
    assert "User:alice" in tls_broker.logs()

    # No certificate, a certificate of another CA, an expired one: refused at the handshake.
    no_certificate = {k: v for k, v in alice.items() if not k.startswith(("ssl.cert", "ssl.key"))}
    for config in (
        no_certificate,
        mutual_tls(tls_broker, certs, certs.rogue),
        mutual_tls(tls_broker, certs, certs.expired),
    ):
        before = tls_broker.logs().count("TLS handshake failed")
        errors = handshake_errors(config)
        assert errors, config
        # (librdkafka logs the SSL failure and reports the broker down.)
        assert any("SSL" in e or "brokers are down" in e for e in errors), errors
        # The broker says, for each of them, that a handshake from 127.0.0.1 failed (its
        # line may land a moment after the client has given up).
        deadline = time.monotonic() + 10
        while True:
            failed = [
                line for line in tls_broker.logs().splitlines() if "TLS handshake failed" in line
            ][before:]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert failed and all("127.0.0.1" in line for line in failed), failed
    # ... and goes on serving.
    assert read(alice, topic, 2) == [b"a1", b"b1"]


def test_a_plaintext_client_on_a_tls_port_is_cut_off(tls_broker: BrokerProcess) -> None:
    for listener in ("SSL", "SASL_SSL"):
        with socket.create_connection(
            ("127.0.0.1", tls_broker.ports[listener]), timeout=10
        ) as sock:
            sock.sendall(encode(MetadataRequest[1](topics=None), 1))
            expect_closed(sock)
    # garbage where a TLS handshake should be
    with socket.create_connection(("127.0.0.1", tls_broker.ports["SSL"]), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello" + bytes(range(256)))
        expect_closed(sock)
    config = {"bootstrap.servers": tls_broker.bootstrap}
    assert new_topic(config)  # still serving


def test_metadata_answers_with_the_listener_asked(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    for listener, config in (
        ("PLAINTEXT", {"bootstrap.servers": f"127.0.0.1:{tls_broker.ports['PLAINTEXT']}"}),
        ("SSL", mutual_tls(tls_broker, certs, certs.alice)),
        ("SASL_SSL", sasl_ssl(tls_broker, certs, "bob", "bob-secret", "PLAIN")),
    ):
        brokers = AdminClient(config).list_topics(timeout=15).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [
            ("127.0.0.1", tls_broker.ports[listener])
        ], listener


def test_a_verifying_client_refuses_a_broker_it_does_not_trust(
    tls_broker: BrokerProcess, certs: Certificates
) -> None:
    """The other direction: partita's client checks the broker's certificate."""
    wrong_ca = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.rogue.certificate),
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": "bob-secret",
    }
    # The sync client connects as it starts: the refusal comes out of the constructor.
    with pytest.raises(NoBrokersAvailableError, match="CERTIFICATE_VERIFY_FAILED"):
        PartitaConsumer(f"127.0.0.1:{tls_broker.ports['SASL_SSL']}", security=wrong_ca)
