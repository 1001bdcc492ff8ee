"""Transactions through Kafka's own tool (#29): ``kafka-transactions`` lists and
describes a hanging transaction on a partita broker, shows the producer holding a
partition's last stable offset, and aborts it; read_committed readers then move on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import run_tool

pytestmark = pytest.mark.kafka
TOPIC = "ledger"


@pytest.fixture
def hanging(kafka_jars: None, tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker with a transaction left open on partition 0 (its producer went quiet)."""
    broker = BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ledger-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(TOPIC, value=f"pending-{i}", partition=0)
    producer.flush(30)
    yield broker
    del producer
    broker.close()


def _stable_end(broker: BrokerProcess) -> int:
    settings = {"bootstrap.servers": broker.bootstrap, "group.id": "x"}
    consumer = Consumer({**settings, "isolation.level": "read_committed"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), 10)[1])
    finally:
        consumer.close()


def test_kafka_transactions_finds_and_aborts_a_hanging_transaction(hanging: BrokerProcess) -> None:
    listed = run_tool("transactions", "list", bootstrap=hanging.bootstrap).check()
    assert "ledger-tx" in listed.stdout and "Ongoing" in listed.stdout, listed.stdout

    described = run_tool(
        "transactions", "describe", "--transactional-id", "ledger-tx", bootstrap=hanging.bootstrap
    ).check()
    assert "Ongoing" in described.stdout and f"{TOPIC}-0" in described.stdout, described.stdout

    producers = run_tool(
        "transactions", "describe-producers", "--topic", TOPIC, "--partition", "0",
        bootstrap=hanging.bootstrap,
    ).check()  # fmt: skip
    # ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence LastTimestamp
    # CurrentTransactionStartOffset: the open transaction starts at offset 0.
    rows = [line.split() for line in producers.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 1 and rows[0][-1] == "0", producers.stdout
    assert _stable_end(hanging) == 0

    aborted = run_tool(
        "transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
        bootstrap=hanging.bootstrap,
    ).check()  # fmt: skip
    assert aborted.returncode == 0
    deadline = time.monotonic() + 10
    while _stable_end(hanging) < 6:  # five records and the ABORT marker
        assert time.monotonic() < deadline, "the LSO did not move after the abort"
        time.sleep(0.2)
