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
import uuid
from collections.abc import Callable

from partita.cluster.cluster_store import ClusterMetadataStore
from partita.cluster.elections import next_state
from partita.cluster.kv import Compare, Put, StoreUnavailableError
from partita.cluster.layout import encode_controller
from partita.cluster.model import PartitionState

log = logging.getLogger(__name__)

# Partition writes per transaction: etcd's default limit is 128 operations, and each
# partition also needs its compare.
BATCH = 100
TICK_SECONDS = 1.0

UncleanLookup = Callable[[str], bool]


class Controller:
    def __init__(self, store: ClusterMetadataStore, unclean_for: UncleanLookup) -> None:
        self.store = store
        self.unclean_for = unclean_for
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
        if not store.lease_trusted() or registered is None or not registered.electable:
            return
        if image.controller_id == -1:
            await self._campaign()
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

    def plan(self) -> list[tuple[uuid.UUID, int, int, PartitionState]]:
        """Every partition whose state must change, from the image as it is now."""
        image = self.store.image
        registered = set(image.brokers)
        electable = image.electable()
        changes = []
        for name, topic in image.topics.items():
            unclean = self.unclean_for(name)
            for index, state in topic.partitions.items():
                new = next_state(state, registered, electable, unclean=unclean)
                if new is not state:
                    revision = image.partition_revisions[(topic.topic_id, index)]
                    changes.append((topic.topic_id, index, revision, new))
        return changes

    async def _reconcile(self) -> None:
        changes = self.plan()
        guard = Compare.created_at(self.store.layout.controller, self.epoch)
        names = {t.topic_id: n for n, t in self.store.image.topics.items()}
        for start in range(0, len(changes), BATCH):
            batch = changes[start : start + BATCH]
            revision = await self.store.write_partitions(batch, guard)
            if revision is None:
                return  # something moved: the next image change (or tick) replans
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
            await self.store.caught_up(revision)
