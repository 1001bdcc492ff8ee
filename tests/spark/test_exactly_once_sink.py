"""The sink's exactly-once mode (#29) in a real Spark session against a real broker.

- A streaming query whose task is killed in the middle of a micro-batch (its Python
  worker exits after the sink sent rows in an open transaction) fails; restarted from its
  checkpoint, it writes every input record once as read_committed readers see it, while
  read_uncommitted readers also see the killed attempt's aborted rows.
- A micro-batch re-run after its transactions committed (Spark's own commit of the batch
  lost, as when the driver dies between the two) writes nothing again.
- Batch writes with the same transactionalIdPrefix and writeVersion write once; a new
  version writes again.
- The source's kafka.isolation.level: read_committed leaves aborted records out.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def read_values(spark: Any, broker: BrokerProcess, topic: str, isolation: str) -> Counter[bytes]:
    rows = (
        spark.read.format("partita")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .load()
        .select("value")
        .collect()
    )
    return Counter(bytes(r.value) for r in rows)


ROWS = 20_000  # two micro-batches of 10,000, a task per source partition


def _value(i: int) -> bytes:
    # 1 kB: Spark's Python runner buffers 64 kB before its worker sees anything, so small
    # rows would never reach the sink before the kill.
    return f"r{i}-".encode().ljust(1000, b".")


def _killed_once(flag: str) -> Any:
    """A mapInArrow function that passes rows through; the task that claims ``flag``
    hands on all its rows, waits for the sink to send them, and kills its worker before
    the task can end (so the sink never sees the end of its input)."""

    def passing(batches: Any) -> Any:
        yield from batches
        try:
            os.rename(flag, flag + ".claimed")
        except FileNotFoundError:
            return  # another task's, or no kill asked
        time.sleep(3)  # the sink writes what it was handed, in its open transaction
        os._exit(17)

    return passing


def _start(
    spark: Any, broker: BrokerProcess, source: str, sink: str, checkpoint: Path, flag: str
) -> Any:
    return (
        spark.readStream.format("partita")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10000")
        .load()
        .select("value")
        .mapInArrow(_killed_once(flag), "value binary")
        .writeStream.format("partita")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_a_stream_killed_mid_batch_and_restarted_writes_each_record_once(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    source, sink = "eo-in", "eo-out"
    create_topic(spark_broker, source, 2)
    create_topic(spark_broker, sink, 3)
    producer = Producer({"bootstrap.servers": spark_broker.bootstrap, "linger.ms": 5})
    for i in range(ROWS):
        producer.produce(source, value=_value(i), partition=i % 2)
        producer.poll(0)
    assert producer.flush(30) == 0
    expected = Counter(_value(i) for i in range(ROWS))
    checkpoint, flag = tmp_path / "checkpoint", str(tmp_path / "kill-a-task")
    Path(flag).touch()
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    # Small Arrow batches: 50 per task, more than the sink lets wait for their
    # acknowledgement (32), so it sends rows, in the open transaction, before the kill.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        killed = _start(spark, spark_broker, source, sink, checkpoint, flag)
        with pytest.raises(Exception, match=r"(?i)worker|crash|exit"):
            killed.awaitTermination(180)
        assert Path(flag + ".claimed").exists(), "no task was killed"
        restarted = _start(spark, spark_broker, source, sink, checkpoint, flag)
        assert restarted.awaitTermination(180)
        assert restarted.exception() is None
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)

    committed = read_values(spark, spark_broker, sink, "read_committed")
    assert committed == expected
    uncommitted = read_values(spark, spark_broker, sink, "read_uncommitted")
    # The killed attempt's rows are in the log, aborted: the kill was mid-transaction.
    assert sum(uncommitted.values()) > sum(committed.values())

    # Spark's commit of the last micro-batch lost (the driver died after the sink's
    # transactions committed): the restarted query runs that batch again, and the sink
    # writes nothing again.
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    commits[-1].unlink()
    commits[-1].with_name(f".{commits[-1].name}.crc").unlink(missing_ok=True)
    again = _start(spark, spark_broker, source, sink, checkpoint, flag)
    assert again.awaitTermination(180)
    progress = [p for p in again.recentProgress if p["numInputRows"]]
    assert progress, "the lost batch was not run again"
    assert read_values(spark, spark_broker, sink, "read_committed") == expected


def test_batch_writes_with_one_version_write_once(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = "eo-batch"
    create_topic(spark_broker, topic, 2)
    data = spark.createDataFrame([(f"v{i}",) for i in range(500)], "value string").repartition(3)

    def write(version: int) -> None:
        data.write.format("partita").option(
            "kafka.bootstrap.servers", spark_broker.bootstrap
        ).option("topic", topic).option("deliveryGuarantee", "exactly-once").option(
            "transactionalIdPrefix", "nightly-report"
        ).option("writeVersion", str(version)).mode("append").save()

    write(0)
    write(0)  # the same version again: already committed, nothing written
    once = Counter(f"v{i}".encode() for i in range(500))
    assert read_values(spark, spark_broker, topic, "read_committed") == once
    write(1)
    assert read_values(spark, spark_broker, topic, "read_committed") == once + once


def test_read_committed_leaves_aborted_records_out(spark: Any, spark_broker: BrokerProcess) -> None:
    topic = "eo-mixed"
    create_topic(spark_broker, topic, 1)
    producer = Producer({"bootstrap.servers": spark_broker.bootstrap, "transactional.id": "mix"})
    producer.init_transactions(30)
    for label, commit in (("kept", True), ("dropped", False), ("also-kept", True)):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, value=f"{label}-{i}".encode())
        assert producer.flush(30) == 0  # in the log before the abort (else purged)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = read_values(spark, spark_broker, topic, "read_committed")
    assert sorted(committed) == sorted(
        f"{label}-{i}".encode() for label in ("kept", "also-kept") for i in range(50)
    )
    assert sum(read_values(spark, spark_broker, topic, "read_uncommitted").values()) == 150


def test_exactly_once_options_are_checked(spark: Any, spark_broker: BrokerProcess) -> None:
    frame = spark.createDataFrame([("x",)], "value string")

    def save(**options: str) -> None:
        writer = (
            frame.write.format("partita")
            .option("kafka.bootstrap.servers", spark_broker.bootstrap)
            .option("topic", "eo-batch")
        )
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.mode("append").save()

    with pytest.raises(Exception, match="deliveryGuarantee must be"):
        save(deliveryGuarantee="twice")
    with pytest.raises(Exception, match="needs deliveryGuarantee=exactly-once"):
        save(writeVersion="3")
    with pytest.raises(Exception, match="each task needs"):
        save(**{"kafka.transactional.id": "mine"})


def test_exactly_once_needs_the_transactional_id_acls(spark: Any, tmp_path: Path) -> None:
    """With ACLs on, alice may write the topic but the sink's transactions need their
    own grants: refused (one clear reason, no password) until WRITE on the writer's
    transactional ids and READ on its version groups are granted; then each row once."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType  # noqa: PLC0415

    from tests.integration.conftest import BrokerProcess  # noqa: PLC0415
    from tests.integration.test_acls import SETTINGS, admin_of, allow, create_acls, topics  # noqa: PLC0415
    from tests.integration.test_sasl import client_config  # noqa: PLC0415

    broker = BrokerProcess(tmp_path / "data", SETTINGS)
    broker.start()
    try:
        topic, writer = "eo-secure", "secure-report"
        topics(broker, topic)  # one record, written by admin
        admin = admin_of(broker)
        create_acls(
            admin,
            *(allow("User:alice", topic, op) for op in (
                AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ
            )),
        )  # fmt: skip
        frame = spark.createDataFrame([(f"s{i}",) for i in range(50)], "value string")

        def save() -> None:
            frame.write.format("partita").options(
                **{
                    "kafka.bootstrap.servers": broker.bootstrap,
                    "kafka.security.protocol": "SASL_PLAINTEXT",
                    "kafka.sasl.mechanism": "PLAIN",
                    "kafka.sasl.username": "alice",
                    "kafka.sasl.password": "alice-secret",
                    "topic": topic,
                    "deliveryGuarantee": "exactly-once",
                    "transactionalIdPrefix": writer,
                    "writeVersion": "0",
                }
            ).mode("append").save()

        with pytest.raises(Exception, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED") as refused:
            save()
        assert "alice-secret" not in str(refused.value)
        prefixed = ResourcePatternType.PREFIXED
        create_acls(
            admin,
            allow(
                "User:alice", writer, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, prefixed
            ),
        )
        # The version is kept as an offset of a group named like the transactional id.
        with pytest.raises(Exception, match="GROUP_AUTHORIZATION_FAILED"):
            save()
        create_acls(
            admin, allow("User:alice", writer, AclOperation.READ, ResourceType.GROUP, prefixed)
        )
        save()
        save()  # the same version again: nothing more
        consumer = Consumer(
            {
                **client_config(broker, "admin", "admin-secret"),
                "group.id": "audit",
                "isolation.level": "read_committed",
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < 51 and time.monotonic() < deadline:
            message = consumer.poll(0.25)
            if message is not None and not message.error():
                values.append(message.value())
        extra = consumer.poll(1.0)  # a value too many must show
        if extra is not None and not extra.error():
            values.append(extra.value())
        consumer.close()
        assert Counter(values) == Counter(
            [f"{topic}-record".encode()] + [f"s{i}".encode() for i in range(50)]
        )
    finally:
        broker.close()
