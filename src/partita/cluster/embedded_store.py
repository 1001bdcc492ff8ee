"""The embedded metadata store: one JSON file in the data directory, for a single broker.

Every change rewrites the file atomically (temp file, fsync, rename), so a crash leaves
either the old or the new metadata. The same interface is implemented over etcd for a
multi-broker cluster.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

from partita.cluster.image import Changes
from partita.cluster.model import BrokerInfo, PartitionState, TopicState
from partita.cluster.store import Listener
from partita.errors import (
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from partita.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

METADATA_FILE = "partita-metadata.json"


class EmbeddedMetadataStore:
    def __init__(self, data_dir: Path, local_broker: Callable[[], BrokerInfo]) -> None:
        """``local_broker``: the broker's own registration (its address is known only
        once it listens)."""
        self.data_dir = data_dir
        self.path = data_dir / METADATA_FILE
        self.topics: dict[str, TopicState] = {}
        self.cluster_id = ""
        self.producer_id_block_end = 0  # persisted: ids below it may have been handed out
        self._next_producer_id = 0
        self.local_broker = local_broker
        self._listeners: list[Listener] = []
        self._node_id = 0
        self._dynamic: dict[str, str] = {}

    def load(self, node_id: int, cluster_id: str) -> None:
        """Read the topics; ``cluster_id`` is the one the data directory's
        meta.properties holds (the broker claims the directory first)."""
        self._node_id = node_id
        self.cluster_id = cluster_id
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.topics = {
                name: TopicState.from_json(name, state) for name, state in data["topics"].items()
            }
            self.producer_id_block_end = int(data.get("producer_id_block_end", 0))
            self._next_producer_id = self.producer_id_block_end
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise KafkaStorageError(f"cannot read cluster metadata {self.path}: {exc}") from exc

    def save(self) -> None:
        body = {
            "producer_id_block_end": self.producer_id_block_end,
            "topics": {name: t.to_json() for name, t in sorted(self.topics.items())},
        }
        try:
            write_atomically(self.path, json.dumps(body, indent=1))
        except OSError as exc:
            raise KafkaStorageError(f"cannot write cluster metadata: {exc}") from exc

    # -- the MetadataStore interface (cluster.store) ----------------------------------

    @property
    def controller_id(self) -> int:
        return self._node_id

    def brokers(self) -> list[BrokerInfo]:
        return [self.local_broker()]

    def placement_brokers(self) -> dict[int, str | None]:
        # Alone, a broker places every replica on itself; racks mean nothing.
        return {self.controller_id: None}

    def isr_eligible(self, node_id: int) -> bool:
        return node_id == self.controller_id

    def offline_replicas(self) -> dict[tuple[uuid.UUID, int], set[int]]:
        # Alone, the broker's own offline logs are all there is (handlers ask its logs).
        return {}

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _publish(self, changes: Changes) -> None:
        for listener in self._listeners:
            listener(changes)

    async def create_topic(self, state: TopicState) -> None:
        if state.name in self.topics:
            raise TopicAlreadyExistsError(f"topic {state.name!r} already exists")
        self.put_topic(state)

    async def delete_topic(self, name: str) -> None:
        if self.topics.pop(name, None) is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        self.save()
        self._publish(Changes(deleted_topics={name}))

    async def add_partitions(self, name: str, new: dict[int, PartitionState]) -> None:
        topic = self.topics[name]
        topic.partitions.update(new)
        self.put_topic(topic)

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.topics[name]
        topic.configs = dict(configs)
        self.put_topic(topic)

    def put_topic(self, topic: TopicState) -> None:
        self.topics[topic.name] = topic
        self.save()
        self._publish(Changes(topics={topic.name}))

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        return self._dynamic

    async def set_dynamic_broker_configs(self, configs: dict[str, str]) -> None:
        # A broker alone has no replication to throttle; kept for DescribeConfigs.
        self._dynamic = dict(configs)

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        # Alone, a broker is every partition's only replica: its ISR never changes.
        return False

    async def report_offline_replicas(self, replicas: frozenset[tuple[uuid.UUID, int]]) -> bool:
        # Alone, an offline replica is the partition: nobody else could take it over.
        return False

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts (ids are reserved
        in blocks of 1000 so that the file is not rewritten for every producer)."""
        if self._next_producer_id >= self.producer_id_block_end:
            self.producer_id_block_end = self._next_producer_id + 1000
            self.save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id
