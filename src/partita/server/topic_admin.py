"""Topic administration through the metadata store: creating, deleting, growing and
reconfiguring topics, with Kafka's checks (names, counts, placement, the partition limit,
config values) made before anything is written. The replicas follow from the store's
image (``replica_manager``), never from here.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping

from partita.cluster.model import PartitionState, TopicState, valid_topic_name
from partita.cluster.placement import (
    assign_replicas,
    check_explicit_assignment,
    start_index_for,
)
from partita.cluster.store import MetadataStore
from partita.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    TopicDeletionDisabledError,
    UnknownTopicOrPartitionError,
)
from partita.server import partition_limit
from partita.server.config import BrokerConfig
from partita.storage.config import LogConfig, is_known

log = logging.getLogger(__name__)

MAX_PARTITIONS = 100_000
Assignment = Mapping[int, list[int]]


class TopicAdmin:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store

    def log_config(self, topic: str) -> LogConfig:
        """A topic's log config: its overrides over the broker's defaults."""
        state = self.store.topics.get(topic)
        return self.config.topic_config(state.configs if state else {})

    def topic(self, name: str) -> TopicState:
        state = self.store.topics.get(name)
        if state is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return state

    # -- changes -----------------------------------------------------------------

    def _check_partition_limit(self, placed: Mapping[int, list[int]]) -> None:
        # Before anything is recorded: a create is all or nothing.
        limit = self.config.get_int(partition_limit.CONFIG)
        partition_limit.check_placement(limit, self.store.topics.values(), placed)

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

    def _placement(
        self,
        name: str,
        count: int,
        replication_factor: int,
        assignment: Assignment | None,
        first_partition: int = 0,
        start_index: int | None = None,
    ) -> dict[int, list[int]]:
        brokers = self.store.placement_brokers()
        if assignment:
            check_explicit_assignment(assignment, list(brokers))
            return {first_partition + i: list(r) for i, r in enumerate(assignment.values())}
        return assign_replicas(
            brokers,
            count,
            replication_factor,
            first_partition=first_partition,
            start_index=start_index,
        )

    async def create(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignment: Assignment | None = None,
        validate_only: bool = False,
    ) -> TopicState:
        reason = valid_topic_name(name)
        if reason:
            raise InvalidTopicError(reason)
        if name in self.store.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if assignment:
            num_partitions = len(assignment)
        if num_partitions == -1:
            num_partitions = self.config.get_int("num.partitions")
        if replication_factor == -1:
            replication_factor = self.config.get_int("default.replication.factor")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be >= 1, got {num_partitions}")
        clean = self.validate_configs(configs or {})
        placed = self._placement(name, num_partitions, replication_factor, assignment)
        self._check_partition_limit(placed)
        state = TopicState(
            name,
            uuid.uuid4(),
            {p: PartitionState(list(r), r[0], 0, list(r)) for p, r in placed.items()},
            clean,
        )
        if validate_only:
            return state
        await self.store.create_topic(state)
        log.info(
            "created topic",
            extra={
                "topic": name,
                "partitions": num_partitions,
                "replication_factor": len(placed[0]),
                "configs": clean,
            },
        )
        return self.store.topics.get(name, state)

    async def ensure_internal(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
    ) -> None:
        """A coordinator's topic (``__consumer_offsets``, ``__transaction_state``), made on
        first use: ``replication_factor`` replicas, or one on every broker if fewer; a
        ``min.insync.replicas`` no higher than that (else no acks=all write would pass)."""
        if name in self.store.topics:
            return
        factor = max(1, min(replication_factor, len(self.store.placement_brokers())))
        settings = dict(configs)
        if "min.insync.replicas" in settings:
            settings["min.insync.replicas"] = str(min(factor, int(settings["min.insync.replicas"])))
        with contextlib.suppress(TopicAlreadyExistsError):  # another broker was first
            await self.create(name, partitions, factor, settings)

    def leader_of(self, name: str, index: int) -> int:
        """The partition's leader as the metadata has it, -1 for none (or no topic)."""
        topic = self.store.topics.get(name)
        state = topic.partitions.get(index) if topic is not None else None
        return state.leader if state is not None else -1

    async def delete(self, name: str) -> TopicState:
        if not self.config.get_bool("delete.topic.enable"):
            raise TopicDeletionDisabledError("delete.topic.enable is false")
        state = self.topic(name)
        await self.store.delete_topic(name)
        log.info("deleted topic", extra={"topic": name})
        return state

    async def add_partitions(
        self,
        name: str,
        total: int,
        *,
        assignment: Assignment | None = None,
        validate_only: bool = False,
    ) -> None:
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
        if assignment is not None and len(assignment) != total - current:
            raise InvalidPartitionsError(
                f"{len(assignment)} replica assignments given for {total - current} new partitions"
            )
        first = state.partitions[0].replicas if 0 in state.partitions else []
        placed = self._placement(
            name,
            total - current,
            len(first) or 1,
            assignment,
            first_partition=current,
            start_index=start_index_for(self.store.placement_brokers(), first[0])
            if first
            else None,
        )
        self._check_partition_limit(placed)
        if validate_only:
            return
        await self.store.add_partitions(
            name, {p: PartitionState(list(r), r[0], 0, list(r)) for p, r in placed.items()}
        )
        log.warning(
            "added partitions: keys now hash to different partitions",
            extra={"topic": name, "from": current, "to": total},
        )

    async def set_configs(
        self, name: str, configs: Mapping[str, str], *, validate_only: bool
    ) -> None:
        """Replace a topic's overrides (AlterConfigs) or apply the result of an
        incremental change computed by the caller."""
        self.topic(name)
        clean = self.validate_configs(configs)
        if validate_only:
            return
        await self.store.set_configs(name, clean)
        log.info("changed topic configs", extra={"topic": name, "configs": clean})
