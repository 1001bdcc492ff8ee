"""Subscriptions to topics that do not exist, or hold nothing: a batch query fails as it is
planned, naming the topic; a streaming query waits for the topic, as Spark's Kafka source
does; an empty result is empty. Never an assertion in an executor."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer as KafkaProducer

from tests.integration.conftest import BrokerProcess
from tests.spark.test_connector import create_topic, read


def test_a_batch_read_of_a_missing_topic_fails_at_planning_naming_it(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    create_topic(spark_broker, "present", 1)
    with pytest.raises(Exception, match="topic 'nosuch' does not exist") as failure:
        # Planning only (no task runs): the question is asked on the driver.
        read(spark, spark_broker, subscribe="present,nosuch").rdd.getNumPartitions()
    assert "AssertionError" not in str(failure.value)
    assert "'present'" not in str(failure.value)


def test_batch_reads_that_find_nothing_are_empty(spark: Any, spark_broker: BrokerProcess) -> None:
    create_topic(spark_broker, "empty", 2)
    assert read(spark, spark_broker, subscribe="empty").collect() == []
    assert read(spark, spark_broker, subscribePattern="no-topic-is-named-like-this.*").count() == 0


def test_a_stream_waits_for_its_topic_and_reads_it_once_created(
    spark: Any, spark_broker: BrokerProcess, checkpoint: str
) -> None:
    seen: list[Any] = []
    query = (
        spark.readStream.format("partita")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", "later")
        .load()
        .writeStream.foreachBatch(lambda df, _batch_id: seen.extend(df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(query.recentProgress) < 3:  # a few triggers planned without the topic
            assert query.exception() is None and query.isActive
            assert time.monotonic() < deadline, "the query made no progress"
            time.sleep(0.2)
        assert seen == []

        create_topic(spark_broker, "later", 2)
        producer = KafkaProducer({"bootstrap.servers": spark_broker.bootstrap})
        for n in range(10):
            producer.produce("later", value=f"v{n}", partition=n % 2)
        assert producer.flush(30) == 0

        deadline = time.monotonic() + 90
        while len(seen) < 10:
            assert query.exception() is None and query.isActive
            assert time.monotonic() < deadline, f"read {len(seen)} of 10 records"
            time.sleep(0.2)
    finally:
        query.stop()
    # A new topic's partitions are read from their start, like any partition that appears.
    assert sorted(r.value for r in seen) == sorted(f"v{n}".encode() for n in range(10))
