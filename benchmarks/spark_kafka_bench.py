"""Spark reading a partita topic: partita's Python connector against Spark's JVM Kafka connector.

    .venv/bin/python benchmarks/spark_kafka_bench.py [--records N] [--size BYTES]
        [--partitions P] [--rounds R] [--dir DIR]

One partita broker (``partita broker``, default settings, data on disk under var/bench)
holds one topic of N records of SIZE bytes over P partitions, written by confluent-kafka.
Then one local[2] Spark session, started with ``spark.jars`` on Spark's own connector
(``spark-sql-kafka-0-10`` 4.2.0 from scripts/kafka_jars.sh, the version Maven Central has
for Spark 4.x; pyspark is 4.3.0), reads the whole topic with ``format("kafka")`` and with
``format("partita")``:

- batch: ``load().groupBy("partition").count()`` (as benchmarks/spark_bench.py times
  format("partita"));
- AvailableNow: ``readStream ... trigger(availableNow=True)`` into Spark's no-op sink from
  the earliest offsets, a fresh checkpoint each run.

Two untimed rounds go first (the JVM's JIT, the Python workers' imports), then R timed
rounds with the two formats' order alternating; figures are medians. Each run checks the
row count. The Spark session runs in a child process (tests/kafka/spark_kafka_job.py):
``spark.jars`` only takes effect in a JVM started with it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from broker_bench import start_partita  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=REPO / "var" / "bench")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="spark-kafka-bench-", dir=args.dir.resolve()))
    broker = start_partita(workdir, [])
    try:
        topic = "spark-kafka-bench"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "acks": "1"})
        value = os.urandom(args.size)
        start = time.perf_counter()
        for i in range(args.records):
            while True:
                try:
                    producer.produce(topic, value, partition=i % args.partitions)
                    break
                except BufferError:  # librdkafka's queue is full: let it drain
                    producer.poll(0.05)
            if i % 1024 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        del producer, admin  # no librdkafka reconnect noise once the broker stops
        print(
            f"{args.records:,} records of {args.size} B over {args.partitions} partitions "
            f"written in {time.perf_counter() - start:.1f} s; Spark local[2], "
            f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        job = subprocess.run(
            [
                sys.executable, "-m", "tests.kafka.spark_kafka_job", broker.bootstrap, topic,
                str(workdir), "--bench", str(args.records), str(args.rounds),
            ],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if job.returncode != 0:
            print(job.stdout[-3000:], job.stderr[-6000:])
            return 1
        result = json.loads(job.stdout.strip().splitlines()[-1])
        seconds: dict[str, list[float]] = result["seconds"]
        print(f"\nSpark {result['spark']}, median of {args.rounds} round(s), rows/s:")
        print(f"{'read':<14}{'format(kafka)':>16}{'format(partita)':>18}{'partita/kafka':>16}")
        for kind, label in (("batch", "batch"), ("stream", "AvailableNow")):
            rates = {
                fmt: args.records / statistics.median(seconds[f"{kind}-{fmt}"])
                for fmt in ("kafka", "partita")
            }
            print(
                f"{label:<14}{rates['kafka']:>16,.0f}{rates['partita']:>18,.0f}"
                f"{rates['partita'] / rates['kafka']:>15.2f}x"
            )
        print("seconds per round:", json.dumps(seconds))
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
