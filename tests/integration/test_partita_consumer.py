"""partita's consumer (assign mode) against a real broker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from partita.client.consumer import AsyncConsumer
from partita.errors import CorruptRecordError
from partita.protocol.record_batch import read_header
from tests.integration.clients import create_topic, produce
from tests.integration.conftest import BrokerProcess


def test_assign_seek_pause_and_offsets_for_times(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "cons", partitions=2)
    base = int(time.time() * 1000) - 10_000
    produce(
        broker.bootstrap,
        "cons",
        [
            {
                "value": b"%d" % i,
                "key": b"k",
                "partition": i % 2,
                "timestamp": base + i,
                "headers": [("i", b"%d" % i)],
            }
            for i in range(200)
        ],
        **{"compression.type": "zstd"},
    )

    async def run() -> None:
        async with AsyncConsumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("cons", 0), ("cons", 1)])
            seen: dict[int, list[int]] = {0: [], 1: []}
            deadline = time.monotonic() + 20
            while sum(map(len, seen.values())) < 200 and time.monotonic() < deadline:
                for r in await consumer.getmany(500):
                    seen[r.partition].append(r.offset)
                    assert r.value == b"%d" % (r.offset * 2 + r.partition)
                    assert r.headers == [("i", r.value)]
                    assert r.timestamp == base + int(r.value)
            assert seen == {0: list(range(100)), 1: list(range(100))}
            assert await consumer.position(("cons", 0)) == 100
            consumer.seek(("cons", 0), 90)
            consumer.pause(("cons", 1))
            batch = await consumer.getmany(2000)
            assert [r.offset for r in batch] == list(range(90, 100))
            assert {r.partition for r in batch} == {0}
            found = await consumer.offsets_for_times({("cons", 1): base + 51})
            assert found[("cons", 1)] == (25, base + 51)
            assert (await consumer.offsets_for_times({("cons", 1): base + 10**6}))[
                ("cons", 1)
            ] is None
            assert await consumer.end_offsets([("cons", 0)]) == {("cons", 0): 100}
            await consumer.seek_to_beginning(("cons", 1))
            consumer.resume(("cons", 1))
            again = await consumer.getmany(2000)
            assert again[0].partition == 1 and again[0].offset == 0

    asyncio.run(run())


def test_latest_reset_sees_only_new_records(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "tail")
    produce(broker.bootstrap, "tail", [{"value": b"old", "partition": 0}] * 5)

    async def run() -> list[bytes | None]:
        async with AsyncConsumer(broker.bootstrap, auto_offset_reset="latest") as consumer:
            consumer.assign([("tail", 0)])
            assert await consumer.position(("tail", 0)) == 5
            produce(broker.bootstrap, "tail", [{"value": b"new", "partition": 0}])
            records = await consumer.getmany(5000)
            return [r.value for r in records]

    assert asyncio.run(run()) == [b"new"]


def test_pause_and_seek_keep_every_record_while_fetching_ahead(broker: BrokerProcess) -> None:
    """Records fetched ahead but not handed out are neither lost by pause() nor delivered
    after a seek() that moved away from them."""
    create_topic(broker.bootstrap, "ahead", partitions=1)
    produce(broker.bootstrap, "ahead", [{"value": b"%d" % i, "partition": 0} for i in range(300)])
    tp = ("ahead", 0)

    async def run() -> None:
        async with AsyncConsumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([tp])
            first = await consumer.getmany(5000, max_records=10)
            assert [r.offset for r in first] == list(range(10))
            consumer.pause(tp)  # 290 records sit in the buffer or in flight
            assert await consumer.getmany(300) == []
            consumer.resume(tp)
            rest: list[int] = []
            while len(rest) < 290:
                batch = await consumer.getmany(5000, max_records=50)
                assert batch, "records were lost across pause/resume"
                rest += [r.offset for r in batch]
            assert rest == list(range(10, 300))
            assert await consumer.position(tp) == 300

            consumer.seek(tp, 120)  # a fetch ahead may be in flight from offset 300
            moved = await consumer.getmany(5000, max_records=5)
            assert [r.offset for r in moved] == list(range(120, 125))
            assert await consumer.position(tp) == 125

    asyncio.run(run())


def test_commit_async_reports_through_its_callback(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "ca", partitions=1)
    produce(broker.bootstrap, "ca", [{"value": b"%d" % i, "partition": 0} for i in range(50)])
    reports: list[tuple[dict[tuple[str, int], int], BaseException | None]] = []

    async def run() -> dict[tuple[str, int], int]:
        async with AsyncConsumer(
            broker.bootstrap,
            group_id="async-committers",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        ) as consumer:
            consumer.subscribe(["ca"])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 20 and time.monotonic() < deadline:
                seen += len(await consumer.getmany(1000, max_records=20 - seen))
            task = consumer.commit_async(callback=lambda o, e: reports.append((o, e)))
            assert not task.done()  # it returned before the coordinator answered
            await task
            return await consumer.committed([("ca", 0)])

    assert asyncio.run(run()) == {("ca", 0): 20}
    assert reports == [({("ca", 0): 20}, None)]


def _produce_blocks(bootstrap: str, topic: str, blocks: list[bool], per_block: int) -> None:
    """Blocks of records, each flushed on its own (so each is its own batch), with or
    without headers as ``blocks`` says."""
    n = 0
    for with_headers in blocks:
        records: list[dict[str, Any]] = []
        for _ in range(per_block):
            record: dict[str, Any] = {"value": b"%d" % n, "partition": 0}
            if with_headers:
                record["headers"] = [("n", b"%d" % n), ("tag", b"x")]
            records.append(record)
            n += 1
        produce(bootstrap, topic, records)


def test_records_with_and_without_headers_interleaved(broker: BrokerProcess) -> None:
    # Small fetches that mix records with and without headers: each record keeps its
    # own headers, and those without get none.
    create_topic(broker.bootstrap, "mixed-headers")
    blocks = [False, True, True, False, True, False]
    _produce_blocks(broker.bootstrap, "mixed-headers", blocks, 200)

    async def run() -> list[Any]:
        async with AsyncConsumer(
            broker.bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=3000
        ) as consumer:
            consumer.assign([("mixed-headers", 0)])
            got: list[Any] = []
            deadline = time.monotonic() + 20
            while len(got) < 1200 and time.monotonic() < deadline:
                got += await consumer.getmany(500)
            return got

    got = asyncio.run(run())
    assert [r.offset for r in got] == list(range(1200))
    for r in got:
        assert r.value == b"%d" % r.offset
        if blocks[r.offset // 200]:
            assert list(r.headers) == [("n", r.value), ("tag", b"x")]
        else:
            assert list(r.headers) == []


def test_a_corrupt_batch_with_headers_is_refused(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "corrupt-headers")
    _produce_blocks(broker.bootstrap, "corrupt-headers", [True, True, True], 20)
    segment = broker.data_dir / "corrupt-headers-0" / ("0" * 20 + ".log")
    data = bytearray(segment.read_bytes())
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += read_header(data, pos).size
    assert len(positions) == 3
    # The last byte of the third batch (its last header's value): covered by the CRC.
    last = positions[2] + read_header(data, positions[2]).size - 1
    with segment.open("r+b") as f:
        f.seek(last)
        f.write(bytes([data[last] ^ 0xFF]))

    async def run() -> list[Any]:
        # A fetch too small for two batches: records with headers are delivered first,
        # then the corrupt batch arrives in a fetch of its own and must be refused.
        async with AsyncConsumer(
            broker.bootstrap,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=positions[1] + 10,
        ) as consumer:
            consumer.assign([("corrupt-headers", 0)])
            got: list[Any] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                got += await consumer.getmany(500)
            return got

    with pytest.raises(CorruptRecordError, match="CRC"):
        asyncio.run(run())
