"""The producer keeps several batches in flight per partition; connections cut under it
must not lose, duplicate or reorder an acknowledged record (idempotence on)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from partita.client.consumer import AsyncConsumer
from partita.client.producer import AsyncProducer
from tests.faults.cutting_proxy import CuttingProxy
from tests.integration.conftest import BrokerProcess

RECORDS = 40_000
PARTITIONS = 3  # several partitions race to reconnect after every cut
CUT_EVERY = 4_000  # records sent between the cuts made by progress


async def _produce_through_cuts(proxy: CuttingProxy) -> tuple[list[int], int]:
    async with AsyncProducer(
        proxy.address,
        acks="all",
        linger_ms=1,
        batch_size=2048,  # ~100 records a batch: hundreds of batches, several in flight
        retry_backoff_ms=10,
        max_in_flight_requests_per_connection=5,
    ) as producer:
        assert producer.idempotent

        async def cut_repeatedly() -> None:
            while True:
                await asyncio.sleep(0.02)
                proxy.cut()

        cutter = asyncio.create_task(cut_repeatedly())
        futures = []
        for i in range(RECORDS):
            futures.append(
                await producer.send("cuts", f"{i:08d}".encode(), partition=i % PARTITIONS)
            )
            if i % CUT_EVERY == CUT_EVERY - 1:
                # Also by progress, not only by the clock: a fast producer must not
                # finish between two timed cuts.
                proxy.cut()
        await producer.flush()
        cutter.cancel()
    return [f.result().offset for f in futures], proxy.cuts


async def _read_back(bootstrap: str) -> dict[int, list[bytes | None]]:
    values: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
    async with AsyncConsumer(bootstrap) as consumer:
        consumer.assign([("cuts", p) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            consumer.seek(("cuts", p), 0)
        while sum(map(len, values.values())) < RECORDS + 1:
            batch = await consumer.getmany(timeout_ms=2000)
            if not batch:
                break
            for r in batch:
                values[r.partition].append(r.value)
    return values


def test_no_loss_duplicate_or_reorder_when_connections_are_cut(tmp_path: Path) -> None:
    proxy = CuttingProxy()
    broker = BrokerProcess(
        tmp_path / "data",
        {"advertised.listeners": f"PLAINTEXT://{proxy.address}", "num.partitions": "3"},
    )
    broker.start()
    try:

        async def scenario() -> tuple[list[int], int, dict[int, list[bytes | None]]]:
            await proxy.start(broker.port)
            offsets, cuts = await _produce_through_cuts(proxy)
            values = await _read_back(proxy.address)
            await proxy.close()
            return offsets, cuts, values

        offsets, cuts, values = asyncio.run(scenario())
    finally:
        broker.close()
    assert cuts >= 3, f"only {cuts} cuts hit open connections: the test proved nothing"
    # Every record acknowledged at the offset of its position in its partition...
    assert offsets == [i // PARTITIONS for i in range(RECORDS)]
    # ...and each partition's log holds each of its records exactly once, in order.
    for p in range(PARTITIONS):
        assert values[p] == [f"{i:08d}".encode() for i in range(p, RECORDS, PARTITIONS)]
