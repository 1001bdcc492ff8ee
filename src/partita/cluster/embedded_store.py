"""The embedded metadata store: one JSON file in the data directory, for a single broker.

Every change rewrites the file atomically (temp file, fsync, rename), so a crash leaves
either the old or the new metadata. The same interface is implemented over etcd for a
multi-broker cluster.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from partita.cluster.model import TopicState
from partita.errors import KafkaStorageError
from partita.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

METADATA_FILE = "partita-metadata.json"
META_PROPERTIES = "meta.properties"


class EmbeddedMetadataStore:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / METADATA_FILE
        self.topics: dict[str, TopicState] = {}
        self.cluster_id = ""
        self.producer_id_block_end = 0  # persisted: ids below it may have been handed out
        self._next_producer_id = 0

    def load(self, node_id: int) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_meta_properties(node_id)
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

    def _load_meta_properties(self, node_id: int) -> str:
        """Kafka's meta.properties: the cluster id is fixed the first time a dir is used."""
        path = self.data_dir / META_PROPERTIES
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                key, sep, value = line.partition("=")
                if sep and not line.startswith("#"):
                    props[key.strip()] = value.strip()
            if props.get("node.id") not in (None, str(node_id)):
                raise KafkaStorageError(
                    f"{path} belongs to node {props['node.id']}, not node {node_id}"
                )
        if "cluster.id" not in props:
            props = {"version": "1", "node.id": str(node_id), "cluster.id": uuid.uuid4().hex[:22]}
            write_atomically(path, "".join(f"{k}={v}\n" for k, v in props.items()))
        return props["cluster.id"]

    def save(self) -> None:
        body = {
            "producer_id_block_end": self.producer_id_block_end,
            "topics": {name: t.to_json() for name, t in sorted(self.topics.items())},
        }
        try:
            write_atomically(self.path, json.dumps(body, indent=1))
        except OSError as exc:
            raise KafkaStorageError(f"cannot write cluster metadata: {exc}") from exc

    def put_topic(self, topic: TopicState) -> None:
        self.topics[topic.name] = topic
        self.save()

    def delete_topic(self, name: str) -> None:
        self.topics.pop(name, None)
        self.save()

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts (ids are reserved
        in blocks of 1000 so that the file is not rewritten for every producer)."""
        if self._next_producer_id >= self.producer_id_block_end:
            self.producer_id_block_end = self._next_producer_id + 1000
            self.save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id
