"""The metadata image, the stores' writes and the controller, over the in-memory KV
(etcd's revision, lease and watch semantics in one process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from itertools import pairwise
from typing import Any

import pytest

from partita.cluster.cluster_store import (
    AddressInUseError,
    ClusterMetadataStore,
    LeaseState,
    NodeIdInUseError,
)
from partita.cluster.controller import Controller
from partita.cluster.kv import Compare, Put, StoreUnavailableError
from partita.cluster.layout import decode_partition, encode_partition
from partita.cluster.memory_kv import MemoryKV
from partita.cluster.model import PartitionState, TopicState
from partita.cluster.placement import assign_replicas
from partita.errors import TopicAlreadyExistsError

pytestmark = pytest.mark.timeout(30)


def _sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on a fresh event loop (the suite has no asyncio plugin)."""

    def run() -> None:
        asyncio.run(test())

    run.__name__ = test.__name__
    return run


async def _until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


class _Node:
    def __init__(self, kv: MemoryKV, node_id: int) -> None:
        self.store = ClusterMetadataStore(kv, "t", node_id, heartbeat_interval_ms=20)
        self.controller = Controller(self.store, lambda _topic: False)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.start()
        await self.store.register("127.0.0.1", 9000 + self.store.node_id, None)
        await self.store.set_state("running")
        self.task = asyncio.create_task(self.controller.run())

    async def crash(self, kv: MemoryKV) -> None:
        """The broker's process is gone: its lease expires, its tasks stop."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        for task in self.store._tasks:
            task.cancel()
        await kv.expire(self.store.lease)


@contextlib.asynccontextmanager
async def _cluster(kv: MemoryKV, n: int = 3) -> AsyncIterator[list[_Node]]:
    nodes = [_Node(kv, i) for i in range(1, n + 1)]
    for node in nodes:
        await node.start()
    try:
        yield nodes
    finally:
        for node in nodes:
            if node.task is not None:
                node.task.cancel()
            for task in node.store._tasks:
                task.cancel()


def _topic(name: str, assignment: dict[int, list[int]]) -> TopicState:
    return TopicState(
        name,
        uuid.uuid4(),
        {p: PartitionState(list(r), r[0], 0, list(r)) for p, r in assignment.items()},
        {},
    )


@_sync
async def test_one_controller_is_elected_and_every_image_agrees() -> None:
    kv = MemoryKV()
    async with _cluster(kv) as nodes:
        await _until(lambda: all(n.store.image.controller_id != -1 for n in nodes))
        ids = {n.store.image.controller_id for n in nodes}
        assert len(ids) == 1
        assert sum(n.controller.active for n in nodes) == 1
        assert all(set(n.store.image.brokers) == {1, 2, 3} for n in nodes)


@_sync
async def test_a_change_applied_while_the_loop_is_held_past_the_wait_is_caught_up() -> None:
    """Opening thousands of new partitions holds the event loop longer than the wait for
    the image: the wait's deadline passes while the change is being applied, and a
    write, committed and applied, must not be answered with a timeout."""
    kv = MemoryKV()
    async with _cluster(kv, 1) as (node,):
        node.store.subscribe(lambda _changes: time.sleep(0.3))
        target = kv.revision + 1

        async def write_later() -> None:
            await asyncio.sleep(0.01)  # once the wait below has begun
            await kv.txn([], [Put(node.store.layout.root + "/x", b"")])

        writer = asyncio.create_task(write_later())
        await node.store.caught_up(target, timeout=0.1)
        assert node.store.image.revision >= target
        await writer


@_sync
async def test_an_address_another_live_broker_advertises_is_refused() -> None:
    """A broker given another host's address would take that broker's clients and
    followers; its registration is refused, and any other address is not."""
    kv = MemoryKV()
    async with _cluster(kv, 1) as (node,):
        other = ClusterMetadataStore(kv, "t", 2, heartbeat_interval_ms=20)
        await other.start()
        # Broker 1 registered 127.0.0.1:9001; this one names it among its listeners.
        taken = (("PLAINTEXT", "10.0.0.3", 9000), ("EXTERNAL", "127.0.0.1", 9001))
        with pytest.raises(
            AddressInUseError, match=r"127\.0\.0\.1:9001 is advertised by live broker 1"
        ):
            await other.register("10.0.0.3", 9000, None, taken)
        await _until(lambda: node.store.image.brokers.keys() == {1})
        await other.register("10.0.0.2", 9002, None)
        await _until(lambda: node.store.image.brokers.keys() == {1, 2})
        for task in other._tasks:
            task.cancel()


@_sync
async def test_topics_created_through_any_broker_appear_everywhere_once() -> None:
    kv = MemoryKV()
    async with _cluster(kv) as nodes:
        brokers: dict[int, str | None] = {1: None, 2: None, 3: None}
        topic = _topic("orders", assign_replicas(brokers, 6, 3))
        await nodes[1].store.create_topic(topic)
        await _until(lambda: all("orders" in n.store.topics for n in nodes))
        assert all(len(n.store.topics["orders"].partitions) == 6 for n in nodes)
        with pytest.raises(TopicAlreadyExistsError):
            await nodes[2].store.create_topic(_topic("orders", {0: [1]}))
        # More partitions than one etcd transaction holds.
        big = _topic("big", assign_replicas(brokers, 250, 2))
        await nodes[0].store.create_topic(big)
        await _until(lambda: len(nodes[2].store.topics.get("big", big).partitions) == 250)
        await nodes[0].store.delete_topic("orders")
        await _until(lambda: all("orders" not in n.store.topics for n in nodes))
        assert not [k for k in kv.entries if str(topic.topic_id) in k]


@_sync
async def test_a_dead_leader_is_replaced_from_the_isr_with_a_new_epoch() -> None:
    kv = MemoryKV()
    async with _cluster(kv) as nodes:
        topic = _topic("t", {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
        await nodes[0].store.create_topic(topic)
        await _until(lambda: nodes[1].store.image.controller_id != -1)
        victim = nodes[0]
        await victim.crash(kv)
        survivor = nodes[1].store
        await _until(lambda: all(s.leader != 1 for s in survivor.topics["t"].partitions.values()))
        await _until(lambda: all(1 not in s.isr for s in survivor.topics["t"].partitions.values()))
        p0 = survivor.topics["t"].partitions[0]
        assert (p0.leader, p0.leader_epoch, p0.isr) == (2, 1, [2, 3])
        p1 = survivor.topics["t"].partitions[1]
        assert (p1.leader, p1.leader_epoch) == (2, 0)  # its leader lived: same epoch


@_sync
async def test_a_replica_reported_offline_leaves_the_isr_and_leadership_of_that_partition() -> None:
    kv = MemoryKV()
    async with _cluster(kv) as nodes:
        topic = _topic("t", {0: [1, 2, 3], 1: [3, 1, 2], 2: [2, 3, 1]})
        await nodes[0].store.create_topic(topic)
        await _until(lambda: nodes[1].store.image.controller_id != -1)
        # Broker 3's replicas of t-0 (a follower) and t-1 (the leader) went offline; its
        # replica of t-2 is fine.
        await nodes[2].store.report_offline_replicas(
            frozenset({(topic.topic_id, 0), (topic.topic_id, 1)})
        )
        seen = nodes[0].store
        await _until(lambda: 3 not in seen.topics["t"].partitions[0].isr)
        await _until(lambda: seen.topics["t"].partitions[1].leader != 3)
        p0, p1, p2 = (seen.topics["t"].partitions[i] for i in range(3))
        assert (p0.leader, p0.leader_epoch, p0.isr) == (1, 0, [1, 2])
        assert (p1.leader, p1.leader_epoch, p1.isr) == (1, 1, [1, 2])
        assert (p2.leader, p2.isr) == (2, [2, 3, 1])  # untouched
        assert seen.image.brokers[3].electable  # the broker itself stays in service


@_sync
async def test_the_controller_is_replaced_when_it_dies() -> None:
    kv = MemoryKV()
    async with _cluster(kv) as nodes:
        await _until(lambda: nodes[0].store.image.controller_id != -1)
        first = nodes[0].store.image.controller_id
        await nodes[first - 1].crash(kv)
        others = [n for n in nodes if n.store.node_id != first]
        await _until(lambda: others[0].store.image.controller_id not in (-1, first))
        assert sum(n.controller.active for n in others) == 1


@_sync
async def test_a_deposed_controller_cannot_write() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 2) as nodes:
        await _until(lambda: any(n.controller.active for n in nodes))
        old = next(n for n in nodes if n.controller.active)
        stale_epoch = old.controller.epoch
        # Its key goes (lease expired) and another broker takes the controllership,
        # before the old one has noticed anything.
        await kv.expire(old.store.lease)
        await _until(lambda: any(n.controller.active for n in nodes if n is not old))
        new = next(n for n in nodes if n is not old)
        topic = _topic("x", {0: [new.store.node_id]})  # nothing for the controller to change
        await new.store.create_topic(topic)
        guard = Compare.created_at(old.store.layout.controller, stale_epoch)
        state = PartitionState([1, 2], old.store.node_id, 7, [old.store.node_id], 3)
        rev = new.store.image.partition_revisions[(topic.topic_id, 0)]
        assert await old.store.write_partitions([(topic.topic_id, 0, rev, state)], guard) is None
        # The same write under the live controller's token goes through: only the token
        # refused it.
        live = Compare.created_at(new.store.layout.controller, new.controller.epoch)
        assert await new.store.write_partitions([(topic.topic_id, 0, rev, state)], live)


@_sync
async def test_a_live_node_id_cannot_register_twice() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 1):
        twin = ClusterMetadataStore(kv, "t", 1)
        await twin.start()
        with pytest.raises(NodeIdInUseError, match="node id 1 is already registered"):
            await twin.register("127.0.0.1", 9999, None)


@_sync
async def test_malformed_values_are_skipped_not_fatal() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 1) as nodes:
        store = nodes[0].store
        await kv.txn([], [Put("/t/brokers/7", b"{not json")])
        await kv.txn([], [Put("/t/brokers/8", json.dumps({"host": "h", "port": -5}).encode())])
        for node_id, offline in ((9, [["not-a-uuid", 0]]), (10, [[str(uuid.uuid4()), -1]])):
            value = {"host": "h", "port": 1, "state": "running", "offline": offline}
            await kv.txn([], [Put(f"/t/brokers/{node_id}", json.dumps(value).encode())])
        await kv.txn([], [Put("/t/topics/bad name!", b"{}")])
        tid = uuid.uuid4()
        await kv.txn(
            [], [Put("/t/topics/ok", json.dumps({"topic_id": str(tid), "partitions": 1}).encode())]
        )
        await kv.txn(
            [],
            [
                Put(
                    f"/t/partitions/{tid}/0",
                    json.dumps(
                        {
                            "replicas": [1],
                            "leader": 5,
                            "isr": [1],
                            "leader_epoch": 0,
                            "partition_epoch": 0,
                        }
                    ).encode(),
                )
            ],
        )
        await _until(lambda: "ok" in store.topics)
        await asyncio.sleep(0.05)
        assert set(store.image.brokers) == {1}
        assert "bad name!" not in store.topics
        assert store.topics["ok"].partitions == {}  # leader outside its ISR: refused


@_sync
async def test_producer_ids_are_unique_across_brokers() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 2) as nodes:
        ids = []
        for _ in range(1500):
            ids.append(await nodes[0].store.allocate_producer_id())
            ids.append(await nodes[1].store.allocate_producer_id())
        assert len(set(ids)) == len(ids)


@_sync
async def test_a_watch_that_lost_its_history_lists_again() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 2) as nodes:
        store = nodes[1].store
        watch = next(t for t in store._tasks if t.get_name() == "metadata-watch")
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        # Changes this broker missed, and then the history that held them is compacted.
        await nodes[0].store.create_topic(_topic("missed", {0: [1, 2]}))
        kv.compact(kv.revision)
        assert "missed" not in store.topics
        store._tasks.append(asyncio.create_task(store._follow()))
        await _until(lambda: "missed" in store.topics, 10)
        await nodes[0].store.create_topic(_topic("after", {0: [1, 2]}))
        await _until(lambda: "after" in store.topics, 10)


class _UnansweredRenewals(MemoryKV):
    """etcd electing a new leader: the next ``failing`` renewals go unanswered."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = 0
        self.calls: list[float] = []

    async def keepalive(self, lease: int) -> int:
        self.calls.append(asyncio.get_running_loop().time())
        if self.failing:
            self.failing -= 1
            raise StoreUnavailableError("etcd lease keepalive (UNAVAILABLE)")
        return await super().keepalive(lease)


@_sync
async def test_a_failed_lease_renewal_is_tried_again_at_once_not_a_heartbeat_later() -> None:
    """Each second a renewal waits is a second less of the lease (3 s): losing the etcd
    leader costs a second or two of unanswered renewals, and a broker that retried only
    at its next heartbeat fenced itself although etcd was back."""
    kv = _UnansweredRenewals()
    store = ClusterMetadataStore(kv, "t", 1, heartbeat_interval_ms=1000)
    await store.start()
    await store.register("127.0.0.1", 9001, None)
    try:
        await _until(lambda: len(kv.calls) >= 1, 3)
        kv.failing = 2
        await _until(lambda: len(kv.calls) >= 4, 5)
        retries = [b - a for a, b in pairwise(kv.calls[1:4])]
        assert all(gap < 0.5 for gap in retries), retries
        assert store.lease_trusted()
        # etcd away for long: the retries double back to a heartbeat, not ten a second.
        kv.failing = 6
        before = len(kv.calls)
        await _until(lambda: len(kv.calls) >= before + 7, 8)
        gaps = [b - a for a, b in pairwise(kv.calls[before : before + 7])]
        wanted = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
        assert all(w - 0.01 <= g < w + 0.3 for g, w in zip(gaps, wanted, strict=True)), gaps
    finally:
        for task in store._tasks:
            task.cancel()


@_sync
async def test_a_lapsed_lease_counts_as_quorum_lost_only_while_etcd_says_so() -> None:
    """#30: renewals unanswered and the lease run out: QUORUM_LOST while etcd's members
    answer that they have no leader; LAPSED as soon as a probe finds one with a leader
    (not when the evidence expires, 2 s here), and after the process stood still; TRUSTED
    once a renewal is answered."""
    kv = _UnansweredRenewals()
    store = ClusterMetadataStore(kv, "t", 1, session_timeout_ms=4000, heartbeat_interval_ms=1000)
    await store.start()
    await store.register("127.0.0.1", 9001, None)
    try:
        assert store.lease_state() is LeaseState.TRUSTED
        kv.failing = 10**6
        kv.leaderless = True
        await _until(lambda: store.lease_state() is not LeaseState.TRUSTED, 6)
        assert store.lease_state() is LeaseState.QUORUM_LOST
        kv.leaderless = False  # etcd has a leader again, and we cannot reach it
        found = asyncio.get_running_loop().time()
        await _until(lambda: store.lease_state() is LeaseState.LAPSED, 3)
        assert asyncio.get_running_loop().time() - found < 1.0  # the next probe, not 2 s
        kv.leaderless = True
        await _until(lambda: store.lease_state() is LeaseState.QUORUM_LOST, 3)
        time.sleep(1.2)  # the whole process stands still (a pause, SIGSTOP)
        # The evidence (under 2 s old) still stands; the stall alone makes it LAPSED, and
        # before the tick task has run again.
        assert store.lease_state() is LeaseState.LAPSED
        await asyncio.sleep(0.5)
        assert store.lease_state() is LeaseState.LAPSED  # until a renewal is answered
        kv.failing = 0
        await _until(lambda: store.lease_state() is LeaseState.TRUSTED, 3)
    finally:
        for task in store._tasks:
            task.cancel()


class _CountingKV(MemoryKV):
    def __init__(self) -> None:
        super().__init__()
        self.txns = 0

    async def txn(self, compares, ops):  # type: ignore[no-untyped-def]
        self.txns += 1
        return await super().txn(compares, ops)


@_sync
async def test_isr_changes_proposed_together_are_written_in_few_transactions() -> None:
    # A broker back from a restart proposes an ISR change for each of its partitions at
    # once: one etcd transaction each made that take minutes at 10,000 partitions.
    kv = _CountingKV()
    async with _cluster(kv, 2) as nodes:
        store = nodes[0].store
        topic = _topic("t", {p: [1, 2] for p in range(250)})
        await store.create_topic(topic)
        before = kv.txns
        results = await asyncio.gather(*(store.alter_isr("t", p, 0, [1]) for p in range(250)))
        assert all(results)
        assert kv.txns - before <= 3  # 99 changes (and the guard) to a transaction
        assert all(s.isr == [1] for s in store.topics["t"].partitions.values())


@_sync
async def test_a_batch_of_isr_changes_with_one_stale_writes_the_others() -> None:
    kv = MemoryKV()
    async with _cluster(kv, 2) as nodes:
        store = nodes[0].store
        await store.create_topic(_topic("t", {p: [1, 2] for p in range(5)}))
        stale = store.alter_isr("t", 3, 0, [1])
        # Partition 3 moves after its change was computed and before it is written.
        topic_id = store.topics["t"].topic_id
        key = store.layout.partition(topic_id, 3)
        moved = PartitionState([1, 2], 1, 0, [1, 2], partition_epoch=7)
        others = [store.alter_isr("t", p, 0, [1]) for p in (0, 1, 2, 4)]
        tasks = [asyncio.ensure_future(c) for c in (stale, *others)]
        await asyncio.sleep(0)  # every change queued, none written yet
        await kv.txn([], [Put(key, encode_partition(moved))])
        results = await asyncio.gather(*tasks)
        assert results == [False, True, True, True, True]
        isrs = {p: s.isr for p, s in store.topics["t"].partitions.items()}
        assert isrs == {0: [1], 1: [1], 2: [1], 3: [1, 2], 4: [1]}


class _SlowKV(MemoryKV):
    """etcd's commit takes time: how many transactions are in flight at once, and what
    each carried."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0
        self.slow = False
        self.written: list[list[Put]] = []

    async def txn(self, compares, ops):  # type: ignore[no-untyped-def]
        if not self.slow:
            return await super().txn(compares, ops)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.02)
            self.written.append([op for op in ops if isinstance(op, Put)])
            return await super().txn(compares, ops)
        finally:
            self.in_flight -= 1


@_sync
async def test_a_brokers_death_is_written_in_concurrent_batches_new_leaders_first() -> None:
    # 300 partitions: broker 1 leads 100, follows 200. Its death is 300 changes, three
    # batches; one after another they made a failover at 10,000 partitions take 21 s.
    kv = _SlowKV()
    async with _cluster(kv) as nodes:
        assignment = {p: [1 + (p + i) % 3 for i in range(3)] for p in range(300)}
        await nodes[0].store.create_topic(_topic("t", assignment))
        await _until(lambda: nodes[1].store.image.controller_id != -1)
        victim = next(n for n in nodes if n.store.image.controller_id != n.store.node_id)
        kv.slow = True
        await victim.crash(kv)
        survivor = next(n for n in nodes if n is not victim).store
        dead = victim.store.node_id
        await _until(
            lambda: all(
                dead not in s.isr and s.leader != dead
                for s in survivor.topics["t"].partitions.values()
            )
        )
        assert kv.most_in_flight >= 3, kv.most_in_flight
        partition_batches = [b for b in kv.written if len(b) >= 50]
        first = [decode_partition(op.value) for op in partition_batches[0]]
        assert all(state.leader != dead and state.leader_epoch == 1 for state in first)


class _LaggingWatchKV(MemoryKV):
    """Every watch answer reaches the brokers ``lag`` seconds late: an image behind
    etcd, as on a loaded machine with 30,000 partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.lag = 0.0

    async def watch(self, prefix, start_revision):  # type: ignore[no-untyped-def]
        async for events in super().watch(prefix, start_revision):
            await asyncio.sleep(self.lag)
            yield events


@pytest.mark.timeout(60)
@_sync
async def test_an_isr_change_written_while_the_image_lags_past_five_seconds_succeeds() -> None:
    # A leader that gave up waiting for its own committed change (5 s) called it not
    # written and proposed it again from a staler image; it now waits for it longer.
    kv = _LaggingWatchKV()
    async with _cluster(kv, 2) as nodes:
        store = nodes[0].store
        await store.create_topic(_topic("t", {0: [1, 2]}))
        kv.lag = 6.0
        assert await store.alter_isr("t", 0, 0, [1])
        assert store.topics["t"].partitions[0].isr == [1]
