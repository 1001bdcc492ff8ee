"""partita's own producer against a real broker, read back with confluent-kafka."""

from __future__ import annotations

import asyncio

import pytest

from partita.client.murmur2 import partition_for_key
from partita.client.producer import AsyncProducer, RecordMetadata
from tests.integration.clients import consume_all, create_topic
from tests.integration.conftest import BrokerProcess


async def produce_all(bootstrap: str, topic: str, n: int, **config: object) -> list[RecordMetadata]:
    async with AsyncProducer(bootstrap, **config) as producer:  # type: ignore[arg-type]
        futures = [
            await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7), headers=[("n", b"%d" % i)])
            for i in range(n)
        ]
        await producer.flush()
    return [f.result() for f in futures]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_keyed_records_land_where_java_puts_them(broker: BrokerProcess, codec: str) -> None:
    topic = f"pp-{codec}"
    create_topic(broker.bootstrap, topic, partitions=4)
    metas = asyncio.run(produce_all(broker.bootstrap, topic, 2000, compression_type=codec))
    for i, meta in enumerate(metas):
        assert meta.partition == partition_for_key(b"k%d" % (i % 7), 4)
    per_partition: dict[int, list[int]] = {}
    for meta in metas:
        per_partition.setdefault(meta.partition, []).append(meta.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    got = consume_all(broker.bootstrap, topic, [0, 1, 2, 3], 2000)
    by_position = {(m.partition(), m.offset()): m for m in got}
    for i, meta in enumerate(metas):
        message = by_position[(meta.partition, meta.offset)]
        assert message.value() == b"v%d" % i
        assert message.headers() == [("n", b"%d" % i)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks_levels(broker: BrokerProcess, acks: object) -> None:
    topic = f"acks-{acks}"
    create_topic(broker.bootstrap, topic)
    metas = asyncio.run(produce_all(broker.bootstrap, topic, 100, acks=acks))
    assert len(metas) == 100
    if acks == 0:
        assert all(m.offset == -1 for m in metas)  # nothing to report without an answer
    else:
        assert [m.offset for m in metas] == list(range(100))
    assert len(consume_all(broker.bootstrap, topic, [0], 100)) == 100


def test_explicit_and_custom_partitions(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "routed", partitions=3)

    async def run() -> list[int]:
        async with AsyncProducer(
            broker.bootstrap, partitioner=lambda t, k, v, n: n - 1
        ) as producer:
            explicit = await producer.send("routed", b"x", partition=0)
            custom = await producer.send("routed", b"y", key=b"anything")
            await producer.flush()
            return [explicit.result().partition, custom.result().partition]

    assert asyncio.run(run()) == [0, 2]


def test_unknown_partition_is_refused_before_sending(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "small")

    async def run() -> None:
        async with AsyncProducer(broker.bootstrap) as producer:
            await producer.send("small", b"x", partition=5)

    with pytest.raises(ValueError, match="does not exist"):
        asyncio.run(run())


def test_a_refused_batch_does_not_break_the_partitions_sequence(broker: BrokerProcess) -> None:
    # An idempotent producer numbers every batch; the broker refuses one (too large) and
    # still expects its sequence. The batches behind it, some already in flight, must be
    # renumbered and land, in order, instead of failing OUT_OF_ORDER_SEQUENCE_NUMBER.
    create_topic(broker.bootstrap, "seq", **{"max.message.bytes": "4000"})

    async def run() -> list[asyncio.Future[RecordMetadata]]:
        async with AsyncProducer(broker.bootstrap, batch_size=600, linger_ms=0) as producer:
            assert producer.idempotent
            futures = [await producer.send("seq", b"a%03d" % i, partition=0) for i in range(300)]
            futures.append(await producer.send("seq", b"x" * 6000, partition=0))
            futures += [await producer.send("seq", b"b%03d" % i, partition=0) for i in range(300)]
            await producer.flush()
        return futures

    futures = asyncio.run(run())
    refused = futures[300].exception()
    assert refused is not None and getattr(refused, "code", None) == 10  # MESSAGE_TOO_LARGE
    delivered = [f.result() for i, f in enumerate(futures) if i != 300]
    assert [m.offset for m in delivered] == list(range(600))
    values = [m.value() for m in consume_all(broker.bootstrap, "seq", [0], 600)]
    assert values == [b"a%03d" % i for i in range(300)] + [b"b%03d" % i for i in range(300)]
