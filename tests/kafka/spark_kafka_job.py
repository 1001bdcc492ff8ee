"""Spark's JVM Kafka connector and partita's format("partita") on the same partita topic.

Run as a program (its own Python and JVM: ``spark.jars`` only takes effect in a JVM that
starts with it, so this cannot share the Spark session of tests/spark)::

    python -m tests.kafka.spark_kafka_job BOOTSTRAP TOPIC WORKDIR [MAX_OFFSETS_PER_TRIGGER]
    python -m tests.kafka.spark_kafka_job BOOTSTRAP TOPIC WORKDIR --bench RECORDS ROUNDS

It reads TOPIC with both formats, batch and streaming (AvailableNow, into a memory sink),
writes with Spark's connector (a batch write and a streaming write fed by
format("partita")), reads those back with format("partita"), and prints one JSON object:
each read's rows as [partition, offset, key hex, value hex, timestamp ms, headers] and
its seconds (test_spark_kafka.py). With --bench it times whole-topic reads with each
format instead and prints those (benchmarks/spark_kafka_bench.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

REPO = Path(__file__).resolve().parents[2]
SPARK_KAFKA_JARS = (
    Path(os.environ.get("PARTITA_KAFKA_JARS", REPO / "var" / "kafka-jars")) / "spark-kafka"
)


def session(app: str = "spark-kafka-job") -> Any:
    jars = sorted(str(p) for p in SPARK_KAFKA_JARS.glob("*.jar"))
    if not any("spark-sql-kafka" in j for j in jars):
        raise SystemExit(f"no spark-sql-kafka jar in {SPARK_KAFKA_JARS}: run scripts/kafka_jars.sh")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# kafka.* options every read and write gets (a secured cluster's security.protocol,
# sasl.jaas.config, ssl.truststore.*): JSON in $SPARK_KAFKA_OPTIONS.
EXTRA_OPTIONS: dict[str, str] = json.loads(os.environ.get("SPARK_KAFKA_OPTIONS", "{}"))


def reader(spark: Any, fmt: str, bootstrap: str, topic: str, stream: bool = False) -> Any:
    r = spark.readStream if stream else spark.read
    return (
        r.format(fmt)
        .options(**EXTRA_OPTIONS)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )


def rows_of(df: Any) -> list[list[Any]]:
    out = []
    for r in df.collect():
        out.append(
            [
                r.partition,
                r.offset,
                None if r.key is None else bytes(r.key).hex(),
                None if r.value is None else bytes(r.value).hex(),
                round(r.timestamp.timestamp() * 1000),
                [
                    [h.key, None if h.value is None else bytes(h.value).hex()]
                    for h in r.headers or []
                ],
            ]
        )
    return sorted(out)


def batch(spark: Any, fmt: str, bootstrap: str, topic: str) -> tuple[list[list[Any]], float]:
    start = time.perf_counter()
    rows = rows_of(reader(spark, fmt, bootstrap, topic).load())
    return rows, time.perf_counter() - start


def available_now(
    spark: Any, fmt: str, bootstrap: str, topic: str, workdir: Path, per_trigger: int | None
) -> tuple[list[list[Any]], float]:
    name = f"{fmt}_{topic}".replace("-", "_")
    r = reader(spark, fmt, bootstrap, topic, stream=True)
    if per_trigger:
        r = r.option("maxOffsetsPerTrigger", str(per_trigger))
    start = time.perf_counter()
    query = (
        r.load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(workdir / f"checkpoint-{name}"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return rows_of(spark.table(name)), seconds


def bench(bootstrap: str, topic: str, workdir: Path, records: int, rounds: int) -> dict[str, Any]:
    """Seconds per read of the whole topic with each format, for benchmarks/spark_kafka_bench.

    batch: ``load().groupBy("partition").count()`` (as benchmarks/spark_bench.py times
    format("partita")); AvailableNow: a query into Spark's no-op sink from the earliest
    offsets, a fresh checkpoint each time. Two untimed rounds first (the JIT, the Python
    workers' imports), then ``rounds`` timed ones, the formats' order alternating.
    """
    spark = session("spark-kafka-bench")
    times: dict[str, list[float]] = {}
    runs = 0

    def batch_read(fmt: str) -> None:
        df = reader(spark, fmt, bootstrap, topic).load()
        total = sum(r["count"] for r in df.groupBy("partition").count().collect())
        if total != records:
            raise RuntimeError(f"{fmt} batch read {total} rows, not {records}")

    def stream_read(fmt: str) -> None:
        nonlocal runs
        runs += 1
        query = (
            reader(spark, fmt, bootstrap, topic, stream=True)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(workdir / f"bench-{runs}"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = query.recentProgress
        total = sum(p["numInputRows"] for p in progress)
        if total != records:
            raise RuntimeError(f"{fmt} AvailableNow read {total} rows, not {records}")

    for n in range(2 + rounds):
        order = ("kafka", "partita") if n % 2 == 0 else ("partita", "kafka")
        for kind, action in (("batch", batch_read), ("stream", stream_read)):
            for fmt in order:
                start = time.perf_counter()
                action(fmt)
                seconds = time.perf_counter() - start
                if n >= 2:
                    times.setdefault(f"{kind}-{fmt}", []).append(seconds)
    spark.stop()
    return {"spark": spark.version, "records": records, "seconds": times}


def main() -> None:
    bootstrap, topic, workdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if len(sys.argv) > 4 and sys.argv[4] == "--bench":
        records, rounds = int(sys.argv[5]), int(sys.argv[6])
        print(json.dumps(bench(bootstrap, topic, workdir, records, rounds)))
        return
    per_trigger = int(sys.argv[4]) if len(sys.argv) > 4 else None
    spark = session()
    result: dict[str, Any] = {"spark": spark.version}
    for fmt in ("kafka", "partita"):
        result[f"batch-{fmt}"] = batch(spark, fmt, bootstrap, topic)
        result[f"stream-{fmt}"] = available_now(spark, fmt, bootstrap, topic, workdir, per_trigger)
    # Spark's Kafka sink, batch: key, value, headers and partition from a DataFrame
    source = reader(spark, "partita", bootstrap, topic).load()
    source.selectExpr("key", "value", "headers", "partition").write.format("kafka").options(
        **EXTRA_OPTIONS
    ).option("kafka.bootstrap.servers", bootstrap).option("topic", f"{topic}-batch-out").save()
    result["written-batch"] = batch(spark, "partita", bootstrap, f"{topic}-batch-out")
    # and format("partita")'s sink, read back by Spark's connector
    source.selectExpr("key", "value", "headers", "partition").write.mode("append").format(
        "partita"
    ).options(**EXTRA_OPTIONS).option("kafka.bootstrap.servers", bootstrap).option(
        "topic", f"{topic}-partita-out"
    ).save()
    result["written-partita"] = batch(spark, "kafka", bootstrap, f"{topic}-partita-out")
    # streaming: format("partita") in, Spark's Kafka sink out, AvailableNow
    query = (
        reader(spark, "partita", bootstrap, topic, stream=True)
        .load()
        .selectExpr("key", "value", "headers", "partition")
        .writeStream.format("kafka")
        .options(**EXTRA_OPTIONS)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", f"{topic}-stream-out")
        .option("checkpointLocation", str(workdir / "checkpoint-stream-out"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    result["written-stream"] = batch(spark, "kafka", bootstrap, f"{topic}-stream-out")
    spark.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
