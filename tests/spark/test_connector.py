"""format("partita") in a real local Spark session against a real broker process.

Records are written by confluent-kafka (librdkafka) so that what Spark reads back is checked
against offsets a third-party client was acknowledged with.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from partita.client.murmur2 import partition_for_key
from partita.client.sync import Admin
from tests.integration.conftest import BrokerProcess

BASE_TS = 1_700_000_000_000

Expected = dict[tuple[int, int], tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]]


def create_topic(broker: BrokerProcess, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce(
    broker: BrokerProcess,
    topic: str,
    count: int,
    *,
    partitions: int,
    first: int = 0,
    compression: str = "none",
    only_partition: int | None = None,
) -> Expected:
    """``count`` records spread over partitions; returns what each acknowledged offset holds."""
    producer = KafkaProducer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 5}
    )
    acked: Expected = {}
    sent: dict[int, tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]] = {}

    errors: list[Any] = []

    def delivered(n: int, err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = sent[n]

    for n in range(first, first + count):
        key = None if n % 7 == 0 else f"key-{n}".encode()
        value = None if n % 11 == 0 else f"value-{n}".encode() * (1 + n % 3)
        headers = [("n", str(n).encode()), ("kind", b"even" if n % 2 == 0 else b"odd")]
        sent[n] = (key, value, BASE_TS + n, headers)
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=only_partition if only_partition is not None else n % partitions,
            timestamp=BASE_TS + n,
            headers=headers,
            on_delivery=functools.partial(delivered, n),
        )
    assert producer.flush(30) == 0
    assert not errors
    assert len(acked) == count
    return acked


def read(spark: Any, broker: BrokerProcess, **options: str) -> Any:
    reader = spark.read.format("partita").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def offsets_of(rows: list[Any]) -> set[tuple[int, int]]:
    return {(r.partition, r.offset) for r in rows}


@pytest.fixture(scope="module")
def exact(spark_broker: BrokerProcess) -> Expected:
    """Topic 'exact': 300 records over 3 partitions, half of them lz4-compressed."""
    create_topic(spark_broker, "exact", 3)
    written = produce(spark_broker, "exact", 150, partitions=3)
    written |= produce(spark_broker, "exact", 150, partitions=3, first=150, compression="lz4")
    return written


def test_batch_read_returns_every_record_exactly(
    spark: Any, spark_broker: BrokerProcess, exact: Expected
) -> None:
    df = read(spark, spark_broker, subscribe="exact", includeHeaders="true")
    assert df.rdd.getNumPartitions() == 3  # one task per topic partition
    rows = df.collect()
    assert len(rows) == len(exact)
    for row in rows:
        key, value, ts, headers = exact[(row.partition, row.offset)]
        assert row.topic == "exact"
        assert row.key == key and row.value == value
        assert int(row.timestamp.timestamp() * 1000) == ts
        assert row.timestampType == 0
        assert [(h.key, h.value) for h in row.headers] == headers
    without_headers = read(spark, spark_broker, subscribe="exact")
    assert without_headers.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]


def test_offset_ranges_and_timestamps(
    spark: Any, spark_broker: BrokerProcess, exact: Expected
) -> None:
    rows = read(
        spark,
        spark_broker,
        subscribe="exact",
        startingOffsets='{"exact":{"0":10,"1":-2,"2":60}}',
        endingOffsets='{"exact":{"0":20,"1":5,"2":-1}}',
    ).collect()
    wanted = {(0, o) for o in range(10, 20)} | {(1, o) for o in range(5)}
    wanted |= {(2, o) for o in range(60, 100)}
    assert offsets_of(rows) == wanted

    assigned = read(spark, spark_broker, assign='{"exact":[1]}').collect()
    assert offsets_of(assigned) == {(1, o) for o in range(100)}

    since = BASE_TS + 150
    by_time = read(spark, spark_broker, subscribe="exact", startingTimestamp=str(since)).collect()
    assert offsets_of(by_time) == {tp for tp, v in exact.items() if v[2] >= since}

    until = read(
        spark,
        spark_broker,
        subscribe="exact",
        endingOffsetsByTimestamp=json.dumps({"exact": dict.fromkeys("012", BASE_TS + 30)}),
    ).collect()
    assert offsets_of(until) == {tp for tp, v in exact.items() if v[2] < BASE_TS + 30}


def test_big_partitions_are_split_into_several_tasks(
    spark: Any, spark_broker: BrokerProcess, exact: Expected
) -> None:
    split = read(spark, spark_broker, subscribe="exact", maxRecordsPerPartition="30")
    assert split.rdd.getNumPartitions() == 12  # 100 records per partition -> 4 tasks each
    rows = split.collect()
    assert len(rows) == 300 and offsets_of(rows) == set(exact)

    more = read(spark, spark_broker, subscribe="exact", minPartitions="7")
    assert more.rdd.getNumPartitions() >= 6
    assert sorted(r.offset for r in more.collect()) == sorted(o for _p, o in exact)


def run_available_now(
    spark: Any, broker: BrokerProcess, checkpoint: str, **options: str
) -> list[tuple[int, list[Any]]]:
    batches: list[tuple[int, list[Any]]] = []
    reader = spark.readStream.format("partita").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(lambda df, batch_id: batches.append((batch_id, df.collect())))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    return batches


def test_streaming_rate_limited_resumes_exactly_across_a_broker_kill(
    spark: Any, spark_broker: BrokerProcess, checkpoint: str
) -> None:
    create_topic(spark_broker, "stream", 2)
    first = produce(spark_broker, "stream", 250, partitions=2)
    options = {"subscribe": "stream", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "100"}
    batches = run_available_now(spark, spark_broker, checkpoint, **options)
    sizes = [len(rows) for _id, rows in batches if rows]
    assert len(sizes) >= 3 and max(sizes) <= 100
    seen = [(r.partition, r.offset) for _id, rows in batches for r in rows]
    assert sorted(seen) == sorted(first)  # each record exactly once

    spark_broker.kill()  # kill -9, then the same data dir and port
    spark_broker.start()
    second = produce(spark_broker, "stream", 120, partitions=2, first=1000)
    admin = AdminClient({"bootstrap.servers": spark_broker.bootstrap})
    admin.create_partitions([NewPartitions("stream", 3)])["stream"].result(30)
    third = produce(spark_broker, "stream", 30, partitions=3, first=2000, only_partition=2)

    resumed = run_available_now(spark, spark_broker, checkpoint, **options)
    seen = [(r.partition, r.offset) for _id, rows in resumed for r in rows]
    assert sorted(seen) == sorted(second | third)  # new partition read from its start
    assert min(batch_id for batch_id, _rows in resumed) > max(b for b, _r in batches)


def test_write_then_read_back(spark: Any, spark_broker: BrokerProcess) -> None:
    create_topic(spark_broker, "written", 4)
    data = spark.createDataFrame(
        [
            (f"k{i}" if i % 5 else None, f"v{i}".encode(), i % 4, [(f"h{i}", b"x")])
            for i in range(200)
        ],
        "key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    data.write.mode("append").format("partita").option(
        "kafka.bootstrap.servers", spark_broker.bootstrap
    ).option("topic", "written").save()
    rows = read(spark, spark_broker, subscribe="written", includeHeaders="true").collect()
    assert len(rows) == 200
    for row in rows:
        n = int(row.value[1:])
        assert row.partition == n % 4
        assert row.key == (f"k{n}".encode() if n % 5 else None)
        headers = {h.key: h.value for h in row.headers}
        assert headers[f"h{n}"] == b"x"
        assert {k for k in headers if k.startswith("spark.")} == {
            "spark.batch.id",
            "spark.task.id",
            "spark.row",
        }
        assert re.fullmatch(rb"[0-9a-f]{16}", headers["spark.batch.id"])
    # (batch, task, row) names each row once: what a consumer deduplicates on.
    names = {
        tuple(
            h.value for h in r.headers if h.key in ("spark.batch.id", "spark.task.id", "spark.row")
        )
        for r in rows
    }
    assert len(names) == 200


def test_keyed_rows_land_where_the_java_partitioner_puts_them(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    create_topic(spark_broker, "keyed", 5)
    spark.createDataFrame(
        # One keyless row in ten: a mix only the per-record partitioner can place.
        [(None if i % 10 == 0 else f"user-{i}", f"event-{i}", "keyed") for i in range(100)],
        "key string, value string, topic string",
    ).write.mode("append").format("partita").option(
        "kafka.bootstrap.servers", spark_broker.bootstrap
    ).save()
    rows = read(spark, spark_broker, subscribe="keyed").collect()
    assert sorted(row.value for row in rows) == sorted(f"event-{i}".encode() for i in range(100))
    for row in rows:
        if row.key is not None:
            assert row.partition == partition_for_key(row.key, 5)
    assert sum(row.key is None for row in rows) == 10


def test_streaming_copy_between_topics(
    spark: Any, spark_broker: BrokerProcess, exact: Expected, checkpoint: str
) -> None:
    create_topic(spark_broker, "copy", 3)
    query = (
        spark.readStream.format("partita")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", "exact")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "120")
        .load()
        .selectExpr("key", "value", "partition")
        .writeStream.format("partita")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("topic", "copy")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    rows = read(spark, spark_broker, subscribe="copy", includeHeaders="true").collect()
    assert Counter((r.partition, r.key, r.value) for r in rows) == Counter(
        (p, v[0], v[1]) for (p, _o), v in exact.items()
    )
    batch_ids = {next(h.value for h in r.headers if h.key == "spark.batch.id") for r in rows}
    # 300 records at most 120 per trigger; the query id keeps two queries' rows apart.
    assert batch_ids == {f"{query.id}.{n}".encode() for n in range(3)}


def test_fail_on_data_loss(spark: Any, spark_broker: BrokerProcess) -> None:
    create_topic(spark_broker, "lossy", 1)
    produce(spark_broker, "lossy", 100, partitions=1)
    admin = Admin(spark_broker.bootstrap)
    try:
        admin.delete_records("lossy", {0: 40})
    finally:
        admin.close()
    start = '{"lossy":{"0":0}}'
    with pytest.raises(Exception, match="data may have been lost"):
        read(spark, spark_broker, subscribe="lossy", startingOffsets=start).collect()
    rows = read(
        spark, spark_broker, subscribe="lossy", startingOffsets=start, failOnDataLoss="false"
    ).collect()
    assert sorted(r.offset for r in rows) == list(range(40, 100))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "must be specified"),
        ({"subscribe": "a", "subscribePattern": "b"}, "Only one of"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "can't be latest"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "10"}, "only valid in streaming"),
        ({"assign": '{"nope":[0]}'}, "do not exist"),
    ],
)
def test_bad_read_options_fail_with_a_clear_message(
    spark: Any, spark_broker: BrokerProcess, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, spark_broker, **options).collect()


def test_bad_writes_fail_with_a_clear_message(spark: Any, spark_broker: BrokerProcess) -> None:
    def save(df: Any, **options: str) -> None:
        writer = df.write.mode("append").format("partita")
        writer = writer.option("kafka.bootstrap.servers", spark_broker.bootstrap)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()

    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        save(spark.createDataFrame([("a",)], "key string"), topic="t")
    with pytest.raises(Exception, match="topic option required"):
        save(spark.createDataFrame([("a",)], "value string"))
    with pytest.raises(Exception, match="partition attribute type must be an int"):
        save(spark.createDataFrame([("a", "x")], "value string, partition string"), topic="t")
    with pytest.raises(Exception, match="streaming"):
        spark.readStream.format("partita").option(
            "kafka.bootstrap.servers", spark_broker.bootstrap
        ).option("subscribe", "a").option("endingOffsets", "latest").load().writeStream.format(
            "console"
        ).start().awaitTermination(30)


def test_overwrite_is_refused_as_sparks_kafka_sink_refuses_it(
    spark: Any, spark_broker: BrokerProcess
) -> None:
    create_topic(spark_broker, "kept", 1)
    rows = spark.createDataFrame([("a",), ("b",)], "value string")
    writer = rows.write.format("partita").option("kafka.bootstrap.servers", spark_broker.bootstrap)
    with pytest.raises(Exception, match=r"Save mode Overwrite not allowed.*\.mode\(\"append\"\)"):
        writer.mode("overwrite").option("topic", "kept").save()
    assert read(spark, spark_broker, subscribe="kept").count() == 0
    writer.mode("append").option("topic", "kept").save()
    assert read(spark, spark_broker, subscribe="kept").count() == 2


def test_streaming_complete_mode_appends_every_result_as_sparks_kafka_sink_does(
    spark: Any, spark_broker: BrokerProcess, exact: Expected, checkpoint: str
) -> None:
    create_topic(spark_broker, "totals", 1)
    query = (
        spark.readStream.format("partita")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("subscribe", "exact")
        .option("startingOffsets", "earliest")
        .load()
        .groupBy("partition")
        .count()
        .selectExpr("cast(partition as string) as key", "cast(count as string) as value")
        .writeStream.format("partita")
        .outputMode("complete")
        .option("kafka.bootstrap.servers", spark_broker.bootstrap)
        .option("topic", "totals")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    rows = read(spark, spark_broker, subscribe="totals").collect()
    # Every micro-batch appends the whole result; the newest row per key is the total.
    newest = {r.key: r.value for r in sorted(rows, key=lambda r: r.offset)}
    assert newest == {b"0": b"100", b"1": b"100", b"2": b"100"}
