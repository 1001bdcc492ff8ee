"""The broker's lease is renewed from a thread of its own (#30): work that holds the
broker's event loop longer than the lease (opening ten thousand partitions, a Metadata
answer for them) no longer lapses it, while a process that stands still still does."""

from __future__ import annotations

import asyncio
import time

import pytest

from partita.cluster.cluster_store import ClusterMetadataStore
from partita.cluster.etcd_kv import EtcdKV
from partita.local.cluster import EtcdProcess


async def _registered(endpoint: str, node_id: int) -> ClusterMetadataStore:
    store = ClusterMetadataStore(
        EtcdKV([endpoint]), "lease", node_id, session_timeout_ms=2000, heartbeat_interval_ms=500
    )
    await store.kv.connect()
    await store.start()
    await store.register("127.0.0.1", 9092 + node_id, None)
    return store


@pytest.mark.timeout(60)
def test_a_loop_held_past_the_lease_keeps_it(etcd_member: EtcdProcess) -> None:
    async def scenario() -> None:
        store = await _registered(etcd_member.endpoint, 1)
        try:
            held_until = time.monotonic() + 3 * store.ttl  # 6 s on a 2 s lease
            while time.monotonic() < held_until:
                time.sleep(0.05)  # the loop does nothing else meanwhile
                assert store.lease_trusted(), "the lease lapsed while the loop was held"
            key = store.layout.broker(1)
            entry = await store.kv.get(key)
            assert entry is not None, "etcd expired the registration"
            assert not store.lease_lost.is_set()
        finally:
            await store.stop()

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_renewals_that_stop_still_lapse_the_lease(etcd_member: EtcdProcess) -> None:
    # The thread renews only while etcd answers: with etcd stopped, the lease runs out
    # on the broker's side at its TTL, as before (the broker fences itself).
    async def scenario() -> None:
        store = await _registered(etcd_member.endpoint, 2)
        try:
            assert store.lease_trusted()
            etcd_member.kill()
            started = time.monotonic()
            while store.lease_trusted() and time.monotonic() - started < 10:
                await asyncio.sleep(0.05)
            assert not store.lease_trusted()
            assert time.monotonic() - started <= store.ttl + 1.0
        finally:
            await store.stop()

    asyncio.run(scenario())
