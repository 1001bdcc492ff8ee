"""``partita txn`` and ``partita consume --isolation-level`` against a real broker holding
a transaction its producer (librdkafka) left open: the tools find it, show where it holds
read_committed readers back, and abort it; bad input is one line and exit 1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.integration.test_client_cli import partita

TOPIC = "ledger"
TID = "ledger-writer"


@pytest.fixture
def hanging(broker_factory: type[BrokerProcess]) -> Iterator[BrokerProcess]:
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(TOPIC, value=b"before")  # offset 0, no transaction
    assert plain.flush(30) == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TID})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(TOPIC, value=f"pending-{i}")  # offsets 1..5, left open
    assert producer.flush(30) == 0
    yield broker
    del producer


def stable_end(broker: BrokerProcess) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "x",
            "isolation.level": "read_committed",
        }
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), 10)[1])
    finally:
        consumer.close()


def test_an_open_transaction_is_found_shown_and_aborted(hanging: BrokerProcess) -> None:
    bootstrap = hanging.bootstrap
    listed = partita("txn", "list", bootstrap=bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert TID in listed.stdout and "Ongoing" in listed.stdout

    described = partita("txn", "describe", TID, bootstrap=bootstrap)
    assert described.returncode == 0, described.stderr
    assert "Ongoing" in described.stdout and f"{TOPIC}-0" in described.stdout

    shown = partita("txn", "producers", TOPIC, "-p", "0", bootstrap=bootstrap)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split("│") for line in shown.stdout.splitlines() if "│" in line]
    assert any(cells[-2].strip() == "1" for cells in rows), shown.stdout  # open since 1

    committed = partita(
        "consume", TOPIC, "--isolation-level", "read_committed", "--format", "value",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert committed.returncode == 0, committed.stderr
    assert committed.stdout.split() == ["before"]  # held back at the open transaction
    everything = partita("consume", TOPIC, "--format", "value", bootstrap=bootstrap)
    assert everything.stdout.split() == ["before"] + [f"pending-{i}" for i in range(5)]

    wrong = partita(
        "txn", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "3",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert wrong.returncode == 1
    assert wrong.stderr.count("\n") == 1, wrong.stderr
    assert "no transaction is open on ledger-0 at offset 3 (open ones start at 1)" in wrong.stderr

    assert stable_end(hanging) == 1
    aborted = partita(
        "txn", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "1",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert aborted.returncode == 0, aborted.stderr
    assert "aborted producer" in aborted.stdout
    assert stable_end(hanging) == 7  # past the five records and the marker
    after = partita(
        "consume", TOPIC, "--isolation-level", "read_committed", "--format", "value",
        bootstrap=bootstrap,
    )  # fmt: skip
    assert after.stdout.split() == ["before"]  # the aborted records are never read


def test_bad_input_is_one_line(hanging: BrokerProcess) -> None:
    unknown = partita("txn", "describe", "nobody", bootstrap=hanging.bootstrap)
    assert unknown.returncode == 1
    assert unknown.stderr.count("\n") == 1, unknown.stderr
    assert "nobody" in unknown.stderr
    level = partita("consume", TOPIC, "--isolation-level", "dirty", bootstrap=hanging.bootstrap)
    assert level.returncode == 1 and level.stderr.count("\n") == 1, level.stderr
    missing = partita("txn", "producers", "no-such-topic", bootstrap=hanging.bootstrap)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing.stderr
