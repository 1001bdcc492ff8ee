"""Topic lifecycle on a single broker: create, delete, grow, reconfigure.

This is the controller's job in a cluster; on one broker it writes the embedded metadata
store and opens or removes the partition logs directly.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

from partita.cluster.embedded_store import EmbeddedMetadataStore
from partita.cluster.model import PartitionState, TopicState, valid_topic_name
from partita.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from partita.server.config import BrokerConfig
from partita.server.partition import Partition
from partita.storage.config import LogConfig, is_known
from partita.storage.log_manager import LogManager

log = logging.getLogger(__name__)

MAX_PARTITIONS = 100_000


class TopicManager:
    def __init__(self, config: BrokerConfig, store: EmbeddedMetadataStore, logs: LogManager):
        self.config = config
        self.store = store
        self.logs = logs
        self.node_id = config.node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    # -- loading -----------------------------------------------------------------

    def log_config(self, topic: str) -> LogConfig:
        state = self.store.topics.get(topic)
        return self.config.topic_config(state.configs if state else {})

    def load(self) -> None:
        for topic in self.store.topics.values():
            self._by_id[topic.topic_id] = topic.name
            for index, state in topic.partitions.items():
                self._open_partition(topic.name, index, state)
        known = {(t.name, p) for t in self.store.topics.values() for p in t.partitions}
        for tp in list(self.logs.logs):
            if tp not in known:
                log.warning(
                    "partition directory belongs to no topic; leaving it untouched",
                    extra={"partition": f"{tp[0]}-{tp[1]}"},
                )

    def _open_partition(self, topic: str, index: int, state: PartitionState) -> Partition | None:
        try:
            partition_log = self.logs.get_or_create(topic, index)
        except Exception as exc:
            log.error(
                "partition unavailable", extra={"partition": f"{topic}-{index}", "error": str(exc)}
            )
            return None
        if (
            partition_log.epochs.latest_epoch < state.leader_epoch
            or not partition_log.epochs.entries
        ):
            # Record the leader epoch now, so that the first produce does not have to
            # write the leader-epoch checkpoint on its way.
            partition_log.epochs.assign(state.leader_epoch, partition_log.log_end_offset)
            partition_log.epochs.flush()
        partition = Partition(topic, index, partition_log, state.leader_epoch, list(state.isr))
        partition.rebuild_producer_state()
        partition.advance_high_watermark()
        self.partitions[(topic, index)] = partition
        return partition

    # -- lookups -----------------------------------------------------------------

    def topic(self, name: str) -> TopicState:
        state = self.store.topics.get(name)
        if state is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return state

    def name_for_id(self, topic_id: uuid.UUID) -> str:
        name = self._by_id.get(topic_id)
        if name is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return name

    def partition(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            if topic in self.store.topics and index in self.store.topics[topic].partitions:
                # Known but not open: its log could not be loaded.
                self.logs.get(topic, index)
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{index}")
        return partition

    # -- changes -----------------------------------------------------------------

    def validate_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        clean: dict[str, str] = {}
        for key, value in configs.items():
            if not is_known(key):
                raise InvalidConfigurationError(f"unknown topic config {key!r}")
            if value is None:
                raise InvalidConfigurationError(f"config {key!r} has no value")
            clean[key] = value
        self.config.topic_config(clean)  # raises on out-of-range values
        return clean

    def create(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicState:
        reason = valid_topic_name(name)
        if reason:
            raise InvalidTopicError(reason)
        if name in self.store.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get_int("default.replication.factor")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be >= 1, got {num_partitions}")
        if replication_factor != 1:
            raise InvalidReplicationFactorError(
                f"replication factor {replication_factor} is larger than the 1 available broker"
                if replication_factor > 1
                else f"replication factor must be >= 1, got {replication_factor}"
            )
        clean = self.validate_configs(configs or {})
        state = TopicState(
            name,
            uuid.uuid4(),
            {
                p: PartitionState([self.node_id], self.node_id, 0, [self.node_id])
                for p in range(num_partitions)
            },
            clean,
        )
        if validate_only:
            return state
        self.store.put_topic(state)
        self._by_id[state.topic_id] = name
        for index, partition_state in state.partitions.items():
            self._open_partition(name, index, partition_state)
        log.info(
            "created topic", extra={"topic": name, "partitions": num_partitions, "configs": clean}
        )
        return state

    def delete(self, name: str) -> TopicState:
        if not self.config.get_bool("delete.topic.enable"):
            raise TopicDeletionDisabledError("delete.topic.enable is false")
        state = self.topic(name)
        self.store.delete_topic(name)
        self._by_id.pop(state.topic_id, None)
        for index in state.partitions:
            partition = self.partitions.pop((name, index), None)
            if partition is not None:
                partition.wake_fetchers()
            self.logs.delete_partition(name, index)
        log.info("deleted topic", extra={"topic": name})
        return state

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        """Grow a topic to ``total`` partitions; Kafka never shrinks one."""
        state = self.topic(name)
        current = len(state.partitions)
        if total < current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; partitions can only be added, "
                f"never removed"
            )
        if total == current:
            raise InvalidPartitionsError(f"topic {name!r} already has {current} partitions")
        if total > MAX_PARTITIONS:
            raise InvalidPartitionsError(f"{total} partitions is more than {MAX_PARTITIONS}")
        if validate_only:
            return
        for index in range(current, total):
            state.partitions[index] = PartitionState(
                [self.node_id], self.node_id, 0, [self.node_id]
            )
        self.store.put_topic(state)
        for index in range(current, total):
            self._open_partition(name, index, state.partitions[index])
        log.warning(
            "added partitions: keys now hash to different partitions",
            extra={"topic": name, "from": current, "to": total},
        )

    def set_configs(self, name: str, configs: Mapping[str, str], *, validate_only: bool) -> None:
        """Replace a topic's overrides (AlterConfigs) or apply the result of an
        incremental change computed by the caller."""
        state = self.topic(name)
        clean = self.validate_configs(configs)
        if validate_only:
            return
        state.configs = clean
        self.store.put_topic(state)
        new_config = self.log_config(name)
        for index in state.partitions:
            partition = self.partitions.get((name, index))
            if partition is not None:
                partition.log.update_config(new_config)
        log.info("changed topic configs", extra={"topic": name, "configs": clean})
