"""This broker's replicas, kept in step with the metadata image (Kafka's ReplicaManager).

Changes go one way: a request writes the store, the store publishes what changed (its own
writes included), and ``_on_metadata`` reconciles -- opens the logs of partitions that
name this broker as a replica, hands each its leadership state, starts or stops fetching
it from its leader, drops partitions and topics that went away. A broker alone and a
cluster member feed the same path (one store over two KVs), so nothing here knows which
runs. As leader of a partition, this broker writes its ISR changes to the store
(``Partition.isr_writer``) and reports replicas whose logs went offline.

Everything it works with comes through its constructor: the store, the logs, each
topic's log config, whether the broker's lease can be trusted, the follower fetchers
(a cluster member only) and where ISR changes are counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from partita.cluster.image import Changes
from partita.cluster.local_changes import LocalChanges, everything, local_changes
from partita.cluster.model import PartitionState, TopicState
from partita.cluster.store import MetadataStore
from partita.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from partita.protocol.control_records import TxnMarker
from partita.replication.fetcher import FetcherManager
from partita.server.partition import LeaseView, Partition, always_trusted, until_replicated
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager

log = logging.getLogger(__name__)

# A change opening more of this broker's partitions than this is applied in slices of
# SLICE_S, the event loop served between them (a new partition takes 1-2 ms to open).
SYNC_LIMIT = 200
SLICE_S = 0.05

LeadershipListener = Callable[[Partition, bool], None]
MarkerListener = Callable[[Partition, TxnMarker], None]
IsrChanged = Callable[[int, int], None]


def _uncounted(_before: int, _after: int) -> None:
    return None


@dataclass(eq=False, repr=False)
class ReplicaManager:
    node_id: int
    store: MetadataStore
    logs: LogManager
    log_config: Callable[[str], LogConfig]
    replica_lag_time_max_ms: int = field(kw_only=True)
    # True while this broker may not act as a leader (its cluster lease cannot be
    # trusted); a broker alone never is.
    lease: LeaseView = field(default=always_trusted, kw_only=True)
    # Copies the logs of the partitions this broker follows (a cluster member only).
    fetchers: FetcherManager | None = field(default=None, kw_only=True)
    # Told (ISR size before, after) of each ISR change this broker made as a leader.
    isr_changed: IsrChanged = field(default=_uncounted, kw_only=True)
    partitions: dict[tuple[str, int], Partition] = field(default_factory=dict, init=False)
    # Told (partition, leads) whenever this broker starts or stops leading one.
    _leadership_listeners: list[LeadershipListener] = field(default_factory=list, init=False)
    # Told (partition, marker) of each transaction marker written here as leader (the
    # group coordinator makes a transaction's offsets visible, or drops them, so).
    _marker_listeners: list[MarkerListener] = field(default_factory=list, init=False)
    _loaded: bool = field(default=False, init=False)
    _reporting_offline: bool = field(default=False, init=False)
    _unopened: set[tuple[str, int]] = field(default_factory=set, init=False)
    # Changes not applied yet: while a large one is applied in slices, what arrives
    # meanwhile waits here, to be applied next (or with the next change, should the
    # applier fail).
    _pending: Changes = field(default_factory=Changes, init=False)
    _applier: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.store.subscribe(self._on_metadata)

    def on_leadership_change(self, listener: LeadershipListener) -> None:
        """Tell ``listener`` (partition, leads) whenever this broker starts or stops
        leading a partition (the group coordinator loads and unloads its groups so)."""
        self._leadership_listeners.append(listener)

    def on_marker(self, listener: MarkerListener) -> None:
        self._marker_listeners.append(listener)

    async def write_marker(
        self, topic: str, index: int, marker: TxnMarker, timeout: float = 30.0
    ) -> None:
        """A transaction coordinator's marker, on a partition this broker leads, written
        as Kafka writes markers: acks=all. Done only once the ISR has it (a leader that
        died with it unreplicated would leave the transaction open on its successor);
        raises if it will not be, and the coordinator writes it again."""
        partition = self.leader_partition(topic, index)
        partition.check_enough_replicas()
        epoch = partition.leader_epoch
        await until_replicated(partition, partition.write_marker(marker), epoch, timeout)
        for listener in self._marker_listeners:
            listener(partition, marker)

    # -- loading and reconciling -------------------------------------------------

    def load(self) -> None:
        """Open this broker's partitions as the image has them (after the logs are up)."""
        self._loaded = True
        topics = self.store.topics
        self._apply(local_changes(everything(topics), topics, self.node_id, self.partitions))
        known = {(t.name, p) for t in topics.values() for p in t.partitions}
        for tp in list(self.logs.logs):
            if tp not in known:
                log.warning(
                    "partition directory belongs to no topic; leaving it untouched",
                    extra={"partition": f"{tp[0]}-{tp[1]}"},
                )

    def _on_metadata(self, changes: Changes) -> None:
        if not self._loaded:
            return  # load() applies everything once the logs are up
        self._pending = self._pending.merged(changes)
        if self._applier is not None and not self._applier.done():
            return  # applied after the change in progress, in order
        local = self._take_pending()
        if len(local.leads) + len(local.follows) <= SYNC_LIMIT:
            self._apply(local)
            return
        # Opening thousands of partitions takes seconds: in one go it would hold the
        # event loop, and with it lease renewals (the broker would fence itself, and the
        # controller move its leaderships) and every client.
        self._applier = asyncio.get_running_loop().create_task(
            self._apply_in_slices(local), name="apply-metadata"
        )

    def _take_pending(self) -> LocalChanges:
        changes, self._pending = self._pending, Changes()
        if self._unopened:
            # Replicas whose log could not be opened are tried again at every change.
            changes = replace(changes, partitions=changes.partitions | self._unopened)
        return local_changes(changes, self.store.topics, self.node_id, self.partitions)

    async def _apply_in_slices(self, local: LocalChanges) -> None:
        """Apply ``local``, then whatever came meanwhile, yielding to the event loop
        every ``SLICE_S``; changes stay in order."""
        try:
            while True:
                last = time.monotonic()
                for _ in self._apply_steps(local):
                    if time.monotonic() - last > SLICE_S:
                        await asyncio.sleep(0)
                        last = time.monotonic()
                if not (self._pending.partitions or self._pending.deleted_topics
                        or self._pending.reconfigured):  # fmt: skip
                    return
                local = self._take_pending()
        except Exception:
            log.exception("metadata change not applied; the next change tries again")

    async def stop_applying(self) -> None:
        """Stop a change being applied in slices (the broker is stopping)."""
        if self._applier is not None and not self._applier.done():
            self._applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._applier

    def _apply(self, local: LocalChanges) -> None:
        for _ in self._apply_steps(local):
            pass

    def _apply_steps(self, local: LocalChanges) -> Iterator[None]:
        """Apply ``local``, one partition per step. Each takes the partition's state as
        the image has it now: applied in slices, the change may be older than the image
        (a newer one for the same partition then follows)."""
        for name in local.deleted_topics:
            self._drop_topic(name)
        for topic, index in sorted(local.lost):
            self._drop_partition(topic, index)
        for (topic, index), noted in sorted([*local.leads.items(), *local.follows.items()]):
            record = self.store.topics.get(topic)
            state = record.partitions.get(index, noted) if record is not None else None
            if state is None or self.node_id not in state.replicas:
                continue  # gone since: the change that took it follows
            try:
                self._apply_state(topic, index, state)
            except Exception:
                # One partition's failure must not cost the others their change.
                log.exception(
                    "partition state not applied", extra={"partition": f"{topic}-{index}"}
                )
            yield
        if local.reconfigured:
            configs = {name: self.log_config(name) for name in local.reconfigured}
            for (topic, _index), partition in self.partitions.items():
                config = configs.get(topic)
                if config is not None and partition.log.config != config:
                    partition.log.update_config(config)

    def _apply_state(self, topic: str, index: int, state: PartitionState) -> None:
        """A partition this broker is a replica of, in its new state."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            record = self.store.topics.get(topic)
            if record is not None:
                self._open_partition(topic, index, state, record.topic_id)
            return
        leads = partition.is_leader
        partition.become(state)
        self._follow_or_lead(partition)
        if leads != partition.is_leader:
            self._leadership_moved(partition)

    def _leadership_moved(self, partition: Partition) -> None:
        log.info(
            "leadership changed",
            extra={
                "partition": f"{partition.topic}-{partition.index}",
                "leader": partition.leader,
                "leader_epoch": partition.leader_epoch,
                "isr": partition.isr,
            },
        )
        for listener in self._leadership_listeners:
            try:
                listener(partition, partition.is_leader)
            except Exception:
                log.exception("leadership listener failed")

    def _open_partition(
        self, topic: str, index: int, state: PartitionState, topic_id: uuid.UUID
    ) -> Partition | None:
        try:
            partition_log = self.logs.get_or_create(topic, index, topic_id)
        except Exception as exc:
            if (topic, index) not in self._unopened:  # logged once; retried at every change
                log.error(
                    "partition unavailable",
                    extra={"partition": f"{topic}-{index}", "error": str(exc)},
                )
            self._unopened.add((topic, index))
            return None
        self._unopened.discard((topic, index))
        partition = Partition(
            topic,
            index,
            partition_log,
            self.node_id,
            isr_writer=self._write_isr,
            isr_eligible=self.store.isr_eligible,
            lease=self.lease,
        )
        partition.rebuild_producer_state()
        partition.become(state)
        self.partitions[(topic, index)] = partition
        self._follow_or_lead(partition)
        if partition.is_leader:
            self._leadership_moved(partition)
        return partition

    def _follow_or_lead(self, partition: Partition) -> None:
        """Start or stop fetching ``partition`` from its leader (a cluster member only)."""
        if self.fetchers is None:
            return
        key = (partition.topic, partition.index)
        if not partition.is_leader and partition.leader >= 0:
            self.fetchers.follow(partition, partition.leader, partition.leader_epoch)
        else:
            self.fetchers.unfollow(key)

    def _write_isr(self, partition: Partition, isr: list[int]) -> None:
        asyncio.get_running_loop().create_task(self._alter_isr(partition, isr))

    async def _alter_isr(self, partition: Partition, isr: list[int]) -> None:
        before = len(partition.isr)
        try:
            ok = await self.store.alter_isr(
                partition.topic, partition.index, partition.leader_epoch, isr
            )
        except Exception as exc:
            log.warning(
                "ISR change not written", extra={"partition": partition.name, "error": str(exc)}
            )
            ok = False
        if ok:
            self.isr_changed(before, len(isr))
        if not ok:
            # The state moved under us (or the store is unreachable): the image brings the
            # current one, and a leader whose epoch moved steps down through become().
            partition.isr_change_failed()

    def report_offline_replicas(self) -> None:
        """Tell the cluster about replicas whose logs went offline since the last report
        (a full or failed disk), so that the controller takes them out of their ISRs at
        once instead of after replica.lag.time.max.ms. Checked every second."""
        offline = frozenset(
            (topic.topic_id, index)
            for (name, index), partition in self.partitions.items()
            if partition.log.offline_reason is not None
            and (topic := self.store.topics.get(name)) is not None
        )
        if not self._reporting_offline:  # one report at a time; the store skips repeats
            self._reporting_offline = True
            asyncio.get_running_loop().create_task(self._report_offline(offline))

    async def _report_offline(self, offline: frozenset[tuple[uuid.UUID, int]]) -> None:
        try:
            if await self.store.report_offline_replicas(offline) and offline:
                log.warning(
                    "replicas reported offline to the controller",
                    extra={"replicas": len(offline)},
                )
        except Exception as exc:
            log.warning("offline replicas not reported; will retry", extra={"error": str(exc)})
        finally:
            self._reporting_offline = False

    def shrink_lagging_isrs(self) -> None:
        """Kafka's ISR shrink check, for every partition led here."""
        max_lag_ms = self.replica_lag_time_max_ms
        for partition in self.partitions.values():
            if partition.is_leader:
                partition.maybe_shrink_isr(max_lag_ms)

    def _drop_topic(self, name: str) -> None:
        self._unopened = {tp for tp in self._unopened if tp[0] != name}
        for topic, index in [tp for tp in self.partitions if tp[0] == name]:
            self._drop_partition(topic, index)

    def _drop_partition(self, topic: str, index: int) -> None:
        self._unopened.discard((topic, index))
        partition = self.partitions.pop((topic, index), None)
        if self.fetchers is not None:
            self.fetchers.unfollow((topic, index))
        if partition is not None and partition.resign():
            self._leadership_moved(partition)
        self.logs.delete_partition(topic, index)

    # -- lookups -----------------------------------------------------------------

    def offline_replicas(self) -> Callable[[TopicState, int], list[int]]:
        """What Metadata and DescribeTopicPartitions list as a partition's offline
        replicas, taken once per request: those whose broker is not registered, those
        their broker reports offline (a full disk), and (for this broker's own) one whose
        log could not be loaded."""
        live = {b.node_id for b in self.store.brokers()}
        reported = self.store.offline_replicas()

        def offline(topic: TopicState, index: int) -> list[int]:
            gone = reported.get((topic.topic_id, index), set())
            return [
                r
                for r in topic.partitions[index].replicas
                if r not in live
                or r in gone
                or (r == self.node_id and (topic.name, index) not in self.partitions)
            ]

        return offline

    def name_for_id(self, topic_id: uuid.UUID) -> str:
        name = self.store.topic_name(topic_id)
        if name is None:
            raise UnknownTopicIdError(f"unknown topic id {topic_id}")
        return name

    def partition(self, topic: str, index: int) -> Partition:
        """This broker's replica of a partition, whatever its role."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            known = self.store.topics.get(topic)
            if known is not None and index in known.partitions:
                if self.node_id not in known.partitions[index].replicas:
                    raise NotLeaderOrFollowerError(
                        f"broker {self.node_id} holds no replica of {topic}-{index}"
                    )
                # Ours but not open: its log could not be loaded.
                self.logs.get(topic, index)
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{index}")
        return partition

    def readable_partition(
        self, topic: str, index: int, current_leader_epoch: int, *, from_follower: bool
    ) -> Partition:
        """The partition for a consumer's fetch, if it may read it here (the leader, or
        an in-sync follower when the client allows it: ``Partition.check_readable``)."""
        partition = self.partition(topic, index)
        partition.check_readable(current_leader_epoch, from_follower=from_follower)
        return partition

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        """The partition, if this broker leads it at the client's epoch
        (``Partition.check_leader``)."""
        partition = self.partition(topic, index)
        partition.check_leader(current_leader_epoch)
        return partition
