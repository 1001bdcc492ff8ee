"""Cluster metadata on a consensus store (etcd): a broker's registration and lease, its
image of the metadata kept current by a watch, and every metadata write as a
compare-and-swap.

The writes that any broker makes on a client's behalf -- create, delete and grow a
topic, change its configs, reserve producer ids -- are single conditional transactions:
a topic is created only if its key is absent, changed only if it is unchanged since the
image read it. Kafka brokers forward these requests to the controller quorum; here the
quorum is etcd itself, so every broker can make them and no request is routed twice.
Leadership changes are the controller's (``controller.Controller``) and ISR changes the
partition leader's, each guarded by the writer's own fencing token.

The broker's lease is its liveness: while renewals succeed, ``lease_trusted`` holds until
the moment the last renewal was *sent* plus the TTL, which is never later than etcd's own
expiry. Past that, the broker must behave as if it were no longer registered: a leader
stops acknowledging before the controller can have elected another.

Unless etcd itself has lost its quorum (``LeaseState.QUORUM_LOST``): while the etcd
members this broker reaches answer that they have no leader, etcd can commit nothing --
no lease expires, no controller elects, no ISR changes -- and a new etcd leader extends
every lease by its whole TTL before anything can expire. A leader may then go on
serving a partition whose ISR still fetches from it (``Partition`` decides). A broker
that reaches no member (cut off from a store that may work), or a member with a leader,
or whose own process stood still (a pause, SIGSTOP), has only its lease to go by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from enum import Enum

from partita.cluster.elections import changed
from partita.cluster.image import Changes, ClusterImage
from partita.cluster.kv import (
    KV,
    Compare,
    Delete,
    Op,
    Put,
    StoreUnavailableError,
    WatchCompactedError,
)
from partita.cluster.layout import (
    Layout,
    QuotaEntity,
    TopicRecord,
    advertised,
    decode_producer_ids,
    encode_acl,
    encode_broker,
    encode_broker_configs,
    encode_client_quota,
    encode_partition,
    encode_producer_ids,
    encode_scram_credential,
    encode_topic,
)
from partita.cluster.loop_thread import LoopThread
from partita.cluster.model import BrokerInfo, PartitionState, TopicState
from partita.cluster.store import Listener
from partita.errors import (
    BrokerNotAvailableError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from partita.security.acl import AclBinding
from partita.security.scram import ScramCredential

log = logging.getLogger(__name__)

RENEWAL_RETRY_SECONDS = 0.1
QUORUM_PROBE_TIMEOUT_SECONDS = 2.0
STALL_TICK_SECONDS = 0.1
STALL_LIMIT_SECONDS = 1.0
# How long the controller and a leader wait for their own committed write to reach the
# image. Longer than a client request's 5 s: with 30,000 partitions on two cores the
# image lagged by more, and giving up on a write that landed only made the writer plan
# again from a staler image (and the controller's step fail, and start over).
OWN_WRITE_WAIT_SECONDS = 30.0


class LeaseState(Enum):
    TRUSTED = "trusted"  # renewed within its TTL
    QUORUM_LOST = "quorum lost"  # not renewed, but etcd can decide nothing meanwhile
    LAPSED = "lapsed"  # not renewed: act as if no longer registered


PRODUCER_ID_BLOCK = 1000


class NodeIdInUseError(KafkaError):
    """Another live broker is registered with this node id."""


class AddressInUseError(KafkaError):
    """Another live broker advertises an address this one would advertise: one of the
    two was given the other's host (advertised.listeners), and clients and followers
    would reach the wrong broker."""


# An ISR change waiting to be written: (topic id, index, the partition's mod revision it
# was computed from, the new state, the future its proposer awaits the revision on).
_IsrChange = tuple[uuid.UUID, int, int, PartitionState, "asyncio.Future[int | None]"]


class ClusterMetadataStore:
    def __init__(
        self,
        kv: KV,
        prefix: str,
        node_id: int,
        *,
        session_timeout_ms: int = 3000,
        heartbeat_interval_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.layout = Layout(prefix)
        self.image = ClusterImage(self.layout)
        self.node_id = node_id
        self.ttl = max(2, math.ceil(session_timeout_ms / 1000))  # etcd's minimum is 2 s
        self.heartbeat = heartbeat_interval_ms / 1000
        self.clock = clock
        self.lease = 0
        self.broker_epoch = 0
        self.trusted_until = 0.0
        self.lease_lost = asyncio.Event()
        # When a probe (started then) last found etcd without a quorum; None: not lately.
        self.leaderless_since: float | None = None
        # The process stood still since the last renewal (its loop slept far too long):
        # what etcd did meanwhile is unknown, so only the lease counts until renewed.
        self.stalled = False
        self._last_tick = clock()
        self._probing: asyncio.Task[None] | None = None
        self._listeners: list[Listener] = []
        self._applied = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self._renewal_threads: list[LoopThread] = []
        self._isr_changes: list[_IsrChange] = []  # proposed, not yet written
        self._isr_writer: asyncio.Task[None] | None = None
        self._producer_ids = (0, 0)  # [next, end) of the block this broker holds
        self._registration: tuple[str, int, str | None, tuple[tuple[str, str, int], ...]] | None = (
            None
        )
        self._state = "starting"
        # Kept across a re-registration: a replica stays offline until the broker restarts.
        self._offline: frozenset[tuple[uuid.UUID, int]] = frozenset()

    # -- the image -----------------------------------------------------------------

    @property
    def topics(self) -> dict[str, TopicState]:
        return self.image.topics

    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id

    @property
    def controller_id(self) -> int:
        return self.image.controller_id

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self.image.topic_name(topic_id)

    def brokers(self) -> list[BrokerInfo]:
        return [
            BrokerInfo(b.node_id, b.host, b.port, b.rack, b.endpoints)
            for _, b in sorted(self.image.brokers.items())
            if b.state != "starting"
        ]

    def offline_replicas(self) -> dict[tuple[uuid.UUID, int], set[int]]:
        return self.image.offline_replicas()

    def placement_brokers(self) -> dict[int, str | None]:
        return {b.node_id: b.rack for b in self.image.brokers.values() if b.electable}

    def isr_eligible(self, node_id: int) -> bool:
        registration = self.image.brokers.get(node_id)
        return registration is not None and registration.electable

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def start(self) -> None:
        """Fix the cluster id if this is the first broker, then load the image and
        follow it. Registration is separate: a broker registers once its logs are up."""
        cluster_id = uuid.uuid4().hex[:22]
        await self.kv.txn(
            [Compare.absent(self.layout.cluster)], [Put(self.layout.cluster, cluster_id.encode())]
        )
        await self._relist()
        self._tasks.append(asyncio.create_task(self._follow(), name="metadata-watch"))

    async def _relist(self) -> None:
        entries, revision = await self.kv.range(self.layout.root)
        self._publish(self.image.load(entries, revision))

    async def _follow(self) -> None:
        while True:
            try:
                async for events in self.kv.watch(self.layout.root, self.image.revision + 1):
                    self._publish(self.image.apply(events))
            except WatchCompactedError as exc:
                log.warning(
                    "metadata watch lost its history; listing again", extra={"reason": str(exc)}
                )
            except StoreUnavailableError as exc:
                log.warning("metadata watch failed; retrying", extra={"error": str(exc)})
                await asyncio.sleep(0.5)
            with contextlib.suppress(StoreUnavailableError):
                await self._relist()

    def _publish(self, changes: Changes) -> None:
        for listener in self._listeners:
            try:
                listener(changes)
            except Exception:
                log.exception("metadata listener failed")
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._applied:
            self._applied.notify_all()

    async def caught_up(self, revision: int, timeout: float = 5.0) -> None:
        """Wait until the image reflects ``revision`` (our own write, typically)."""
        try:
            async with asyncio.timeout(timeout), self._applied:
                await self._applied.wait_for(lambda: self.image.revision >= revision)
        except TimeoutError:
            # A loop held past the deadline (a long apply, a loaded machine) runs the
            # timeout before the wake-up: the image, not the clock, says if we waited.
            if self.image.revision < revision:
                raise

    async def changed(self) -> None:
        async with self._applied:
            await self._applied.wait()

    # -- registration and lease ----------------------------------------------------

    async def register(
        self,
        host: str,
        port: int,
        rack: str | None,
        endpoints: tuple[tuple[str, str, int], ...] = (),
    ) -> None:
        """Register as ``starting`` on a new lease; refuse if the node id is taken, or an
        address we would advertise is another live broker's."""
        ours = advertised(host, port, endpoints)
        for other in self.image.brokers.values():
            if other.node_id != self.node_id and ours & other.addresses:
                h, p = sorted(ours & other.addresses)[0]
                raise AddressInUseError(
                    f"{h}:{p} is advertised by live broker {other.node_id}; give this broker "
                    f"its own host's address (listeners, advertised.listeners)"
                )
        self.lease = await self.kv.grant(self.ttl)
        sent = self.clock()
        key = self.layout.broker(self.node_id)
        ok, revision = await self.kv.txn(
            [Compare.absent(key)],
            [
                Put(
                    key,
                    encode_broker(host, port, rack, "starting", self._offline, endpoints),
                    self.lease,
                )
            ],
        )
        if not ok:
            await self.kv.revoke(self.lease)
            holder = self.image.brokers.get(self.node_id)
            where = f" at {holder.host}:{holder.port}" if holder else ""
            raise NodeIdInUseError(
                f"node id {self.node_id} is already registered by a live broker{where}; "
                f"give this broker another --node-id, or stop the other one"
            )
        self.broker_epoch = revision
        self.trusted_until = sent + self.ttl
        self._registration = (host, port, rack, endpoints)
        self._state = "starting"
        self._start_renewals(self.lease)
        if self._probing is None:
            self._probing = asyncio.create_task(self._probe_quorum(), name="quorum-probe")
            self._last_tick = self.clock()
            self._tasks.append(self._probing)
            self._tasks.append(asyncio.create_task(self._watch_for_stalls(), name="stalls"))
        await self.caught_up(revision)

    async def set_state(self, state: str) -> None:
        """Move this broker's registration on (running once recovered; shutting_down)."""
        self._state = state
        await self._put_registration()

    async def report_offline_replicas(self, replicas: frozenset[tuple[uuid.UUID, int]]) -> bool:
        """Name in our registration the replicas we cannot serve; the controller takes
        them out of their ISRs (and away from leadership) on the next image. False when
        the registration already names exactly these."""
        if replicas == self._offline:
            return False
        previous, self._offline = self._offline, replicas
        try:
            await self._put_registration()
        except BaseException:
            self._offline = previous  # not published: the next check tries again
            raise
        return True

    async def _put_registration(self) -> None:
        assert self._registration is not None
        key = self.layout.broker(self.node_id)
        host, port, rack, endpoints = self._registration
        value = encode_broker(host, port, rack, self._state, self._offline, endpoints)
        ok, revision = await self.kv.txn(
            [Compare.created_at(key, self.broker_epoch)], [Put(key, value, self.lease)]
        )
        if not ok:
            raise BrokerNotAvailableError(f"broker {self.node_id}'s registration has expired")
        await self.caught_up(revision)

    def lease_trusted(self) -> bool:
        return self.clock() < self.trusted_until

    def lease_state(self) -> LeaseState:
        if self.lease_trusted():
            return LeaseState.TRUSTED
        seen = self.leaderless_since
        if (
            seen is not None
            and self.clock() - seen < self._quorum_evidence_s
            and not self._standing_still()
        ):
            return LeaseState.QUORUM_LOST
        return LeaseState.LAPSED

    @property
    def _quorum_evidence_s(self) -> float:
        """How long one probe's answer counts: two heartbeats, so that one slow probe
        does not fence, and at most half the TTL, so that etcd's return is noticed long
        before a lease it extended by its whole TTL could run out."""
        return min(max(2 * self.heartbeat, 1.0), self.ttl / 2)

    async def _probe_quorum(self) -> None:
        """While renewals fail and the lease runs out, ask etcd's members whether etcd
        has lost its quorum (``KV.quorum_lost``)."""
        while True:
            await asyncio.sleep(self.heartbeat / 2)
            if self.trusted_until - self.clock() > self.heartbeat:
                continue
            started = self.clock()
            try:
                async with asyncio.timeout(QUORUM_PROBE_TIMEOUT_SECONDS):
                    lost = await self.kv.quorum_lost()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the probe must outlive any failure: it fails closed
                log.warning("etcd quorum probe failed", extra={"error": repr(exc)})
                lost = False
            if not lost:
                # A member with a leader (or none answering): the evidence is gone, and
                # with it any reason to serve without a lease.
                self.leaderless_since = None
                continue
            if self.leaderless_since is None:
                log.warning(
                    "etcd has lost its quorum: metadata changes wait for it; leaders whose "
                    "ISR still fetches from them go on serving",
                    extra={"node_id": self.node_id},
                )
            self.leaderless_since = started

    async def _watch_for_stalls(self) -> None:
        """Notice the process standing still (SIGSTOP, a loop blocked for a second)."""
        while True:
            await asyncio.sleep(STALL_TICK_SECONDS)
            now = self.clock()
            if now - self._last_tick > STALL_LIMIT_SECONDS:
                self.stalled = True
            self._last_tick = now

    def _standing_still(self) -> bool:
        # Also before the tick task has run again: after a pause, a request already
        # read from a socket is served before any timer, so the tick alone is too late.
        return self.stalled or self.clock() - self._last_tick > STALL_LIMIT_SECONDS

    def _start_renewals(self, lease: int) -> None:
        """Renew ``lease`` from a thread of its own when the store can be reached from
        one (etcd): see ``loop_thread``. In this process's store, on this loop."""
        renewal_kv = self.kv.for_another_thread()
        if renewal_kv is None:
            self._tasks.append(
                asyncio.create_task(self._keep_alive(self.kv, lease), name="lease-keepalive")
            )
            return
        main_loop = asyncio.get_running_loop()

        async def renew() -> None:
            try:
                await self._connect_for_renewals(renewal_kv)
                await self._keep_alive(renewal_kv, lease, main_loop)
            finally:
                await renewal_kv.close()

        thread = LoopThread(f"lease-renewals-{self.node_id}", renew)
        thread.start()
        self._renewal_threads.append(thread)

    async def _connect_for_renewals(self, kv: KV) -> None:
        """Until it connects: meanwhile the lease runs out as if renewals failed."""
        while True:
            try:
                await kv.connect()
                return
            except StoreUnavailableError as exc:
                log.warning("lease renewals cannot reach etcd", extra={"error": str(exc)})
                await asyncio.sleep(self.heartbeat)

    async def _keep_alive(
        self, kv: KV, lease: int, main_loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        """Renew ``lease`` through ``kv`` every heartbeat; on the broker's loop, or on
        a thread's (``main_loop`` then names the broker's, for what must happen there).
        What it writes (``trusted_until``, ``stalled``, ``leaderless_since``) are single
        assignments the broker's loop only reads."""
        delay = self.heartbeat
        failures = 0  # renewals failed in a row
        while True:
            await asyncio.sleep(delay)
            sent = self.clock()
            try:
                async with asyncio.timeout(max(self.heartbeat, 1.0)):
                    ttl = await kv.keepalive(lease)
            except (StoreUnavailableError, TimeoutError) as exc:
                failures += 1
                if failures == 1 or delay >= self.heartbeat:  # not ten lines a second
                    log.warning(
                        "lease renewal failed",
                        extra={
                            "error": str(exc) or "timed out",
                            "trusted_for_s": round(self.trusted_until - self.clock(), 2),
                        },
                    )
                # Again at once, not a heartbeat later: the next attempt goes to another
                # etcd member, and once etcd has elected a new leader (a second or two
                # after losing one) it answers; every wasted second is one the lease
                # has left before the broker must fence itself. Doubling back to a
                # heartbeat while etcd stays away (down, or without a quorum).
                delay = RENEWAL_RETRY_SECONDS if failures == 1 else min(2 * delay, self.heartbeat)
                continue
            failures = 0
            delay = self.heartbeat
            if ttl <= 0:
                log.error(
                    "broker lease expired: this broker is no longer registered",
                    extra={"node_id": self.node_id},
                )
                self.trusted_until = 0.0
                self.leaderless_since = None  # an etcd leader said so: etcd decides again
                if main_loop is None:
                    self.lease_lost.set()
                else:
                    main_loop.call_soon_threadsafe(self.lease_lost.set)
                return
            self.trusted_until = sent + ttl
            self.stalled = False
            if self.leaderless_since is not None:
                log.info("etcd has a quorum again", extra={"node_id": self.node_id})
                self.leaderless_since = None

    async def stop(self) -> None:
        if self._isr_writer is not None:
            self._tasks.append(self._isr_writer)  # cancelled with the rest
        for thread in self._renewal_threads:
            await thread.stop()
        self._renewal_threads.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.lease:
            with contextlib.suppress(StoreUnavailableError):
                await self.kv.revoke(self.lease)
        await self.kv.close()

    # -- writes on a client's behalf -------------------------------------------------

    async def create_topic(self, state: TopicState) -> None:
        layout = self.layout
        record = TopicRecord(state.name, state.topic_id, len(state.partitions), state.configs)
        partitions: list[Op] = [
            Put(layout.partition(state.topic_id, p), encode_partition(s))
            for p, s in sorted(state.partitions.items())
        ]
        topic_put = Put(layout.topic(state.name), encode_topic(record))
        absent = Compare.absent(layout.topic(state.name))
        if len(partitions) < self.kv.max_txn_ops:
            ok, revision = await self.kv.txn([absent], [topic_put, *partitions])
        else:
            # Too many for one transaction: the partitions first, under the new id that
            # nothing refers to yet, then the topic in one conditional write.
            if state.name in self.topics:
                raise TopicAlreadyExistsError(f"topic {state.name!r} already exists")
            step = self.kv.max_txn_ops
            for start in range(0, len(partitions), step):
                await self.kv.txn([], partitions[start : start + step])
            ok, revision = await self.kv.txn([absent], [topic_put])
            if not ok:
                await self.kv.txn(
                    [], [Delete(layout.topic_partitions(state.topic_id), prefix=True)]
                )
        if not ok:
            raise TopicAlreadyExistsError(f"topic {state.name!r} already exists")
        await self.caught_up(revision)

    async def delete_topic(self, name: str) -> None:
        for _ in range(10):
            topic = self.topics.get(name)
            if topic is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
            ok, revision = await self.kv.txn(
                [
                    Compare.unchanged_since(
                        self.layout.topic(name), self.image.topic_revisions[name]
                    )
                ],
                [
                    Delete(self.layout.topic(name)),
                    Delete(self.layout.topic_partitions(topic.topic_id), prefix=True),
                ],
            )
            if ok:
                await self.caught_up(revision)
                return
            await self._relist()
        raise BrokerNotAvailableError(f"topic {name!r} kept changing; deletion not done")

    async def add_partitions(self, name: str, new: dict[int, PartitionState]) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        count = max(max(topic.partitions, default=-1), *new) + 1
        record = TopicRecord(name, topic.topic_id, count, topic.configs)
        puts: list[Op] = [
            Put(self.layout.partition(topic.topic_id, p), encode_partition(s))
            for p, s in sorted(new.items())
        ]
        step = self.kv.max_txn_ops
        for start in range(0, len(puts), step):
            await self.kv.txn([], puts[start : start + step])
        await self._put_topic_record(record)

    async def set_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        record = TopicRecord(name, topic.topic_id, self.image.partition_count(name), configs)
        await self._put_topic_record(record)

    async def _put_topic_record(self, record: TopicRecord) -> None:
        key = self.layout.topic(record.name)
        ok, revision = await self.kv.txn(
            [Compare.unchanged_since(key, self.image.topic_revisions.get(record.name, 0))],
            [Put(key, encode_topic(record))],
        )
        if not ok:
            raise BrokerNotAvailableError(f"topic {record.name!r} changed meanwhile; try again")
        await self.caught_up(revision)

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        return self.image.broker_configs

    async def set_dynamic_broker_configs(self, configs: dict[str, str]) -> None:
        _ok, revision = await self.kv.txn(
            [], [Put(self.layout.broker_configs, encode_broker_configs(configs))]
        )
        await self.caught_up(revision)

    async def allocate_producer_id(self) -> int:
        """A producer id unique in the cluster: blocks of 1000 reserved by CAS."""
        next_id, end = self._producer_ids
        if next_id >= end:
            for _ in range(20):
                entry = await self.kv.get(self.layout.producer_ids)
                start = decode_producer_ids(entry.value) if entry is not None else 0
                guard = (
                    Compare.unchanged_since(self.layout.producer_ids, entry.mod_revision)
                    if entry is not None
                    else Compare.absent(self.layout.producer_ids)
                )
                ok, _ = await self.kv.txn(
                    [guard],
                    [Put(self.layout.producer_ids, encode_producer_ids(start + PRODUCER_ID_BLOCK))],
                )
                if ok:
                    next_id, end = start, start + PRODUCER_ID_BLOCK
                    break
            else:
                raise BrokerNotAvailableError("could not reserve producer ids")
        self._producer_ids = (next_id + 1, end)
        return next_id

    # -- SCRAM credentials -----------------------------------------------------------

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        return self.image.scram_credentials.get((mechanism, user))

    def scram_users(self) -> dict[str, list[ScramCredential]]:
        users: dict[str, list[ScramCredential]] = {}
        for (_mechanism, user), credential in sorted(self.image.scram_credentials.items()):
            users.setdefault(user, []).append(credential)
        return users

    async def alter_scram_credentials(
        self, upsert: list[tuple[str, ScramCredential]], delete: list[tuple[str, str]]
    ) -> None:
        ops: list[Op] = [
            Put(self.layout.scram_credential(c.mechanism, user), encode_scram_credential(c))
            for user, c in upsert
        ]
        ops += [Delete(self.layout.scram_credential(m, user)) for m, user in delete]
        step = self.kv.max_txn_ops
        for start in range(0, len(ops), step):
            _ok, revision = await self.kv.txn([], ops[start : start + step])
            await self.caught_up(revision)

    # -- ACLs -------------------------------------------------------------------------

    def acls(self) -> list[AclBinding]:
        return list(self.image.acls.values())

    async def alter_acls(self, create: list[AclBinding], delete: list[AclBinding]) -> None:
        ops: list[Op] = [Put(self.layout.acl(b), encode_acl(b)) for b in create]
        ops += [Delete(self.layout.acl(b)) for b in delete]
        step = self.kv.max_txn_ops
        for start in range(0, len(ops), step):
            _ok, revision = await self.kv.txn([], ops[start : start + step])
            await self.caught_up(revision)

    # -- client quotas ------------------------------------------------------------------

    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return dict(self.image.client_quotas.values())

    async def alter_client_quotas(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        """Set each entity's quotas (all of them: an empty dict removes the entity)."""
        ops: list[Op] = [
            Put(self.layout.client_quota(entity), encode_client_quota(entity, values))
            if values
            else Delete(self.layout.client_quota(entity))
            for entity, values in quotas.items()
        ]
        step = self.kv.max_txn_ops
        for start in range(0, len(ops), step):
            _ok, revision = await self.kv.txn([], ops[start : start + step])
            await self.caught_up(revision)

    # -- partition state ------------------------------------------------------------

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        """A partition leader's ISR change (Kafka's AlterPartition): compare-and-swap on
        the partition's state as the image has it, guarded by our own registration, so
        that a leader that was replaced or fenced changes nothing. False when the state
        moved meanwhile: the caller re-reads it (and steps down if the epoch moved)."""
        topic_state = self.topics.get(topic)
        state = topic_state.partitions.get(index) if topic_state else None
        if topic_state is None or state is None:
            return False
        if state.leader != self.node_id or state.leader_epoch != leader_epoch:
            return False
        new = changed(state, isr=isr)
        if new is state:
            return True
        revision = self.image.partition_revisions[(topic_state.topic_id, index)]
        answer: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._isr_changes.append((topic_state.topic_id, index, revision, new, answer))
        if self._isr_writer is None or self._isr_writer.done():
            self._isr_writer = asyncio.create_task(self._write_isr_changes(), name="isr-writer")
        written = await answer
        if written is None:
            return False
        await self.caught_up(written, OWN_WRITE_WAIT_SECONDS)
        return True

    async def _write_isr_changes(self) -> None:
        """Write the ISR changes proposed meanwhile, many to a transaction, as Kafka's
        AlterPartition carries many partitions: a broker back from a restart proposes
        one for each of its thousands of partitions within seconds, and one etcd
        transaction (and one image change) each made its return to the ISRs take
        minutes. A transaction is all or nothing, so when one of its partitions moved
        meanwhile, the others are written again one by one."""
        while self._isr_changes:
            await asyncio.sleep(0)  # the changes proposed in this same pass join
            batch = self._isr_changes[: self.kv.max_txn_ops - 1]  # the guard is one
            del self._isr_changes[: len(batch)]
            guard = Compare.created_at(self.layout.broker(self.node_id), self.broker_epoch)
            await self._write_isr_batch(batch, guard)

    async def _write_isr_batch(self, batch: list[_IsrChange], guard: Compare) -> None:
        try:
            written = await self.write_partitions([change[:4] for change in batch], guard)
        except Exception as exc:  # the store is unreachable: every proposer hears of it
            for *_, answer in batch:
                if not answer.done():
                    answer.set_exception(exc)
            return
        if written is None and len(batch) > 1:
            for change in batch:
                await self._write_isr_batch([change], guard)
            return
        for *_, answer in batch:
            if not answer.done():
                answer.set_result(written)

    async def write_partitions(
        self,
        changes: list[tuple[uuid.UUID, int, int, PartitionState]],
        guard: Compare,
    ) -> int | None:
        """Compare-and-swap partition states: each (topic id, index, mod revision the
        change was computed from, new state), all under the writer's fencing ``guard``.
        Returns the revision written, or None if anything moved meanwhile."""
        compares = [guard] + [
            Compare.unchanged_since(self.layout.partition(t, p), rev) for t, p, rev, _ in changes
        ]
        ops: list[Op] = [
            Put(self.layout.partition(t, p), encode_partition(s)) for t, p, _, s in changes
        ]
        ok, revision = await self.kv.txn(compares, ops)
        return revision if ok else None
