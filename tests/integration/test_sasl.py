"""SASL on a broker's listener (#28, first piece), with real clients.

- SASL_PLAINTEXT with PLAIN (users from the listener's JAAS config): librdkafka and kcat
  produce and consume; a wrong password is SASL_AUTHENTICATION_FAILED; a client that does
  not authenticate is cut off at its first request; the broker goes on serving.
- SCRAM-SHA-256/512 users made with AlterUserScramCredentials (the admin client sends a
  salted password, never the password), listed by DescribeUserScramCredentials, log in
  with librdkafka and kafka-python; a wrong password fails; PLAIN does not know them.
- A failed login is answered only after connection.failed.authentication.delay.ms, and
  then the connection closes.
- A cluster member cannot yet serve a SASL listener: one clear line, exit 1.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tests.integration.conftest import BrokerProcess
from tests.integration.test_bad_input import encode, expect_closed, recv_frame, roundtrip

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret";'
)
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "connection.failed.authentication.delay.ms": "400",
}


@pytest.fixture
def sasl_broker(broker_factory: type[BrokerProcess]) -> Iterator[BrokerProcess]:
    broker = broker_factory(SETTINGS)
    broker.start()
    yield broker


def client_config(
    broker: BrokerProcess, user: str, password: str, mechanism: str = "PLAIN"
) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def consume(config: dict[str, Any], topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": "sasl-tests", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    return values


def auth_errors(config: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    producer = Producer({**config, "error_cb": lambda e: errors.append(str(e))})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


def test_plain_logs_in_and_everyone_else_is_cut_off(sasl_broker: BrokerProcess) -> None:
    alice = client_config(sasl_broker, "alice", "alice-secret")
    admin = AdminClient(alice)  # kept: its futures die with it
    for future in admin.create_topics([NewTopic("orders", 1, 1)]).values():
        future.result(timeout=15)
    producer = Producer(alice)
    for i in range(5):
        producer.produce("orders", value=f"v{i}".encode())
    assert producer.flush(15) == 0
    assert consume(alice, "orders", 5) == [f"v{i}".encode() for i in range(5)]

    wrong = auth_errors(client_config(sasl_broker, "alice", "nope"))
    assert any("Invalid username or password" in e for e in wrong), wrong

    # No SASL at all: the first request (Metadata) closes the connection.
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        sock.sendall(encode(MetadataRequest[1](topics=None), 1))
        expect_closed(sock)
    assert "before it authenticated" in sasl_broker.logs()

    kcat = subprocess.run(
        ["kcat", "-b", sasl_broker.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
         "-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=admin",
         "-X", "sasl.password=admin-secret", "-C", "-t", "orders", "-e", "-q"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert kcat.returncode == 0, kcat.stderr
    assert kcat.stdout.split() == [f"v{i}" for i in range(5)]
    assert consume(alice, "orders", 5)  # the broker went on serving


def test_scram_users_are_made_by_the_admin_api_and_log_in(sasl_broker: BrokerProcess) -> None:
    admin = AdminClient(client_config(sasl_broker, "admin", "admin-secret"))
    for future in admin.create_topics([NewTopic("events", 1, 1)]).values():
        future.result(timeout=15)
    upserts = [
        UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"bob-secret"
        ),
        UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-secret"
        ),
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        assert future.result(timeout=15) is None
    described = admin.describe_user_scram_credentials(["bob"])
    bob = described["bob"].result(timeout=15)
    assert [(i.mechanism, i.iterations) for i in bob.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]

    bob_config = client_config(sasl_broker, "bob", "bob-secret", "SCRAM-SHA-512")
    producer = Producer(bob_config)
    producer.produce("events", value=b"from-bob")
    assert producer.flush(15) == 0

    from kafka import KafkaConsumer  # noqa: PLC0415 - kafka-python's own SCRAM client

    consumer = KafkaConsumer(
        bootstrap_servers=sasl_broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="carol",
        sasl_plain_password="carol-secret",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    consumer.assign([__import__("kafka").TopicPartition("events", 0)])
    assert [m.value for m in consumer][:1] == [b"from-bob"]
    consumer.close()

    wrong = auth_errors(client_config(sasl_broker, "bob", "guess", "SCRAM-SHA-512"))
    assert any("Invalid client credentials" in e for e in wrong), wrong
    unknown = auth_errors(client_config(sasl_broker, "mallory", "x", "SCRAM-SHA-256"))
    assert any("Invalid user credentials" in e for e in unknown), unknown
    # PLAIN checks only the JAAS users, as Kafka's: a SCRAM user cannot log in with it.
    plain_bob = auth_errors(client_config(sasl_broker, "bob", "bob-secret"))
    assert any("Invalid username or password" in e for e in plain_bob), plain_bob
    assert "bob-secret" not in (sasl_broker.data_dir / "partita-metadata-kv.json").read_text()


def test_a_failed_login_is_answered_late_then_the_connection_closes(
    sasl_broker: BrokerProcess,
) -> None:
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        shake = roundtrip(
            sock, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse, 1
        )
        assert shake.error_code == 0 and "SCRAM-SHA-512" in shake.mechanisms
        started = time.monotonic()
        answer = roundtrip(
            sock,
            SaslAuthenticateRequest[1](auth_bytes=b"\0alice\0wrong"),
            SaslAuthenticateResponse,
            2,
        )
        assert time.monotonic() - started >= 0.4
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        expect_closed(sock)
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        shake = roundtrip(
            sock, SaslHandshakeRequest[1](mechanism="GSSAPI"), SaslHandshakeResponse, 1
        )
        assert shake.error_code == 33  # UNSUPPORTED_SASL_MECHANISM


def test_a_cluster_member_needs_its_own_login_on_a_sasl_listener(tmp_path: Any) -> None:
    """Followers log in to their leaders on the inter-broker listener: without a mechanism
    for it, or without the broker's own username and password, one line and exit 1."""
    import sys  # noqa: PLC0415

    base = [
        sys.executable, "-m", "partita.cli.main", "broker", "--data-dir", str(tmp_path / "d"),
        "--metadata", "etcd://127.0.0.1:1/x", "--set", "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "--set", "sasl.enabled.mechanisms=PLAIN",
    ]  # fmt: skip
    for extra, says in (
        ([], "sasl.mechanism.inter.broker.protocol=GSSAPI"),
        (["--set", "sasl.mechanism.inter.broker.protocol=PLAIN"], "the broker's own username"),
    ):
        result = subprocess.run(
            base + extra, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().count("\n") == 0, result.stderr
        assert says in result.stderr


def test_login_framing_and_what_may_come_before_it(sasl_broker: BrokerProcess) -> None:
    # v0 handshake: the tokens follow bare, each answered bare (Kafka's old framing).
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        shake = roundtrip(
            sock, SaslHandshakeRequest[0](mechanism="PLAIN"), SaslHandshakeResponse, 1
        )
        assert shake.error_code == 0
        token = b"\0alice\0alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert recv_frame(sock) == b""  # PLAIN's empty answer: logged in
        metadata = roundtrip(sock, MetadataRequest[1](topics=None), MetadataResponse, 2)
        assert metadata.brokers
        # Sessions do not expire here (connections.max.reauth.ms=0): no re-authentication.
        again = roundtrip(
            sock, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse, 3
        )
        assert again.error_code == 34  # ILLEGAL_SASL_STATE
    # A big frame before login is refused before it is decoded.
    with socket.create_connection(("127.0.0.1", sasl_broker.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 600_000) + b"\0" * 600_000)
        expect_closed(sock)
    assert "before authentication" in sasl_broker.logs()


def test_a_plaintext_listener_answers_sasl_with_illegal_state(broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        shake = roundtrip(
            sock, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse, 1
        )
        assert shake.error_code == 34
        metadata = roundtrip(sock, MetadataRequest[1](topics=None), MetadataResponse, 2)
        assert metadata.brokers  # still served: PLAINTEXT needs no login


def test_passwords_never_leave_the_broker(sasl_broker: BrokerProcess) -> None:
    """The JAAS config holds users' passwords: DescribeConfigs reports it as sensitive
    with no value (as Kafka does), and no log line carries a password."""
    from confluent_kafka.admin import ConfigResource  # noqa: PLC0415

    admin = AdminClient(client_config(sasl_broker, "admin", "admin-secret"))
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=15)
    jaas = configs["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.is_sensitive and jaas.value is None
    assert not [c.name for c in configs.values() if c.value and "secret" in c.value]
    auth_errors(client_config(sasl_broker, "alice", "wrong-secret"))  # a failed login
    assert "secret" not in sasl_broker.logs()


def test_a_session_expires_and_reauthentication_keeps_the_principal(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory({**SETTINGS, "connections.max.reauth.ms": "1500"}, name="reauth")
    broker.start()

    def login(sock: socket.socket, token: bytes, first: int) -> Any:
        shake = SaslHandshakeRequest[1](mechanism="PLAIN")
        assert roundtrip(sock, shake, SaslHandshakeResponse, first).error_code == 0
        request = SaslAuthenticateRequest[1](auth_bytes=token)
        return roundtrip(sock, request, SaslAuthenticateResponse, first + 1)

    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        answer = login(sock, b"\0alice\0alice-secret", 1)
        assert answer.error_code == 0 and 0 < answer.session_lifetime_ms <= 1500
        assert roundtrip(sock, MetadataRequest[1](topics=None), MetadataResponse, 3).brokers
        again = login(sock, b"\0alice\0alice-secret", 4)  # re-authenticated in time
        assert again.error_code == 0
        time.sleep(1.6)  # past the session: the next request ends the connection
        sock.sendall(encode(MetadataRequest[1](topics=None), 6))
        expect_closed(sock)
    assert "its session expired" in broker.logs()

    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        assert login(sock, b"\0alice\0alice-secret", 1).error_code == 0
        switched = login(sock, b"\0admin\0admin-secret", 3)  # valid, but another principal
        assert switched.error_code == 58
        expect_closed(sock)


def test_a_bad_security_setting_is_one_line(tmp_path: Any) -> None:
    import sys  # noqa: PLC0415

    tls = ["listeners=SSL://127.0.0.1:0", "ssl.keystore.location=/etc/hostname"]
    for settings, says in (
        (["connections.max.reauth.ms=soon"], "connections.max.reauth.ms='soon' is not an integer"),
        (["sasl.enabled.mechanisms=GSSAPI"], "GSSAPI not supported"),
        (["listeners=SSL://127.0.0.1:0"], "a TLS listener needs a keystore"),
        ([*tls, "ssl.keystore.type=JKS"], "convert a JKS one with keytool"),
        ([*tls, "ssl.keystore.type=PEM"], "ssl.keystore.location=/etc/hostname"),
        (
            ["listeners=A://127.0.0.1:0,A://127.0.0.1:0", "listener.security.protocol.map=A:SSL"],
            "given twice",
        ),
        (
            ["inter.broker.listener.name=NOPE"],
            "inter.broker.listener.name=NOPE is not in listeners",
        ),
        ([*tls, "ssl.principal.mapping.rules=RULE:oops"], "ssl.principal.mapping.rules: cannot"),
    ):
        args = [
            "--set",
            "listeners=SASL_PLAINTEXT://127.0.0.1:0",
            "--set",
            "sasl.enabled.mechanisms=PLAIN",
        ]
        for setting in settings:
            args += ["--set", setting]
        result = subprocess.run(
            [sys.executable, "-m", "partita.cli.main", "broker", "--data-dir",
             str(tmp_path / "d"), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 1, (settings, result.stderr)
        assert result.stderr.strip().count("\n") == 0, result.stderr
        assert says in result.stderr, (settings, result.stderr)
