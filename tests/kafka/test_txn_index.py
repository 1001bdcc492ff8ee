"""The ``.txnindex`` files (#29) beside partita's segments are Kafka's: the same librdkafka
transactions (commit, abort, commit, abort) against partita and Apache Kafka in the same
run, and Kafka's own ``DumpLogSegments`` reads both brokers' files to the same entries
(first offset, marker offset, last stable offset; only the producer ids differ)."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import KafkaCluster, run_tool
from tests.kafka.same_run import topic_on_each

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

ENTRY = re.compile(
    r"version: 0 producerId: (\d+) firstOffset: (\d+) lastOffset: (\d+) lastStableOffset: (\d+)"
)


def transactions(bootstrap: str, topic: str) -> None:
    """Commit 3, abort 2, commit 1, abort 1 (each aborted value acknowledged first)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"txi-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(30)
    for count, commit in ((3, True), (2, False), (1, True), (1, False)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, f"{commit}-{i}".encode(), partition=0)
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def settled(bootstrap: str, topic: str) -> None:
    """Until the last marker is written: the last stable offset reaches the end."""
    ends = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": "txi", "isolation.level": isolation}
            )
            ends[isolation] = consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
            consumer.close()
        if ends["read_committed"] == ends["read_uncommitted"] == 11:
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic}: ends {ends}, not 11 and 11")


def dumped(directory: Path) -> list[tuple[int, int, int, int]]:
    entries = []
    for path in sorted(directory.glob("*.txnindex")):
        out = run_tool("org.apache.kafka.tools.DumpLogSegments", "--files", str(path)).check()
        entries += [tuple(int(g) for g in m.groups()) for m in ENTRY.finditer(out.stdout)]
    return entries  # type: ignore[return-value]


def test_txnindex_files_read_by_kafkas_dump_log_match_kafkas_own(
    partita: BrokerProcess, kafka: KafkaCluster
) -> None:
    found = {}
    for name, bootstrap, topic, directory in topic_on_each(partita, kafka, "txi"):
        transactions(bootstrap, topic)
        settled(bootstrap, topic)
        found[name] = dumped(directory)
    # Offsets: 0-2 committed, 3 COMMIT; 4-5 aborted, 6 ABORT; 7, 8 COMMIT; 9 aborted,
    # 10 ABORT. One producer id per broker.
    assert [e[1:] for e in found["partita"]] == [(4, 6, 7), (9, 10, 11)], found
    assert [e[1:] for e in found["partita"]] == [e[1:] for e in found["kafka"]], found
    assert len({e[0] for e in found["partita"]}) == 1
