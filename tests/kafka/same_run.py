"""A fresh one-partition topic on partita and on Apache Kafka in the same run, with each
broker's directory for it: the on-disk files of the two, side by side."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import KafkaCluster


def topic_on_each(
    partita: BrokerProcess, kafka: KafkaCluster, prefix: str, config: dict[str, str] | None = None
) -> Iterator[tuple[str, str, str, Path]]:
    """(broker name, bootstrap, topic, the topic's partition-0 directory), partita first."""
    (node,) = kafka.nodes
    for name, bootstrap, data in (
        ("partita", partita.bootstrap, partita.data_dir),
        ("kafka", kafka.bootstrap, node.directory / "data"),
    ):
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(30)
        yield name, bootstrap, topic, data / f"{topic}-0"
