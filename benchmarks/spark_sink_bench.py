"""The Spark sink's exactly-once mode against at-least-once, on partita and on Apache Kafka.

    .venv/bin/python benchmarks/spark_sink_bench.py [--records N] [--size BYTES]
        [--partitions P] [--rounds R] [--no-kafka]

One local[2] Spark session (started with ``spark.jars`` on Spark's own Kafka connector,
scripts/kafka_jars.sh), one partita broker (``partita broker``) and one Apache Kafka 4.4
node (KRaft, tests/kafka/real_kafka.py), on free 127.0.0.1 ports, in the same run. Each
pass writes ``spark.range(N)`` in P tasks as (key, SIZE-byte value) rows into a fresh
P-partition topic with a batch ``write``:

- ``partita at-least-once``: ``format("partita")``, acks=all and idempotent (its default);
- ``partita exactly-once``: the same with ``deliveryGuarantee=exactly-once``: each task's
  rows in one transaction with its version in the same transaction, committed by the
  driver once every task has prepared (spark/exactly_once.py);
- ``spark kafka``: Spark's JVM connector, ``format("kafka")`` (at-least-once: Spark has
  no exactly-once Kafka sink), for reference.

Each on both brokers: rows per second (whole write, from the action's start to its
return) and broker CPU microseconds per row, medians over the rounds; the passes' order
rotates per round. Then exactly-once as a share of at-least-once on the same broker,
and partita's figures over Kafka's. A read_committed count of each exactly-once topic
checks the rows arrived once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO))
from tests.kafka.spark_kafka_job import session  # noqa: E402

import broker_bench as bb  # noqa: E402

WRITERS = ("partita at-least-once", "partita exactly-once", "spark kafka")


def rows(spark: Any, records: int, size: int, partitions: int) -> Any:
    pad = "x" * max(size - 8, 0)
    return spark.range(0, records, 1, partitions).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS key",
        f"CAST(concat(lpad(CAST(id AS STRING), 8, '0'), '{pad}') AS BINARY) AS value",
    )


def write(frame: Any, writer: str, bootstrap: str, topic: str) -> None:
    if writer == "spark kafka":
        out = frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
        out.option("topic", topic).option("kafka.acks", "all").save()
        return
    out = frame.write.format("partita").option("kafka.bootstrap.servers", bootstrap)
    out = out.option("topic", topic).mode("append")
    if writer == "partita exactly-once":
        out = out.option("deliveryGuarantee", "exactly-once")
        out = out.option("transactionalIdPrefix", f"bench-{uuid.uuid4().hex[:8]}")
    out.save()


def committed_rows(spark: Any, bootstrap: str, topic: str) -> int:
    frame = spark.read.format("partita").option("kafka.bootstrap.servers", bootstrap)
    frame = frame.option("subscribe", topic).option("kafka.isolation.level", "read_committed")
    return int(frame.load().count())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-kafka", action="store_true", help="partita only")
    parser.add_argument("--dir", type=Path, default=REPO / "var" / "bench")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    console = Console(width=120)
    workdir = Path(tempfile.mkdtemp(prefix="spark-sink-bench-", dir=args.dir.resolve()))
    brokers = [bb.start_partita(workdir, [])]
    try:
        if not args.no_kafka:
            brokers.append(bb.start_kafka(workdir, "1g"))
        spark = session("spark-sink-bench")
        frame = rows(spark, args.records, args.size, args.partitions)
        seconds: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        passes = [(b, w) for b in brokers for w in WRITERS]
        for round_ in range(-1, args.rounds):  # round -1: the JIT, the workers' imports
            shift = max(round_, 0) % len(passes)
            for broker, writer in passes[shift:] + passes[:shift]:
                topic = f"sink-{uuid.uuid4().hex[:10]}"
                bb.create_topic(broker, topic, args.partitions)
                took, used = timed_write(frame, writer, broker, topic)
                if writer == "partita exactly-once":
                    got = committed_rows(spark, broker.bootstrap, topic)
                    if got != args.records:
                        raise SystemExit(f"{writer} on {broker.name}: {got} rows committed")
                if round_ >= 0:
                    seconds.setdefault((broker.name, writer), []).append(took)
                    cpu.setdefault((broker.name, writer), []).append(used)
                console.print(
                    f"round {round_}: {writer:<22} {broker.name:<8} {args.records / took:>10,.0f}"
                    f" rows/s  broker {used / args.records * 1e6:6.2f} µs/row"
                )
        report(console, args, brokers, seconds, cpu)
        spark.stop()
    finally:
        for broker in brokers:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def timed_write(
    frame: Any, writer: str, broker: bb.BrokerProcess, topic: str
) -> tuple[float, float]:
    """(wall seconds, broker CPU seconds) of one write."""
    cpu0 = broker.cpu_seconds()
    start = time.perf_counter()
    write(frame, writer, broker.bootstrap, topic)
    return time.perf_counter() - start, broker.cpu_seconds() - cpu0


def report(
    console: Console,
    args: argparse.Namespace,
    brokers: list[bb.BrokerProcess],
    seconds: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
) -> None:
    rate = {k: args.records / statistics.median(v) for k, v in seconds.items()}
    per_row = {k: statistics.median(v) / args.records * 1e6 for k, v in cpu.items()}
    table = Table(
        title=(
            f"Spark batch write of {args.records:,} rows of {args.size} B in {args.partitions} "
            f"tasks, median of {args.rounds} rounds; {os.cpu_count()} CPUs, "
            f"load {os.getloadavg()[0]:.2f}"
        )
    )
    table.add_column("sink")
    for broker in brokers:
        table.add_column(f"{broker.name} rows/s", justify="right")
        table.add_column(f"{broker.name} µs/row", justify="right")
    if len(brokers) > 1:
        table.add_column("partita / kafka", justify="right")
    for writer in WRITERS:
        cells = []
        for broker in brokers:
            cells += [
                f"{rate[(broker.name, writer)]:,.0f}",
                f"{per_row[(broker.name, writer)]:.2f}",
            ]
        if len(brokers) > 1:
            ratio = rate[(brokers[0].name, writer)] / rate[(brokers[1].name, writer)]
            cells.append(f"{ratio:.2f}x")
        table.add_row(writer, *cells)
    console.print(table)
    for broker in brokers:
        share = (
            rate[(broker.name, "partita exactly-once")]
            / rate[(broker.name, "partita at-least-once")]
        )
        console.print(f"{broker.name}: exactly-once at {share:.2f}x of at-least-once's rows/s")


if __name__ == "__main__":
    sys.exit(main())
