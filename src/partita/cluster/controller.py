"""The active controller: one broker at a time, chosen through the store, that moves
partition leadership when brokers come and go.

Election: the ``controller`` key is created on the candidate's own broker lease, only if
absent. Its create revision is the controller's fencing token (Kafka's controller epoch):
every write the controller makes compares it, so a controller whose lease expired -- its
key deleted, perhaps re-created by another broker -- can no longer change anything, even
if it has not noticed yet.

What it does is ``elections.next_state`` for every partition, whenever the image changes
(and once a second, so that a write lost to a race is retried). The image is the store's
own, kept current by its watch; writes compare each partition's mod revision, so a change
computed from a stale image fails and is recomputed from the fresher one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from partita.cluster import preferred, reassignment
from partita.cluster.cluster_store import OWN_WRITE_WAIT_SECONDS, ClusterMetadataStore
from partita.cluster.elections import next_state
from partita.cluster.kv import Compare, Put, StoreUnavailableError
from partita.cluster.layout import encode_controller
from partita.cluster.model import PartitionState
from partita.errors import KafkaError, UnknownTopicOrPartitionError

log = logging.getLogger(__name__)

# Partition writes per transaction: etcd's default limit is 128 operations, and each
# partition also needs its compare.
BATCH = 100
TICK_SECONDS = 1.0

UncleanLookup = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """Kafka's names: auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds,
    leader.imbalance.per.broker.percentage."""

    auto_rebalance: bool = True
    check_interval_s: float = 300.0
    imbalance_pct: int = 10


Change = tuple[uuid.UUID, int, int, PartitionState]


class Controller:
    def __init__(
        self,
        store: ClusterMetadataStore,
        unclean_for: UncleanLookup,
        settings: ControllerSettings | None = None,
    ) -> None:
        self.store = store
        self.unclean_for = unclean_for
        self.settings = settings or ControllerSettings()
        self._next_rebalance = time.monotonic() + self.settings.check_interval_s
        self.epoch = 0  # our controller key's create revision while we hold it

    @property
    def active(self) -> bool:
        image = self.store.image
        return (
            self.epoch != 0
            and image.controller_id == self.store.node_id
            and image.controller_epoch == self.epoch
        )

    async def run(self) -> None:
        while True:
            try:
                await self._step()
            except StoreUnavailableError as exc:
                log.warning("controller step failed", extra={"error": str(exc)})
            except Exception:
                log.exception("controller step failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_SECONDS):
                    await self.store.changed()

    async def _step(self) -> None:
        store = self.store
        image = store.image
        # Once the image has seen our election, a different controller key means we lost it.
        if self.epoch and not self.active and image.revision >= self.epoch:
            log.warning("no longer the controller", extra={"node_id": store.node_id})
            self.epoch = 0
        registered = image.brokers.get(store.node_id)
        if not store.lease_trusted() or registered is None:
            return
        if image.controller_id == -1 and registered.electable:
            await self._campaign()
        # A controller shutting down still moves leaderships, its own first (Kafka's
        # controller handles its own controlled shutdown too): no one else can while it
        # holds the controller key.
        if self.active:
            await self._reconcile()

    async def _campaign(self) -> None:
        store = self.store
        key = store.layout.controller
        ok, revision = await store.kv.txn(
            [Compare.absent(key)], [Put(key, encode_controller(store.node_id), store.lease)]
        )
        if ok:
            self.epoch = revision
            await store.caught_up(revision)
            log.info(
                "became the active controller",
                extra={"node_id": store.node_id, "controller_epoch": revision},
            )

    def plan(self) -> list[Change]:
        """Every partition whose state must change, from the image as it is now."""
        image = self.store.image
        registered = set(image.brokers)
        electable = image.electable()
        offline = image.offline_replicas()
        changes = []
        for name, topic in image.topics.items():
            unclean = self.unclean_for(name)
            for index, state in topic.partitions.items():
                # A replica its broker reports offline counts as that broker gone, for
                # this partition only.
                gone = offline.get((topic.topic_id, index), set())
                new = next_state(state, registered - gone, electable - gone, unclean=unclean)
                new = reassignment.advance(new, electable - gone)
                if new is not state:
                    revision = image.partition_revisions[(topic.topic_id, index)]
                    changes.append((topic.topic_id, index, revision, new))
        return changes

    async def _reconcile(self) -> None:
        changes = self.plan()
        if not changes and self.settings.auto_rebalance:
            now = time.monotonic()
            if now >= self._next_rebalance:
                self._next_rebalance = now + self.settings.check_interval_s
                await self._rebalance_leaders()
        await self._write(changes)

    async def _write(self, changes: list[Change]) -> bool:
        """Write ``changes`` under our fencing token; False if anything moved first.

        The batches are sent together, not one after another: a broker's death changes
        a third of the partitions it led and every ISR it was in (10,000 changes at
        10,000 partitions), and a transaction and an image change per batch in turn made
        the failover gap 21 s. Batches hold disjoint partitions, so each stands alone;
        new leaders go first, an ISR that only shrinks can wait a batch."""
        guard = Compare.created_at(self.store.layout.controller, self.epoch)
        names = {t.topic_id: n for n, t in self.store.image.topics.items()}
        by_id = {t.topic_id: t for t in self.store.image.topics.values()}

        def moves_leader(change: Change) -> bool:
            topic = by_id.get(change[0])
            old = topic.partitions.get(change[1]) if topic is not None else None
            return old is None or old.leader != change[3].leader

        ordered = sorted(changes, key=lambda c: not moves_leader(c))
        batches = [ordered[i : i + BATCH] for i in range(0, len(ordered), BATCH)]
        revisions = await asyncio.gather(
            *(self.store.write_partitions(batch, guard) for batch in batches)
        )
        for batch, revision in zip(batches, revisions, strict=True):
            if revision is None:
                continue
            log.info(
                "partition leadership changed",
                extra={
                    "partitions": len(batch),
                    "controller_epoch": self.epoch,
                    "changes": [
                        f"{names.get(t, t)}-{p}: leader {s.leader} epoch {s.leader_epoch} "
                        f"isr {s.isr}"
                        for t, p, _r, s in batch[:10]
                    ],
                },
            )
        written = [r for r in revisions if r is not None]
        if written:
            await self.store.caught_up(max(written), OWN_WRITE_WAIT_SECONDS)
        # Something moved under a failed batch: the next image change (or tick) replans.
        return len(written) == len(batches)

    # -- leadership on request, and by itself ------------------------------------------

    def _find(self, topic: str, index: int) -> tuple[uuid.UUID, int, PartitionState] | None:
        state = self.store.topics.get(topic)
        if state is None or index not in state.partitions:
            return None
        revision = self.store.image.partition_revisions[(state.topic_id, index)]
        return state.topic_id, revision, state.partitions[index]

    async def elect_leaders(
        self, kind: int, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], int]:
        """ElectLeaders: a Kafka error code per partition (ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION)."""
        image = self.store.image
        if partitions is None:
            partitions = [(n, i) for n, t in image.topics.items() for i in t.partitions]
        results: dict[tuple[str, int], int] = {}
        for _attempt in range(5):
            changes: list[Change] = []
            for topic, index in partitions:
                found = self._find(topic, index)
                if found is None:
                    results[(topic, index)] = UnknownTopicOrPartitionError.code
                    continue
                topic_id, revision, state = found
                new, code = preferred.elect(state, kind, set(image.brokers), image.electable())
                results[(topic, index)] = code
                if code == preferred.NONE:
                    changes.append((topic_id, index, revision, new))
            if await self._write(changes):
                return results
            await asyncio.sleep(0.05)  # let the image catch up, then recompute
        raise StoreUnavailableError("partition states kept changing; try the election again")

    async def _rebalance_leaders(self) -> None:
        image = self.store.image
        keyed = [
            ((name, index), state)
            for name, topic in image.topics.items()
            for index, state in topic.partitions.items()
        ]
        chosen = preferred.imbalanced(keyed, image.electable(), self.settings.imbalance_pct)
        if chosen:
            wanted = [key for key in chosen if isinstance(key, tuple)]
            results = await self.elect_leaders(preferred.PREFERRED, wanted)
            moved = [f"{t}-{p}" for (t, p), code in results.items() if code == preferred.NONE]
            if moved:
                log.info("preferred leaders restored", extra={"partitions": moved[:20]})

    async def reassign(
        self, targets: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """AlterPartitionReassignments: start (a replica list) or cancel (None) moves."""
        image = self.store.image
        results: dict[tuple[str, int], tuple[int, str | None]] = {}
        for _attempt in range(5):
            changes: list[Change] = []
            for (topic, index), target in targets.items():
                found = self._find(topic, index)
                if found is None:
                    results[(topic, index)] = (UnknownTopicOrPartitionError.code, None)
                    continue
                topic_id, revision, state = found
                try:
                    if target is None:
                        new = reassignment.cancel(state, image.electable())
                    else:
                        new = reassignment.start(state, target, set(image.brokers))
                except KafkaError as exc:
                    results[(topic, index)] = (exc.code, exc.message)
                    continue
                results[(topic, index)] = (0, None)
                if new is not state:
                    changes.append((topic_id, index, revision, new))
            if await self._write(changes):
                if changes:
                    log.info(
                        "reassignments changed",
                        extra={"partitions": [f"{t}-{p}" for t, p in list(targets)[:20]]},
                    )
                return results
            await asyncio.sleep(0.05)
        raise StoreUnavailableError("partition states kept changing; try the reassignment again")

    def reassignments(
        self, partitions: list[tuple[str, int]] | None
    ) -> dict[tuple[str, int], PartitionState]:
        """ListPartitionReassignments: the partitions being moved."""
        out = {}
        for name, topic in self.store.topics.items():
            for index, state in topic.partitions.items():
                if state.reassigning and (partitions is None or (name, index) in partitions):
                    out[(name, index)] = state
        return out
