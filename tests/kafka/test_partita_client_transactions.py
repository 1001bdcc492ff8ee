"""partita's own transactional producer and read_committed consumer (#29), against a
partita broker and against Apache Kafka in the same run: what works against Kafka is
Kafka's protocol, not an agreement between partita's client and broker.

- Committed transactions are read once and aborted ones never, by partita's consumer and
  by librdkafka's (read_committed); read_uncommitted sees everything.
- Consume-transform-produce: the group's offsets committed with the transaction become
  visible only when it commits, and an abort leaves them where they were.
- A second producer with the same transactional id fences the first, whose transaction
  is aborted and whose commit fails for good.
- Misuse (sending outside a transaction, committing none) is refused with a clear error.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partita.client.consumer import AsyncConsumer
from partita.client.producer import AsyncProducer
from partita.client.transactions import TransactionError

pytestmark = pytest.mark.kafka


@pytest.fixture(params=["partita", "kafka"])
def bootstrap(request: pytest.FixtureRequest) -> str:
    server = request.getfixturevalue(request.param)
    return str(server.bootstrap)


def new_topic(bootstrap: str, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


async def read_all(bootstrap: str, topic: str, isolation: str, partitions: int = 2) -> list[bytes]:
    """Every value partita's consumer reads from the start up to the end it is allowed."""
    consumer = AsyncConsumer(bootstrap, isolation_level=isolation, client_id="auditor")
    await consumer.start()
    try:
        tps = [(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        values: list[bytes] = []
        async with asyncio.timeout(30):
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                batches = await consumer.getmany(timeout_ms=200)
                values += [r.value or b"" for r in batches]
        return values
    finally:
        await consumer.stop()


def librdkafka_reads(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"audit-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
    values: list[bytes] = []
    try:
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
            if len(values) > expect:
                break
            if len(values) == expect:
                extra = consumer.poll(0.5)  # a value too many shows here
                if extra is not None and not extra.error():
                    values.append(extra.value())
                break
    finally:
        consumer.close()
    return values


def transactional(bootstrap: str, tid: str, **settings: Any) -> AsyncProducer:
    return AsyncProducer(bootstrap, transactional_id=tid, linger_ms=2, **settings)


def test_committed_is_read_once_and_aborted_never(bootstrap: str) -> None:
    topic = new_topic(bootstrap)

    async def write() -> None:
        async with transactional(bootstrap, f"writer-{topic}") as producer:
            await producer.init_transactions()
            for label, count, commit in (("a", 10, True), ("b", 5, False), ("c", 3, True)):
                producer.begin_transaction()
                for i in range(count):
                    await producer.send(topic, f"{label}{i}".encode(), key=str(i).encode())
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()

    asyncio.run(write())
    committed = sorted([f"a{i}".encode() for i in range(10)] + [f"c{i}".encode() for i in range(3)])
    assert sorted(asyncio.run(read_all(bootstrap, topic, "read_committed"))) == committed
    everything = asyncio.run(read_all(bootstrap, topic, "read_uncommitted"))
    assert len(everything) == 18 and len(set(everything)) == 18
    assert sorted(librdkafka_reads(bootstrap, topic, 13)) == committed


def test_consume_transform_produce_commits_offsets_with_the_output(bootstrap: str) -> None:
    source, sink = new_topic(bootstrap, 1), new_topic(bootstrap, 1)
    group = f"transformer-{source}"

    async def run() -> tuple[dict[Any, int], dict[Any, int]]:
        async with AsyncProducer(bootstrap) as plain:
            for i in range(20):
                await plain.send(source, f"in{i}".encode(), partition=0)
            await plain.flush()
        async with transactional(bootstrap, f"transformer-{source}") as producer:
            await producer.init_transactions()
            # An aborted step: its offsets never become the group's.
            producer.begin_transaction()
            await producer.send(sink, b"discarded", partition=0)
            await producer.send_offsets_to_transaction({(source, 0): 10}, group)
            await producer.abort_transaction()
            after_abort = await committed(bootstrap, group, source)
            producer.begin_transaction()
            for i in range(20):
                await producer.send(sink, f"out{i}".encode(), partition=0)
            await producer.send_offsets_to_transaction({(source, 0): 20}, group)
            await producer.commit_transaction()
        return after_abort, await committed(bootstrap, group, source)

    after_abort, after_commit = asyncio.run(run())
    assert after_abort == {}
    assert after_commit == {(source, 0): 20}
    values = asyncio.run(read_all(bootstrap, sink, "read_committed", partitions=1))
    assert values == [f"out{i}".encode() for i in range(20)]


async def committed(bootstrap: str, group: str, topic: str) -> dict[Any, int]:
    consumer = AsyncConsumer(bootstrap, group_id=group, client_id="auditor")
    await consumer.start()
    try:
        found = await consumer.committed([(topic, 0)])
        return {tp: offset for tp, offset in found.items() if offset >= 0}
    finally:
        await consumer.stop()


def test_a_second_instance_fences_the_first(bootstrap: str) -> None:
    topic = new_topic(bootstrap, 1)
    tid = f"zombie-{topic}"

    async def run() -> TransactionError:
        async with transactional(bootstrap, tid) as zombie:
            await zombie.init_transactions()
            zombie.begin_transaction()
            await zombie.send(topic, b"zombie", partition=0)
            await zombie.flush()
            async with transactional(bootstrap, tid) as successor:
                await successor.init_transactions()  # aborts the zombie's transaction
                successor.begin_transaction()
                await successor.send(topic, b"successor", partition=0)
                await successor.commit_transaction()
            with pytest.raises(TransactionError) as refused:
                await zombie.send(topic, b"late", partition=0)
                await zombie.commit_transaction()
            with pytest.raises(TransactionError):  # fatal: nothing more
                zombie.begin_transaction()
            return refused.value

    refused = asyncio.run(run())
    assert refused.fatal, refused
    assert asyncio.run(read_all(bootstrap, topic, "read_committed", partitions=1)) == [b"successor"]


def test_misuse_is_refused_with_a_clear_error(bootstrap: str) -> None:
    topic = new_topic(bootstrap, 1)

    async def run() -> list[str]:
        said = []
        async with transactional(bootstrap, f"misuse-{topic}") as producer:
            with pytest.raises(TransactionError) as before_init:
                producer.begin_transaction()
            said.append(str(before_init.value))
            await producer.init_transactions()
            with pytest.raises(TransactionError) as outside:
                await producer.send(topic, b"x", partition=0)
            said.append(str(outside.value))
            with pytest.raises(TransactionError) as no_txn:
                await producer.commit_transaction()
            said.append(str(no_txn.value))
            producer.begin_transaction()
            await producer.commit_transaction()  # an empty transaction commits
        return said

    said = asyncio.run(run())
    assert "uninitialized" in said[0]
    assert "send outside a transaction" in said[1]
    assert "commit a transaction" in said[2]
    with pytest.raises(ValueError, match="acks=all"):
        AsyncProducer(bootstrap, transactional_id="t", acks=1)
