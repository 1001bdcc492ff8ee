"""Spark's JVM Kafka connector (spark-sql-kafka-0-10) against a partita broker, beside
partita's own format("partita"), on the same topic: the same rows, batch and streaming
(AvailableNow), and Spark's Kafka sink writing to partita, batch and streaming.

Spark runs in its own process (tests/kafka/spark_kafka_job.py), since spark.jars only
applies to a JVM started with it. The connector is 4.2.0 (Maven Central has no 4.3.0 for
pyspark 4.3.0; scripts/kafka_jars.sh says so): it loads and runs in Spark 4.3.0.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import REPO, SPARK_KAFKA_JARS

pytestmark = pytest.mark.kafka

TOPIC = "spark-src"
COUNT = 600
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(kafka_jars: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("partita") / "data")
    process.start()
    yield process
    process.close()


def produce_source(config: dict[str, Any]) -> list[list[Any]]:
    """COUNT records over 3 partitions with keys (some null), values, headers, timestamps;
    returns them as the job prints rows. ``config``: the client's settings."""
    admin = AdminClient(config)
    for topic in (TOPIC, f"{TOPIC}-batch-out", f"{TOPIC}-stream-out", f"{TOPIC}-partita-out"):
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    producer = Producer({**config, "linger.ms": 5})
    sent: dict[int, list[Any]] = {}
    acked: list[list[Any]] = []

    errors: list[Any] = []

    def delivered(n: int, err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append([msg.partition(), msg.offset(), *sent[n]])

    for n in range(COUNT):
        key = None if n % 7 == 0 else f"key-{n}".encode()
        value = f"value-{n}".encode() * (1 + n % 3)
        headers = [("n", str(n).encode()), ("kind", b"even" if n % 2 == 0 else b"odd")]
        sent[n] = [
            None if key is None else key.hex(),
            value.hex(),
            BASE_TS + n,
            [[k, v.hex()] for k, v in headers],
        ]
        producer.produce(
            TOPIC, value, key, partition=n % 3, timestamp=BASE_TS + n, headers=headers,
            on_delivery=functools.partial(delivered, n),
        )  # fmt: skip
    assert producer.flush(30) == 0
    assert not errors
    assert len(acked) == COUNT
    return sorted(acked)


def run_job(bootstrap: str, workdir: Path, options: dict[str, str] | None = None) -> dict[str, Any]:
    """tests/kafka/spark_kafka_job.py on TOPIC, every read and write given ``options``."""
    assert any(SPARK_KAFKA_JARS.glob("spark-sql-kafka-0-10_*.jar")), SPARK_KAFKA_JARS
    result = subprocess.run(
        [sys.executable, "-m", "tests.kafka.spark_kafka_job", bootstrap, TOPIC, str(workdir),
         "150"],
        cwd=REPO, capture_output=True, text=True, timeout=280, check=False,
        env={**os.environ, "SPARK_KAFKA_OPTIONS": json.dumps(options or {})},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    print({name: round(value[1], 1) for name, value in out.items() if name != "spark"})
    return out


@pytest.fixture(scope="module")
def produced(broker: BrokerProcess) -> list[list[Any]]:
    return produce_source({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def job(
    broker: BrokerProcess, produced: list[list[Any]], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return run_job(broker.bootstrap, tmp_path_factory.mktemp("spark-kafka"))


def test_batch_reads_agree(job: dict[str, Any], produced: list[list[Any]]) -> None:
    assert job["spark"].startswith("4.")
    assert job["batch-kafka"][0] == produced
    assert job["batch-partita"][0] == produced


def test_available_now_reads_agree(job: dict[str, Any], produced: list[list[Any]]) -> None:
    assert job["stream-kafka"][0] == produced
    assert job["stream-partita"][0] == produced


def _content(rows: list[list[Any]]) -> list[tuple[Any, ...]]:
    """What a write keeps: partition, key, value and headers (offsets and times are new)."""
    return sorted(
        (p, key or "", value, json.dumps(headers)) for p, _o, key, value, _ts, headers in rows
    )


def test_spark_kafka_sink_batch_write(job: dict[str, Any], produced: list[list[Any]]) -> None:
    written = job["written-batch"][0]
    assert _content(written) == _content(produced)
    # each partition's offsets run 0..n-1: one write each, nothing duplicated
    for partition in range(3):
        offsets = sorted(o for p, o, *_ in written if p == partition)
        assert offsets == list(range(len(offsets)))


def test_spark_kafka_sink_streaming_write(job: dict[str, Any], produced: list[list[Any]]) -> None:
    written = job["written-stream"][0]
    assert _content(written) == _content(produced)


def test_format_partita_sink_batch_write(job: dict[str, Any], produced: list[list[Any]]) -> None:
    """format("partita")'s sink, read back by Spark's own connector."""
    assert _content(without_sink_headers(job["written-partita"][0])) == _content(produced)


def without_sink_headers(rows: list[list[Any]]) -> list[list[Any]]:
    """The rows without the spark.* headers format("partita")'s sink adds to each record
    (batch, task and row: what makes a retried task's records recognisable)."""
    return [[*row[:5], [h for h in row[5] if not h[0].startswith("spark.")]] for row in rows]
