"""Transactions benchmark (#29): what a transaction costs, partita beside Apache Kafka.

    .venv/bin/python benchmarks/transactions_bench.py [--records N] [--size BYTES]
        [--per-transaction K] [--rounds R] [--no-kafka]

In one run, on free 127.0.0.1 ports, partita (``partita broker``) and Kafka 4.4 (one KRaft
node, tests/kafka/real_kafka.py), each with a 3-partition topic per pass:
- produce N records of SIZE bytes with confluent-kafka (librdkafka), idempotent (acks=all)
  and transactional (K records per transaction, each committed);
- the same two with partita's own client (``AsyncProducer``);
- consume the transactional topic with read_uncommitted and with read_committed.
Records per second and broker CPU per record, medians over the rounds, the brokers'
order alternating per round; then partita's figures as a ratio to Kafka's, and each
transactional figure as a ratio to the idempotent one on the same broker.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import broker_bench as bb
from partita.client.producer import AsyncProducer

PARTITIONS = 3
Result = tuple[float, float]  # records per second, broker CPU µs per record


def _measure(broker: bb.BrokerProcess, count: int, work: Callable[[], None]) -> Result:
    meter = bb.CpuMeter(broker)
    start = time.perf_counter()
    work()
    elapsed = time.perf_counter() - start
    broker_cpu, _client = meter.read()
    return count / elapsed, broker_cpu / count * 1e6


def librdkafka_produce(
    broker: bb.BrokerProcess, topic: str, records: int, size: int, per_txn: int | None
) -> Result:
    config = {
        **bb.client_config(broker.bootstrap),
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "queue.buffering.max.messages": 2_000_000,
    }
    if per_txn:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(config)
    if per_txn:
        producer.init_transactions(30)
    producer.list_topics(topic, timeout=10)
    value = b"x" * size

    def work() -> None:
        for start in range(0, records, per_txn or records):
            if per_txn:
                producer.begin_transaction()
            for _ in range(min(per_txn or records, records - start)):
                while True:
                    try:
                        producer.produce(topic, value)
                        break
                    except BufferError:
                        producer.poll(0.001)
            if per_txn:
                producer.commit_transaction(60)
        assert producer.flush(120) == 0

    return _measure(broker, records, work)


def partita_produce(
    broker: bb.BrokerProcess, topic: str, records: int, size: int, per_txn: int | None
) -> Result:
    value = b"x" * size

    async def run() -> Result:
        tid = f"bench-{uuid.uuid4().hex[:8]}" if per_txn else None
        async with AsyncProducer(broker.bootstrap, transactional_id=tid, linger_ms=5) as producer:
            if per_txn:
                await producer.init_transactions()
            await producer.partitions_for(topic)
            meter = bb.CpuMeter(broker)
            start = time.perf_counter()
            for first in range(0, records, per_txn or records):
                if per_txn:
                    producer.begin_transaction()
                for _ in range(min(per_txn or records, records - first)):
                    await producer.send(topic, value)
                if per_txn:
                    await producer.commit_transaction()
            await producer.flush()
            elapsed = time.perf_counter() - start
            broker_cpu, _client = meter.read()
        return records / elapsed, broker_cpu / records * 1e6

    return asyncio.run(run())


def consume(broker: bb.BrokerProcess, topic: str, records: int, isolation: str) -> Result:
    consumer = Consumer(
        {
            **bb.client_config(broker.bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def work() -> None:
        seen = 0
        deadline = time.monotonic() + 120
        while seen < records and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                if not message.error():
                    seen += 1
        assert seen == records, f"{broker.name}: read {seen} of {records} ({isolation})"

    try:
        return _measure(broker, records, work)
    finally:
        consumer.close()


def one_round(broker: bb.BrokerProcess, args: argparse.Namespace) -> dict[str, Result]:
    out: dict[str, Result] = {}
    for name, produce, per_txn in (
        ("librdkafka idempotent", librdkafka_produce, None),
        ("librdkafka transactional", librdkafka_produce, args.per_transaction),
        ("partita client idempotent", partita_produce, None),
        ("partita client transactional", partita_produce, args.per_transaction),
    ):
        topic = f"txn-bench-{uuid.uuid4().hex[:8]}"
        bb.create_topic(broker, topic, PARTITIONS)
        out[name] = produce(broker, topic, args.records, args.size, per_txn)
        if name == "librdkafka transactional":
            out["consume read_uncommitted"] = consume(
                broker, topic, args.records, "read_uncommitted"
            )
            out["consume read_committed"] = consume(broker, topic, args.records, "read_committed")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-kafka", action="store_true")
    args = parser.parse_args()
    console = Console(width=130)
    results: dict[str, dict[str, list[Result]]] = {}
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as scratch:
        for name in ("partita", "kafka"):
            (Path(scratch) / name).mkdir()
        brokers = {bb.PARTITA: bb.start_partita(Path(scratch) / "partita", [])}
        if not args.no_kafka:
            brokers[bb.KAFKA] = bb.start_kafka(Path(scratch) / "kafka", "1g")
        try:
            for round_number in range(args.rounds):
                order = list(brokers)
                if round_number % 2:
                    order.reverse()
                for name in order:
                    console.print(f"round {round_number + 1}: {name}")
                    for label, result in one_round(brokers[name], args).items():
                        results.setdefault(label, {}).setdefault(name, []).append(result)
        finally:
            for broker in brokers.values():
                broker.stop()

    def med(label: str, broker: str) -> Result | None:
        runs = results.get(label, {}).get(broker)
        if not runs:
            return None
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    table = Table(
        title=f"{args.records:,} records of {args.size} B, {args.per_transaction} per "
        f"transaction, {PARTITIONS} partitions (medians of {args.rounds} rounds)"
    )
    for column in ("pass", "broker", "records/s", "broker CPU µs/record", "vs Kafka", "vs plain"):
        table.add_column(column, justify="left" if column in ("pass", "broker") else "right")
    plain_of = {
        "librdkafka transactional": "librdkafka idempotent",
        "partita client transactional": "partita client idempotent",
        "consume read_committed": "consume read_uncommitted",
    }
    for label in results:
        for broker in brokers:
            found = med(label, broker)
            if found is None:
                continue
            kafka = med(label, bb.KAFKA) if broker == bb.PARTITA else None
            plain = med(plain_of[label], broker) if label in plain_of else None
            table.add_row(
                label,
                broker,
                f"{found[0]:,.0f}",
                f"{found[1]:.1f}",
                f"{found[0] / kafka[0]:.2f}x" if kafka else "",
                f"{found[0] / plain[0]:.2f}x" if plain else "",
            )
    console.print(table)


if __name__ == "__main__":
    main()
