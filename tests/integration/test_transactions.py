"""Transactions (#29) with a real client: librdkafka's transactional producer and its
read_committed consumer against a real broker.

- Aborted records stay in the log (read_uncommitted sees them) and no read_committed
  consumer ever sees one; committed ones are seen once.
- A second producer with the same transactional id fences the first (zombie fencing):
  the first can neither write nor commit again.
- A transaction its producer left open holds the last stable offset back until the next
  instance's init_transactions aborts it, or until transaction.timeout.ms does.
- An open transaction survives the broker's restart, clean (from the producer snapshot
  written at the stop) or killed (from the log), and then commits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

from partita.storage.producer_snapshot import decode
from tests.integration.conftest import BrokerProcess
from tests.integration.test_bad_input import connect, roundtrip

TOPIC = "payments"
TRANSACTIONAL_ID_NOT_FOUND = 105
SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    # Look for expired transactions often, so that a timeout shows within seconds.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
}


@pytest.fixture
def txn_broker(broker_factory: type[BrokerProcess]) -> Iterator[BrokerProcess]:
    broker = broker_factory(SETTINGS)
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    yield broker


def _producer(broker: BrokerProcess, tid: str, **extra: Any) -> Producer:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 5, **extra}
    )
    producer.init_transactions(30)
    return producer


def _read(broker: BrokerProcess, isolation: str, expect: int, wait: float = 20.0) -> list[str]:
    """Every value of the topic from the start, as ``isolation`` lets a consumer see it,
    reading until ``expect`` values came or ``wait`` seconds passed, then half a second
    more (so that a value too many shows)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"auditor-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
    values: list[str] = []
    deadline = time.monotonic() + wait
    settle: float | None = None
    try:
        while time.monotonic() < (settle or deadline):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value().decode())
            if len(values) >= expect and settle is None:
                settle = time.monotonic() + 0.5
    finally:
        consumer.close()
    return values


def _end_offsets(broker: BrokerProcess, isolation: str) -> list[int]:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "offsets", "isolation.level": isolation}
    )
    try:
        return [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), 10)[1] for p in range(2)]
    finally:
        consumer.close()


def test_read_committed_never_sees_an_aborted_record(txn_broker: BrokerProcess) -> None:
    producer = _producer(txn_broker, "payments-etl")
    producer.begin_transaction()
    for i in range(50):
        producer.produce(TOPIC, key=str(i), value=f"aborted-{i}")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(50):
        producer.produce(TOPIC, key=str(i), value=f"committed-{i}")
    producer.commit_transaction(30)

    committed = _read(txn_broker, "read_committed", 50)
    assert sorted(committed) == sorted(f"committed-{i}" for i in range(50))
    everything = _read(txn_broker, "read_uncommitted", 100)
    assert len(everything) == 100  # the aborted records are in the log, skipped by readers
    assert "error" not in txn_broker.logs().lower()


def test_a_second_instance_fences_the_first(txn_broker: BrokerProcess) -> None:
    zombie = _producer(txn_broker, "payments-etl")
    zombie.begin_transaction()
    zombie.produce(TOPIC, key="z", value="zombie-1")
    zombie.flush(30)

    # The new instance's init_transactions aborts what the zombie left open.
    successor = _producer(txn_broker, "payments-etl")
    successor.begin_transaction()
    successor.produce(TOPIC, key="s", value="successor")
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as fenced:
        zombie.produce(TOPIC, key="z", value="zombie-2")
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert _read(txn_broker, "read_committed", 1) == ["successor"]


def test_an_open_transaction_holds_the_lso_until_it_times_out(txn_broker: BrokerProcess) -> None:
    stuck = _producer(txn_broker, "stuck", **{"transaction.timeout.ms": 2000})
    stuck.begin_transaction()
    for i in range(10):
        stuck.produce(TOPIC, key="k", value=f"stuck-{i}", partition=0)
    stuck.flush(30)
    other = Producer({"bootstrap.servers": txn_broker.bootstrap})
    other.produce(TOPIC, value="plain", partition=0)
    other.flush(30)
    # The plain record is after the open transaction: read_committed waits for it.
    assert _end_offsets(txn_broker, "read_committed")[0] == 0
    assert _end_offsets(txn_broker, "read_uncommitted")[0] == 11
    # The coordinator aborts it once transaction.timeout.ms has passed; the LSO moves.
    deadline = time.monotonic() + 20
    while _end_offsets(txn_broker, "read_committed")[0] < 12:  # 10 + plain + marker
        assert time.monotonic() < deadline, "the expired transaction was not aborted"
        time.sleep(0.3)
    assert _read(txn_broker, "read_committed", 1) == ["plain"]
    assert "aborting a transaction past its timeout" in txn_broker.logs()


@pytest.mark.parametrize("shutdown", ["clean", "kill"])
def test_an_open_transaction_survives_a_restart_and_commits(
    txn_broker: BrokerProcess, shutdown: str
) -> None:
    """A clean stop snapshots each partition's producers at its log end (Kafka's
    ``.snapshot``) and the start loads it, replaying nothing; after kill -9 there is no
    such snapshot and the start replays the log. Both must know the transaction."""
    producer = _producer(txn_broker, "survivor")
    producer.begin_transaction()
    for i in range(20):
        producer.produce(TOPIC, key=str(i), value=f"kept-{i}")
    producer.flush(30)
    if shutdown == "clean":
        txn_broker.stop()
        for partition in range(2):
            directory = txn_broker.data_dir / f"{TOPIC}-{partition}"
            (snapshot,) = directory.glob("*.snapshot")
            (entry,) = decode(snapshot.read_bytes())
            assert entry.current_txn_first_offset == 0  # open since the first batch
            assert int(snapshot.stem) > 0  # at the log end
    else:
        txn_broker.kill()
        assert not list(txn_broker.data_dir.glob(f"{TOPIC}-*/*.snapshot"))
    txn_broker.start()
    # Nothing readable yet: the transaction is still open after the restart.
    assert _end_offsets(txn_broker, "read_committed") == [0, 0]
    producer.commit_transaction(60)
    assert sorted(_read(txn_broker, "read_committed", 20)) == sorted(f"kept-{i}" for i in range(20))


def test_consume_transform_produce_commits_offsets_with_the_output(
    txn_broker: BrokerProcess,
) -> None:
    """send_offsets_to_transaction (AddOffsetsToTxn, TxnOffsetCommit): the group's offsets
    move with the output, and not at all when the transaction aborts."""
    admin = AdminClient({"bootstrap.servers": txn_broker.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
    source = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(30):
        source.produce("orders", value=f"order-{i}")
    source.flush(30)

    consumer = Consumer(
        {
            "bootstrap.servers": txn_broker.bootstrap,
            "group.id": "etl",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("orders", 0)])
    producer = _producer(txn_broker, "etl-1")

    def step(count: int, commit: bool) -> None:
        batch = consumer.consume(count, timeout=10)
        assert len(batch) == count
        producer.begin_transaction()
        for message in batch:
            producer.produce(TOPIC, value=message.value().decode().replace("order", "paid"))
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    def committed() -> int:
        return int(consumer.committed([TopicPartition("orders", 0)], 10)[0].offset)

    step(10, commit=True)
    assert committed() == 10
    step(10, commit=False)  # the output is aborted and the offsets stay where they were
    assert committed() == 10
    consumer.seek(TopicPartition("orders", 0, 10))
    step(10, commit=True)
    step(10, commit=True)
    assert committed() == 30
    consumer.close()
    output = _read(txn_broker, "read_committed", 30)
    assert sorted(output) == sorted(f"paid-{i}" for i in range(30))
    # Reloaded from __consumer_offsets after a restart: the transactional offset batches
    # count once their COMMIT marker is replayed, the aborted one never.
    txn_broker.restart()
    reader = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "etl"})
    try:
        assert reader.committed([TopicPartition("orders", 0)], 30)[0].offset == 30
    finally:
        reader.close()


def test_an_idle_transactional_id_expires_for_good(broker_factory: type[BrokerProcess]) -> None:
    """transactional.id.expiration.ms: an id idle that long is forgotten, and its
    tombstone keeps it forgotten after a restart."""
    broker = broker_factory({**SETTINGS, "transactional.id.expiration.ms": "1000"}, name="exp")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = _producer(broker, "short-lived")
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"once")
    producer.commit_transaction(30)
    del producer

    def described() -> int:
        with connect(broker) as sock:
            request = DescribeTransactionsRequest(version=0, transactional_ids=["short-lived"])
            response = roundtrip(sock, request, DescribeTransactionsResponse, 1)
        (state,) = response.transaction_states
        return int(state.error_code)

    assert described() == 0
    deadline = time.monotonic() + 15
    while described() != TRANSACTIONAL_ID_NOT_FOUND:
        assert time.monotonic() < deadline, "the idle id never expired"
        time.sleep(0.3)
    assert "transactional id expired" in broker.logs()
    broker.restart()
    assert described() == TRANSACTIONAL_ID_NOT_FOUND  # the tombstone was replayed


def test_aiokafkas_transactional_producer_and_read_committed_consumer(
    txn_broker: BrokerProcess,
) -> None:
    # aiokafka speaks the transaction protocol on its own (not librdkafka's code): a
    # committed and an aborted transaction, read by its read_committed consumer.
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415
    from aiokafka.structs import TopicPartition as AioTopicPartition  # noqa: PLC0415

    async def run() -> tuple[list[str], list[str]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=txn_broker.bootstrap, transactional_id="aio-writer"
        )
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(6):
                    await producer.send(TOPIC, f"aio-kept-{i}".encode(), partition=i % 2)
            await producer.begin_transaction()
            for i in range(4):
                await producer.send_and_wait(TOPIC, f"aio-dropped-{i}".encode(), partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        seen: dict[str, list[str]] = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = AIOKafkaConsumer(
                bootstrap_servers=txn_broker.bootstrap,
                isolation_level=isolation,
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                tps = [AioTopicPartition(TOPIC, p) for p in range(2)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                values: list[str] = []
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=300)
                    values += [r.value.decode() for rs in batches.values() for r in rs]
                    if isolation == "read_committed" and len(values) >= 6:
                        break
                    if len(values) >= 10:
                        break
                seen[isolation] = values
            finally:
                await consumer.stop()
        return seen["read_committed"], seen["read_uncommitted"]

    import asyncio  # noqa: PLC0415

    committed, everything = asyncio.run(run())
    assert sorted(committed) == sorted(f"aio-kept-{i}" for i in range(6))
    assert sorted(everything) == sorted(
        [f"aio-kept-{i}" for i in range(6)] + [f"aio-dropped-{i}" for i in range(4)]
    )
    # librdkafka agrees, and sees no aborted record either.
    assert sorted(_read(txn_broker, "read_committed", 6)) == sorted(committed)


def test_compaction_removes_aborted_transactions_and_keeps_the_committed_latest(
    broker_factory: type[BrokerProcess],
) -> None:
    """A compacted topic written in transactions: the cleaner removes the aborted records
    (read_uncommitted no longer sees them) and compacts the committed ones to the latest
    per key; nothing is left hanging, before or after a restart (the replay meets
    removed batches and markers), and the producer goes on."""
    broker = broker_factory({**SETTINGS, "log.retention.check.interval.ms": "300"})
    broker.start()
    topic = "ledger"
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "2048",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "200",
    }
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
    producer = _producer(broker, "ledger-writer")
    latest: dict[str, str] = {}
    for i in range(60):
        key = f"k{i % 6}"
        producer.begin_transaction()
        producer.produce(topic, key=key, value=f"aborted-{i}")
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.produce(topic, key=key, value=f"committed-{i}")
        producer.commit_transaction(30)
        latest[key] = f"committed-{i}"
    # Roll past the transactions (the active segment is never cleaned), in batches small
    # enough for the 2 KiB segments.
    filler = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 4})
    for i in range(40):
        filler.produce(topic, key=f"filler-{i}", value="x" * 100)
    assert filler.flush(30) == 0

    def everything(isolation: str) -> list[tuple[str, str]]:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"audit-{time.monotonic_ns()}",
                "isolation.level": isolation,
                "enable.partition.eof": True,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        found = []
        try:
            while True:
                message = consumer.poll(5)
                assert message is not None, "no end of partition within 5 s"
                if message.error():
                    break  # the end of the partition
                found.append((message.key().decode(), message.value().decode()))
        finally:
            consumer.close()
        return [kv for kv in found if not kv[0].startswith("filler")]

    deadline = time.monotonic() + 30
    while any(v.startswith("aborted") for _k, v in everything("read_uncommitted")):
        assert time.monotonic() < deadline, "the cleaner left aborted records"
        time.sleep(0.5)
    for isolation in ("read_uncommitted", "read_committed"):
        seen = everything(isolation)
        assert dict(seen) == latest, isolation
        assert len(seen) < 60, f"{isolation}: {len(seen)} records, not compacted"
    broker.restart()
    assert _end_offsets_of(broker, topic, "read_committed") == _end_offsets_of(
        broker, topic, "read_uncommitted"
    )
    assert dict(everything("read_committed")) == latest
    producer.begin_transaction()  # the same producer goes on after the restart
    producer.produce(topic, key="k0", value="after")
    producer.commit_transaction(30)
    assert dict(everything("read_committed"))["k0"] == "after"


def _end_offsets_of(broker: BrokerProcess, topic: str, isolation: str) -> int:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "ends", "isolation.level": isolation}
    )
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), 10)[1])
    finally:
        consumer.close()
