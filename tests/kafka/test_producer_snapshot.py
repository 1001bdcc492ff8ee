"""Producer state snapshots (#29) are Kafka's files: the same librdkafka transactions
against partita and Apache Kafka in the same run, each topic rolling a segment after a
committed transaction and again in the middle of an open one, and Kafka's own
``DumpLogSegments`` reads the ``.snapshot`` files both brokers wrote at those rolls to the
same entries (only producer ids and timestamps differ)."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import KafkaCluster, run_tool
from tests.kafka.same_run import topic_on_each

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

ROLL_MS = 1000  # segment.ms: the next append after this long rolls a segment
FIELD = re.compile(r"(\w+): (\S+)")
VARYING = {"producerId", "lastTimestamp", "timestamp"}


def transactions(bootstrap: str, topic: str) -> None:
    """Commit 2 (offsets 0-1, COMMIT at 2); roll; open a transaction at 3; roll; 4; abort."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"ps-{uuid.uuid4().hex[:6]}",
         "linger.ms": 0}
    )  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"a", partition=0)
    producer.produce(topic, b"b", partition=0)
    producer.flush(30)
    producer.commit_transaction(30)
    producer.begin_transaction()
    time.sleep(ROLL_MS * 1.5 / 1000)
    producer.produce(topic, b"c", partition=0)  # rolls at 3: the committed state
    producer.flush(30)
    time.sleep(ROLL_MS * 1.5 / 1000)
    producer.produce(topic, b"d", partition=0)  # rolls at 4: the transaction open at 3
    producer.flush(30)
    producer.abort_transaction(30)


def dumped(directory: Path) -> dict[int, list[dict[str, str]]]:
    """Each snapshot's entries as DumpLogSegments prints them, less what differs by
    broker (the producer id, the time)."""
    found: dict[int, list[dict[str, str]]] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(list(directory.glob("*.snapshot"))) < 2:
        time.sleep(0.2)  # Kafka writes a roll's snapshot off the append path
    for path in sorted(directory.glob("*.snapshot")):
        out = run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", str(path)).check()
        found[int(path.stem)] = [
            {k: v for k, v in FIELD.findall(line) if k not in VARYING}
            for line in out.stdout.splitlines()
            if "producerId" in line
        ]
    return found


def test_snapshots_read_by_kafkas_dump_log_match_kafkas_own(
    partita: BrokerProcess, kafka: KafkaCluster
) -> None:
    found = {}
    config = {"segment.ms": str(ROLL_MS)}
    for name, bootstrap, topic, directory in topic_on_each(partita, kafka, "ps", config):
        transactions(bootstrap, topic)
        found[name] = dumped(directory)
    assert sorted(found["partita"]) == [3, 4], found
    assert found["partita"] == found["kafka"], found
