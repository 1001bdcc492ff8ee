"""A broker's life as a member of a cluster: reaching its metadata store (etcd, or the
file-backed KV of a broker alone, a cluster of one), registering on a lease, running for
controller, fencing itself when its lease cannot be trusted, and leaving cleanly
(controlled shutdown).

The order at start is Kafka's: the metadata image is loaded first (so the broker knows
which partitions are its own), then the logs are recovered, then the broker registers as
``starting`` and, once it listens, as ``running`` -- only then may the controller make it
a leader. A broker whose lease lapsed (a long pause, etcd unreachable) acts as leader of
nothing from the moment its last renewal could have expired, and registers anew (a new
broker epoch) when it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from partita.cluster.cluster_store import (
    AddressInUseError,
    ClusterMetadataStore,
    LeaseState,
    NodeIdInUseError,
)
from partita.cluster.controller import Controller, ControllerSettings
from partita.cluster.kv import KV, StoreUnavailableError
from partita.cluster.legacy_metadata import adopt_legacy_metadata
from partita.cluster.model import BrokerInfo
from partita.errors import KafkaError
from partita.server.config import BrokerConfig

log = logging.getLogger(__name__)


class ClusterNode:
    def __init__(
        self,
        config: BrokerConfig,
        kv: KV,
        prefix: str,
        source: str,
        info: Callable[[], BrokerInfo],
        unclean_for: Callable[[str], bool],
        *,
        adopt_from: Path | None = None,
    ) -> None:
        """``kv``: etcd for a cluster, a file of the data directory for a broker alone;
        ``source``: where that is, for messages; ``info``: this broker's registration
        (its advertised address is known only once it listens); ``unclean_for``: a
        topic's unclean.leader.election.enable; ``adopt_from``: a data directory whose
        older metadata file (``legacy_metadata``) an empty store takes over."""
        self.node_id = config.node_id
        self.info = info
        self.source = source
        self.adopt_from = adopt_from
        self.kv = kv
        self.store = ClusterMetadataStore(
            self.kv,
            prefix,
            config.node_id,
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
        )
        self.controller = Controller(
            self.store,
            unclean_for,
            ControllerSettings(
                auto_rebalance=config.get_bool("auto.leader.rebalance.enable"),
                check_interval_s=config.get_int("leader.imbalance.check.interval.seconds"),
                imbalance_pct=config.get_int("leader.imbalance.per.broker.percentage"),
            ),
        )
        self._tasks: list[asyncio.Task[None]] = []

    def lease_state(self) -> LeaseState:
        return self.store.lease_state()

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        registration = self.store.image.brokers.get(node_id)
        return (registration.host, registration.port) if registration else None

    async def connect(self) -> None:
        """Reach the store and load the metadata image; a clear error if it is not there."""
        try:
            await self.kv.connect()
            if self.adopt_from is not None:
                await adopt_legacy_metadata(
                    self.kv, self.store.layout, self.adopt_from, self.node_id
                )
            await self.store.start()
        except StoreUnavailableError as exc:
            await self.kv.close()
            raise KafkaError(
                f"cannot reach the cluster metadata store at {self.source}: {exc}"
            ) from None

    async def join(self) -> None:
        """Register, then become electable. A registration of our node id that is still
        there may be our own previous life (killed, restarted at once): as Kafka does with
        a duplicate registration, wait for its session to expire, and refuse to start only
        if it outlives that (another live broker holds the id). The same for an address
        another registration advertises (a host given a new node id after a crash)."""
        info = self.info()
        deadline = time.monotonic() + self.store.ttl + 2
        while True:
            try:
                await self.store.register(info.host, info.port, info.rack, info.endpoints)
                break
            except (NodeIdInUseError, AddressInUseError) as exc:
                if time.monotonic() > deadline:
                    raise KafkaError(exc.message) from None
                await asyncio.sleep(0.25)
        await self.store.set_state("running")
        log.info(
            "registered with the cluster",
            extra={"node_id": info.node_id, "broker_epoch": self.store.broker_epoch},
        )
        self._tasks.append(asyncio.create_task(self.controller.run(), name="controller"))
        self._tasks.append(asyncio.create_task(self._rejoin_after_lapse(), name="rejoin"))
        # Requests that need the controller (ElectLeaders, reassignments) are answered from
        # the start: wait, briefly, until one is elected (this broker, the first or alone).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.store.ttl):
                while self.store.controller_id < 0:
                    await self.store.changed()

    async def _rejoin_after_lapse(self) -> None:
        while True:
            await self.store.lease_lost.wait()
            log.warning(
                "lease lost: this broker leads nothing until it has registered again",
                extra={"node_id": self.node_id},
            )
            while True:
                try:
                    self.store.lease_lost.clear()
                    info = self.info()
                    await self.store.register(info.host, info.port, info.rack, info.endpoints)
                    await self.store.set_state("running")
                    log.info(
                        "registered again",
                        extra={"node_id": info.node_id, "broker_epoch": self.store.broker_epoch},
                    )
                    break
                except (KafkaError, StoreUnavailableError, TimeoutError) as exc:
                    log.warning("cannot register again yet", extra={"error": str(exc)})
                    await asyncio.sleep(1.0)

    async def leave(self, timeout_s: float) -> None:
        """Controlled shutdown: ask the controller to move our leaderships away, wait
        (up to ``timeout_s``) until we lead nothing, then stop the controller and the
        re-registration (``close`` gives up the lease)."""
        started = time.monotonic()
        with contextlib.suppress(KafkaError, StoreUnavailableError, TimeoutError):
            await self.store.set_state("shutting_down")
            deadline = started + timeout_s
            while time.monotonic() < deadline and self._leads_anything():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        await self.store.changed()
        log.info(
            "controlled shutdown",
            extra={
                "still_leading": self._leads_anything(),
                "seconds": round(time.monotonic() - started, 3),
            },
        )
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Give up the lease and stop watching the store (after ``leave``, once the
        followers stopped fetching)."""
        await self.store.stop()

    def _leads_anything(self) -> bool:
        """Whether the image still names us leader of a partition that another in-sync,
        electable replica could take. A partition nobody else can lead stays with us
        (all its other replicas out of sync, or shutting down too, as when a whole
        cluster stops)."""
        me = self.node_id
        electable = self.store.image.electable()
        for topic in self.store.topics.values():
            for state in topic.partitions.values():
                if state.leader == me and any(r != me and r in electable for r in state.isr):
                    return True
        return False
