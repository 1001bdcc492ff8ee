"""partita's etcd client against a real etcd member."""

from __future__ import annotations

import asyncio

import pytest

from partita.cluster.etcd_kv import EtcdKV
from partita.cluster.kv import Put
from partita.local.cluster import EtcdProcess


@pytest.mark.timeout(60)
def test_a_prefix_larger_than_one_grpc_answer_is_listed_whole(etcd_member: EtcdProcess) -> None:
    # A cluster of 30,000 partitions held 4.7 MB under its prefix: listed in one answer,
    # it exceeded gRPC's 4 MiB limit and a restarting broker could not start.
    value = b"x" * 250  # a partition's state is about this size
    keys = 20_000  # 5.4 MB with the keys: ten pages

    async def scenario() -> None:
        kv = EtcdKV([etcd_member.endpoint])
        await kv.connect()
        try:
            step = kv.max_txn_ops
            for start in range(0, keys, step):
                ops = [Put(f"/big/k{i:05d}", value) for i in range(start, start + step)]
                await kv.txn([], ops)
            await kv.txn([], [Put("/bigger", b"outside the prefix")])
            entries, revision = await kv.range("/big/")
            assert [e.key for e in entries] == [f"/big/k{i:05d}" for i in range(keys)]
            assert all(e.value == value for e in entries)
            assert revision > 0
        finally:
            await kv.close()

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_a_listing_in_pages_reads_one_revision(
    etcd_member: EtcdProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keys written between two pages must not appear: the image is the store's state
    # at one revision, and its watch starts from the next.
    monkeypatch.setattr("partita.cluster.etcd_kv.RANGE_PAGE_KEYS", 10)

    async def scenario() -> None:
        kv = EtcdKV([etcd_member.endpoint])
        writer = EtcdKV([etcd_member.endpoint])
        await kv.connect()
        await writer.connect()
        try:
            await kv.txn([], [Put(f"/p/k{i:03d}", b"v") for i in range(35)])
            real_get = kv._kv.get
            pages = 0

            async def get_then_write(*args, **kwargs):  # type: ignore[no-untyped-def]
                nonlocal pages
                pages += 1
                answer = await real_get(*args, **kwargs)
                await writer.txn([], [Put(f"/p/k{100 + pages:03d}", b"late")])
                return answer

            monkeypatch.setattr(kv._kv, "get", get_then_write)
            entries, _revision = await kv.range("/p/")
            assert pages == 4
            assert [e.key for e in entries] == [f"/p/k{i:03d}" for i in range(35)]
        finally:
            await kv.close()
            await writer.close()

    asyncio.run(scenario())
