"""Fixtures for running Apache Kafka's own software against partita (and against Kafka).

One real Kafka and one partita broker per test module, both as real processes on
127.0.0.1; Kafka's jars come from scripts/kafka_jars.sh. Without them (no Maven, no
network) every test here fails with the reason, never skips.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import (
    GROUP_SETTINGS,
    HERE,
    JARS_ROOT,
    JavaProgram,
    KafkaCluster,
    KafkaUnavailableError,
    classpath,
    ensure_jars,
    real_kafka,
)


@pytest.fixture(scope="session")
def kafka_jars() -> None:
    try:
        ensure_jars()
    except KafkaUnavailableError as error:
        pytest.fail(f"Apache Kafka is not available: {error}", pytrace=False)


@pytest.fixture(scope="module")
def kafka(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A single-node real Kafka (KRaft combined mode), node id 0 as partita's broker."""
    workdir = tmp_path_factory.mktemp("kafka")
    with real_kafka(workdir, settings=GROUP_SETTINGS, first_node_id=0) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def partita(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A partita broker process, with the same group settings as :func:`kafka`."""
    process = BrokerProcess(tmp_path_factory.mktemp("partita") / "data", dict(GROUP_SETTINGS))
    process.start()
    yield process
    process.close()


@pytest.fixture(scope="session")
def client_check(kafka_jars: None) -> JavaProgram:
    """Compile the Java client program once per source version (kept in var/kafka-jars)."""
    source = HERE / "java" / "ClientCheck.java"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    classes = JARS_ROOT / "classes" / digest
    if not (classes / "ClientCheck.class").exists():
        if shutil.which("javac") is None:
            pytest.fail("javac is not installed: run scripts/setup.sh (openjdk-17-jdk-headless)")
        building = classes.with_name(digest + ".tmp")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        result = subprocess.run(
            ["javac", "-d", str(building), "-cp", classpath(), str(source)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"javac failed:\n{result.stdout}{result.stderr}")
        shutil.rmtree(classes, ignore_errors=True)
        building.rename(classes)
    return JavaProgram(classes)
