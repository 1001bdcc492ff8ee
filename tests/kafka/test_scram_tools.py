"""SCRAM users through Kafka's own tool: ``kafka-configs --entity-type users`` adds,
describes and deletes a user on a partita broker's SASL listener (logged in as a PLAIN
admin with ``--command-config``) exactly as it does on Kafka, and the user then logs in
to partita with SCRAM-SHA-256."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.conftest import BrokerProcess
from tests.integration.test_sasl import SETTINGS, auth_errors, client_config
from tests.kafka.real_kafka import KafkaCluster, run_tool

pytestmark = pytest.mark.kafka

ADMIN_CONFIG = (
    "security.protocol=SASL_PLAINTEXT\n"
    "sasl.mechanism=PLAIN\n"
    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret";\n'
)


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path / "data", SETTINGS)
    broker.start()
    yield broker
    broker.close()


def test_kafka_configs_manages_scram_users_as_on_kafka(
    secured: BrokerProcess, kafka: KafkaCluster, tmp_path: Path
) -> None:
    admin = tmp_path / "admin.properties"
    admin.write_text(ADMIN_CONFIG)
    on_partita = ["--command-config", str(admin)]
    user = ["--entity-type", "users", "--entity-name", "dave"]
    add = ["--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=dave-secret]"]
    outputs = {}
    for target, bootstrap, extra in (
        ("partita", secured.bootstrap, on_partita),
        ("kafka", kafka.bootstrap, []),
    ):
        added = run_tool("configs", *add, *user, *extra, bootstrap=bootstrap).check()
        described = run_tool("configs", "--describe", *user, *extra, bootstrap=bootstrap).check()
        outputs[target] = (added.stdout, described.stdout)
    assert outputs["partita"] == outputs["kafka"]
    assert "SCRAM-SHA-256=iterations=8192" in outputs["partita"][1]

    dave = client_config(secured, "dave", "dave-secret", "SCRAM-SHA-256")
    producer = Producer(dave)
    producer.produce("__dave_can_write", value=b"x")  # auto-created
    assert producer.flush(15) == 0

    delete = ["--alter", "--delete-config", "SCRAM-SHA-256"]
    run_tool("configs", *delete, *user, *on_partita, bootstrap=secured.bootstrap).check()
    gone = auth_errors(dave)
    assert any("Invalid user credentials" in e for e in gone), gone


def test_kafka_configs_manages_client_quotas_as_on_kafka(
    secured: BrokerProcess, kafka: KafkaCluster, tmp_path: Path
) -> None:
    admin = tmp_path / "admin.properties"
    admin.write_text(ADMIN_CONFIG)
    steps = [
        ["--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152",
         "--entity-type", "users", "--entity-name", "erin"],
        ["--alter", "--add-config", "request_percentage=50",
         "--entity-type", "users", "--entity-name", "erin", "--entity-type", "clients",
         "--entity-name", "etl"],
        ["--alter", "--add-config", "consumer_byte_rate=4096", "--entity-type", "clients",
         "--entity-default"],
        ["--describe", "--entity-type", "users", "--entity-name", "erin"],
        ["--describe", "--entity-type", "users", "--entity-name", "erin", "--entity-type",
         "clients", "--entity-name", "etl"],
        ["--describe", "--entity-type", "clients", "--entity-default"],
        ["--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "users",
         "--entity-name", "erin"],
        ["--describe", "--entity-type", "users", "--entity-name", "erin"],
    ]  # fmt: skip
    outputs = {}
    for target, bootstrap, extra in (
        ("partita", secured.bootstrap, ["--command-config", str(admin)]),
        ("kafka", kafka.bootstrap, []),
    ):
        outputs[target] = [
            run_tool("configs", *step, *extra, bootstrap=bootstrap).check().stdout for step in steps
        ]
    for step, ours, theirs in zip(steps, outputs["partita"], outputs["kafka"], strict=True):
        assert ours == theirs, step
    assert "producer_byte_rate=1048576.0" in outputs["partita"][3]
