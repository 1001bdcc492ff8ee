"""Real Kafka clients against a real partita broker process: what a Kafka user does."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import defaultdict

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from partita.client.murmur2 import partition_for_key
from tests.integration.clients import admin, consume_all, create_topic, produce
from tests.integration.conftest import BrokerProcess

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_roundtrip_keyed_keyless_headers(broker: BrokerProcess, codec: str) -> None:
    topic = f"rt-{codec}"
    create_topic(broker.bootstrap, topic, partitions=3)
    base_ts = int(time.time() * 1000) - 60_000
    records = []
    for i in range(300):
        record = {
            "value": f"value-{i}".encode(),
            "timestamp": base_ts + i,
            "headers": [("seq", str(i).encode()), ("codec", codec.encode())],
        }
        if i % 3:
            record["key"] = f"key-{i % 17}".encode()
        else:
            record["partition"] = i % 3  # keyless records go where they are sent
        records.append(record)
    delivered = produce(broker.bootstrap, topic, records, **{"compression.type": codec})
    assert len(delivered) == 300
    for msg in delivered:
        if msg.key() is not None:
            # librdkafka's murmur2_random is Java's partitioner: so is partita's.
            assert msg.partition() == partition_for_key(msg.key(), 3)
    sent = {m.value(): (m.partition(), m.offset()) for m in delivered}
    got = consume_all(broker.bootstrap, topic, [0, 1, 2], 300)
    assert len(got) == 300
    per_partition = defaultdict(list)
    for msg in got:
        per_partition[msg.partition()].append(msg.offset())
        assert sent[msg.value()] == (msg.partition(), msg.offset())
        i = int(msg.value().split(b"-")[1])
        assert msg.timestamp() == (1, base_ts + i)  # CreateTime, exact
        assert msg.headers() == [("seq", str(i).encode()), ("codec", codec.encode())]
    for offsets in per_partition.values():
        assert offsets == list(range(len(offsets)))


def test_kafka_python_idempotent_producer_and_consumer(broker: BrokerProcess) -> None:
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type="gzip",
        enable_idempotence=True,
        acks="all",
    )
    futures = [
        producer.send("kp", key=b"k%d" % (i % 5), value=b"v%d" % i, headers=[("h", b"%d" % i)])
        for i in range(200)
    ]
    producer.flush()
    metas = [f.get(10) for f in futures]
    producer.close()
    assert sorted(m.offset for m in metas if m.partition == metas[0].partition)[0] == 0
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        group_id=None,
    )
    partitions = [KpTopicPartition("kp", p) for p in consumer.partitions_for_topic("kp")]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    got = list(consumer)
    consumer.close()
    assert sorted(m.value for m in got) == sorted(b"v%d" % i for i in range(200))
    assert all(m.headers == [("h", m.value[1:])] for m in got)


def test_confluent_idempotent_producer(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "idem", partitions=2)
    records = [{"key": b"k%d" % (i % 7), "value": b"%d" % i} for i in range(2000)]
    delivered = produce(
        broker.bootstrap, "idem", records, **{"enable.idempotence": True, "acks": "all"}
    )
    assert len(delivered) == 2000
    got = consume_all(broker.bootstrap, "idem", [0, 1], 2000)
    assert sorted(int(m.value()) for m in got) == list(range(2000))


def test_aiokafka_roundtrip(broker: BrokerProcess) -> None:
    async def run() -> list[tuple[int, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4")
        await producer.start()
        try:
            for i in range(100):
                await producer.send_and_wait(
                    "aio", b"v%d" % i, key=b"k", headers=[("n", b"%d" % i)]
                )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        out: list[tuple[int, bytes]] = []
        try:
            consumer.assign([AioTopicPartition("aio", 0)])
            await consumer.seek_to_beginning()
            while len(out) < 100:
                async with asyncio.timeout(10):
                    batch = await consumer.getmany(timeout_ms=500)
                for messages in batch.values():
                    out += [(m.offset, m.value) for m in messages]
        finally:
            await consumer.stop()
        return out

    got = asyncio.run(run())
    assert got == [(i, b"v%d" % i) for i in range(100)]


def test_kcat_roundtrip_with_headers(broker: BrokerProcess) -> None:
    lines = "".join(f"k{i}:v{i}\n" for i in range(50))
    result = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", "kc", "-K:", "-H", "src=kcat", "-z", "snappy"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", "kc", "-e", "-f", "%k %s %o %h\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.stdout.splitlines() == [f"k{i} v{i} {i} src=kcat" for i in range(50)]


def test_list_offsets_by_time_earliest_latest(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "times")
    base = int(time.time() * 1000) - 100_000
    produce(
        broker.bootstrap,
        "times",
        [{"value": b"%d" % i, "timestamp": base + 1000 * i, "partition": 0} for i in range(10)],
    )
    consumer_conf = {"bootstrap.servers": broker.bootstrap, "group.id": "t"}
    consumer = Consumer(consumer_conf)
    try:
        found = consumer.offsets_for_times([TopicPartition("times", 0, base + 3500)], 10)
        assert found[0].offset == 4
        found = consumer.offsets_for_times([TopicPartition("times", 0, base + 10**7)], 10)
        assert found[0].offset == -1  # no record that late: Kafka's answer is offset -1
        low, high = consumer.get_watermark_offsets(TopicPartition("times", 0), 10)
        assert (low, high) == (0, 10)
    finally:
        consumer.close()
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = KpTopicPartition("times", 0)
    assert kp.offsets_for_times({tp: base + 7000})[tp].offset == 7
    assert kp.beginning_offsets([tp])[tp] == 0 and kp.end_offsets([tp])[tp] == 10
    kp.close()


def test_restart_then_read_everything_again(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "durable", partitions=2)
    records = [{"key": b"k%d" % i, "value": b"v%d" % i} for i in range(500)]
    produce(broker.bootstrap, "durable", records, **{"compression.type": "zstd"})
    before = {
        (m.partition(), m.offset(), m.value())
        for m in consume_all(broker.bootstrap, "durable", [0, 1], 500)
    }
    broker.restart()
    after = {
        (m.partition(), m.offset(), m.value())
        for m in consume_all(broker.bootstrap, "durable", [0, 1], 500)
    }
    assert after == before and len(after) == 500
    broker.kill()  # and after kill -9: recovery keeps everything the OS had
    broker.start()
    again = {
        (m.partition(), m.offset(), m.value())
        for m in consume_all(broker.bootstrap, "durable", [0, 1], 500)
    }
    assert again == before
    more = produce(broker.bootstrap, "durable", [{"value": b"new", "partition": 0}])
    assert more[0].offset() == max(o for p, o, _ in before if p == 0) + 1


def test_delete_records(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "trim")
    produce(broker.bootstrap, "trim", [{"value": b"%d" % i, "partition": 0} for i in range(20)])
    client = admin(broker.bootstrap)
    futures = client.delete_records([TopicPartition("trim", 0, 12)])
    result = futures[TopicPartition("trim", 0, 12)].result(10)
    assert result.low_watermark == 12
    got = consume_all(broker.bootstrap, "trim", [0], 8)
    assert [m.offset() for m in got] == list(range(12, 20))
    kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    kp_admin.delete_records({KpTopicPartition("trim", 0): 15})
    kp_admin.close()
    got = consume_all(broker.bootstrap, "trim", [0], 5)
    assert got[0].offset() == 15


def test_topic_configs_describe_and_alter(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "conf", **{"retention.ms": "3600000"})
    client = admin(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "conf")
    configs = client.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == str(1024**3)
    assert configs["cleanup.policy"].value == "delete"
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        "conf",
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    client.incremental_alter_configs([change])[change].result(10)
    configs = client.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    bad = ConfigResource(
        ConfigResource.Type.TOPIC,
        "conf",
        incremental_configs=[
            ConfigEntry("segment.bytes", "nope", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as info:
        client.incremental_alter_configs([bad])[bad].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    broker.restart()  # configs live in the metadata store
    client = admin(broker.bootstrap)
    configs = client.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"


def test_partitions_grow_but_never_shrink(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "grow", partitions=2)
    client = admin(broker.bootstrap)
    client.create_partitions([NewPartitions("grow", 5)])["grow"].result(10)
    assert len(client.list_topics("grow", timeout=10).topics["grow"].partitions) == 5
    with pytest.raises(KafkaException) as info:
        client.create_partitions([NewPartitions("grow", 3)])["grow"].result(10)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_create_and_delete_topics_errors(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "dup")
    with pytest.raises(KafkaException) as info:
        create_topic(broker.bootstrap, "dup")
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with pytest.raises(KafkaException) as info:
        create_topic(broker.bootstrap, "bad/name")
    assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    client = admin(broker.bootstrap)
    client.delete_topics(["dup"])["dup"].result(10)
    assert "dup" not in client.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as info:
        client.delete_topics(["dup"])["dup"].result(10)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
