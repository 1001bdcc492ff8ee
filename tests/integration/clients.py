"""Small helpers around the real Kafka clients used by the integration tests."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    client = admin(bootstrap)  # must outlive the future, or librdkafka cancels it
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)],
        operation_timeout=10,
    )
    futures[name].result(15)


def produce(bootstrap: str, topic: str, records: list[dict[str, Any]], **config: Any) -> list[Any]:
    """Produce and return the delivered messages (with offsets), raising on any error."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 5, **config}
    )
    delivered: list[Any] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err else delivered).append(err or msg)

    for record in records:
        producer.produce(topic, on_delivery=on_delivery, **record)
        producer.poll(0)
    remaining = producer.flush(30)
    if errors or remaining:
        raise AssertionError(f"delivery failed: {errors[:3]}, {remaining} undelivered")
    return delivered


def consume_all(
    bootstrap: str,
    topic: str,
    partitions: list[int],
    expected: int,
    timeout: float = 30.0,
    start: int = 0,
) -> list[Any]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                out.append(msg)
    finally:
        consumer.close()
    return out


def subscribe_tracking_assignment(consumer: Consumer, topics: list[str]) -> set[int]:
    """Subscribe and return a set kept equal to the consumer's partitions by the
    rebalance callbacks: librdkafka's consumer must only be touched by its polling
    thread, so tests must not call ``assignment()`` from another one."""
    owned: set[int] = set()

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        owned.clear()
        owned.update(p.partition for p in partitions)

    def on_revoke(_consumer: Any, _partitions: list[Any]) -> None:
        owned.clear()

    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
    return owned
