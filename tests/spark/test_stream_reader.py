"""The stream reader's planning against a real broker, driven the way Spark drives it
(initialOffset, latestOffset with a read limit, partitions), without a Spark session."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from partita.client.sync import Admin, Producer
from partita.spark.broker_io import DataLossError
from partita.spark.options import parse_source_options
from partita.spark.source import PartitaStreamReader, RangePartition
from tests.integration.conftest import BrokerProcess


def produce(broker: BrokerProcess, topic: str, per_partition: dict[int, int]) -> None:
    with Producer(broker.bootstrap) as producer:
        futures = [
            producer.send(topic, b"v", partition=partition)
            for partition, count in per_partition.items()
            for _ in range(count)
        ]
        producer.flush()
    for future in futures:
        future.result(30)


def reader(broker: BrokerProcess, **options: str) -> PartitaStreamReader:
    parsed = parse_source_options(
        {"kafka.bootstrap.servers": broker.bootstrap, **options}, streaming=True
    )
    return PartitaStreamReader(parsed)


def sizes(stream: PartitaStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    parts = stream.partitions(start, end)
    assert all(isinstance(p, RangePartition) for p in parts)
    return [p.offset_range.size for p in parts]  # type: ignore[attr-defined]


def test_rate_limits_min_rows_with_a_delay_and_available_now(spark_broker: BrokerProcess) -> None:
    broker = spark_broker
    admin = Admin(broker.bootstrap)
    try:
        admin.create_topic("rl", partitions=2)
    finally:
        admin.close()
    produce(broker, "rl", {0: 90, 1: 10})

    stream = reader(
        broker,
        subscribe="rl",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="50",
        minOffsetsPerTrigger="20",
        maxTriggerDelay="1s",
    )
    start = stream.initialOffset()
    assert start == {"rl": {"0": 0, "1": 0}}
    assert stream.initialOffset() == start  # asked twice, same answer
    assert isinstance(stream.getDefaultReadLimit(), ReadMaxRows)

    # maxOffsetsPerTrigger: 50 shared 45/5 by backlog.
    first = stream.latestOffset(start, ReadMaxRows(50))
    assert first == {"rl": {"0": 45, "1": 5}}
    assert sorted(sizes(stream, start, first)) == [5, 45]
    # Spark overriding the limit (Trigger.Once) reads everything.
    assert stream.latestOffset(start, ReadAllAvailable()) == {"rl": {"0": 90, "1": 10}}

    # minOffsetsPerTrigger: 10 waiting records are not enough ... until maxTriggerDelay.
    almost = {"rl": {"0": 85, "1": 5}}
    assert stream.latestOffset(almost, ReadMinRows(20)) == almost
    time.sleep(1.1)
    assert stream.latestOffset(almost, ReadMinRows(20)) == {"rl": {"0": 90, "1": 10}}

    # AvailableNow: records arriving after the query started are left for the next run,
    # and a partition added meanwhile is not read either.
    stream.prepareForTriggerAvailableNow()
    produce(broker, "rl", {0: 30})
    end = {"rl": {"0": 90, "1": 10}}
    assert stream.latestOffset(end, ReadMaxRows(50)) == end
    assert stream.partitions(end, end) == []


def test_new_partitions_start_at_earliest_and_lost_ones_fail(spark_broker: BrokerProcess) -> None:
    broker = spark_broker
    admin = Admin(broker.bootstrap)
    try:
        admin.create_topic("grow", partitions=1)
        produce(broker, "grow", {0: 5})
        stream = reader(broker, subscribe="grow")  # streaming default: latest
        start = stream.initialOffset()
        assert start == {"grow": {"0": 5}}
        admin.add_partitions("grow", 2)
        produce(broker, "grow", {0: 2, 1: 3})
        end = stream.latestOffset(start, ReadAllAvailable())
        assert end == {"grow": {"0": 7, "1": 3}}
        ranges = sorted(
            (p.offset_range.partition, p.offset_range.start, p.offset_range.end)  # type: ignore[attr-defined]
            for p in stream.partitions(start, end)
        )
        assert ranges == [(0, 5, 7), (1, 0, 3)]

        admin.delete_records("grow", {0: 6})
        lossy = {"grow": {"0": 2, "1": 3}}
        with pytest.raises(DataLossError, match="data may have been lost"):
            stream.partitions(lossy, end)
        tolerant = reader(broker, subscribe="grow", failOnDataLoss="false")
        kept = tolerant.partitions(lossy, end)
        assert sorted(
            (p.offset_range.partition, p.offset_range.start)  # type: ignore[attr-defined]
            for p in kept
        ) == [(0, 6)]
    finally:
        admin.close()
