"""Spark over SASL_SSL (#28): Spark's JVM Kafka connector and format("partita") read and
write a partita broker whose only listener is SASL_SSL, logged in with SCRAM-SHA-512,
given exactly the options a Spark job for a secured Kafka takes (kafka.security.protocol,
kafka.sasl.mechanism, kafka.sasl.jaas.config, kafka.ssl.truststore.*): the same rows as
the producer acknowledged, through every read and write of tests/kafka/spark_kafka_job.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partita.client.admin import AsyncAdmin
from partita.client.security_admin import upsert_scram_user
from partita.security.certificates import CertificateAuthority
from tests.integration.conftest import BrokerProcess
from tests.kafka.test_spark_kafka import _content, produce_source, run_job, without_sink_headers

pytestmark = pytest.mark.kafka

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)


@pytest.fixture(scope="module")
def secured(
    kafka_jars: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, Path]]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority.create()
    ca_file = ca.write(certs)
    issued = ca.issue(certs, "broker", hosts=("127.0.0.1", "localhost"))
    broker = BrokerProcess(
        tmp_path_factory.mktemp("partita-secure") / "data",
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(issued.keystore),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        },
    )
    broker.start()
    admin = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
        "ssl.ca.location": str(ca_file),
    }

    async def add_user() -> None:
        async with AsyncAdmin(broker.bootstrap, security=admin) as client:
            await upsert_scram_user(client, "spark", "spark-secret", "SCRAM-SHA-512")

    asyncio.run(add_user())
    yield broker, ca_file
    broker.close()


def test_spark_reads_and_writes_over_sasl_ssl(
    secured: tuple[BrokerProcess, Path], tmp_path: Path
) -> None:
    broker, ca_file = secured
    client: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "spark",
        "sasl.password": "spark-secret",
        "ssl.ca.location": str(ca_file),
    }
    produced = produce_source(client)
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="spark" password="spark-secret";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(ca_file),
    }
    job = run_job(broker.bootstrap, tmp_path, options)
    for read in ("batch-kafka", "batch-partita", "stream-kafka", "stream-partita"):
        assert job[read][0] == produced, read
    for written in ("written-batch", "written-stream"):
        assert _content(job[written][0]) == _content(produced), written
    ours = without_sink_headers(job["written-partita"][0])
    assert _content(ours) == _content(produced)
