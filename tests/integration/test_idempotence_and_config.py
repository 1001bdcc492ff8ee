"""Idempotent produce at the wire level, ListOffsets MAX_TIMESTAMP, and --config files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka.admin import ConfigResource, ConfigSource
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from partita.protocol.records import Record, build_batch
from tests.integration.clients import admin, create_topic, produce
from tests.integration.conftest import BrokerProcess
from tests.integration.test_bad_input import connect, roundtrip

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def produce_request(topic: str, batch: bytes) -> Any:
    data = ProduceRequest.TopicProduceData(
        name=topic,
        partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)
        ],
    )
    return ProduceRequest(
        version=9, transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[data]
    )


def test_duplicates_are_acknowledged_once_and_gaps_refused(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "idem-wire")
    with connect(broker) as sock:
        init = roundtrip(
            sock,
            InitProducerIdRequest(
                version=4,
                transactional_id=None,
                transaction_timeout_ms=60000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            InitProducerIdResponse,
            1,
        )
        assert init.error_code == 0 and init.producer_id >= 0
        pid, epoch = init.producer_id, init.producer_epoch

        def batch(seq: int, n: int) -> bytes:
            return build_batch(
                [Record(i, 1000 + i, b"k", b"v%d" % (seq + i)) for i in range(n)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )

        def send(b: bytes, correlation: int) -> Any:
            response = roundtrip(
                sock, produce_request("idem-wire", b), ProduceResponse, correlation
            )
            return response.responses[0].partition_responses[0]

        first = send(batch(0, 3), 2)
        assert (first.error_code, first.base_offset) == (0, 0)
        retry = send(batch(0, 3), 3)  # the same batch again: a producer retry
        assert (retry.error_code, retry.base_offset) == (0, 0)
        second = send(batch(3, 2), 4)
        assert (second.error_code, second.base_offset) == (0, 3)
        gap = send(batch(9, 1), 5)  # sequences 5..8 never arrived
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    end = admin.list_partition_offsets({TopicPartition("idem-wire", 0): OffsetSpec.LATEST})
    admin.close()
    assert end[TopicPartition("idem-wire", 0)].offset == 5  # 3 + 2: nothing twice
    broker.restart()  # producer state is rebuilt from the log: a late retry is still a dup
    with connect(broker) as sock:
        late = roundtrip(
            sock,
            produce_request(
                "idem-wire",
                build_batch(
                    [Record(i, 1000 + i, b"k", b"v%d" % (3 + i)) for i in range(2)],
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=3,
                ),
            ),
            ProduceResponse,
            9,
        )
        assert late.responses[0].partition_responses[0].base_offset == 3


def test_list_offsets_max_timestamp(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "maxts")
    produce(
        broker.bootstrap,
        "maxts",
        [
            {"value": b"a", "timestamp": 5000, "partition": 0},
            {"value": b"b", "timestamp": 9000, "partition": 0},
            {"value": b"c", "timestamp": 7000, "partition": 0},
        ],
    )
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition("maxts", 0)
    found = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
    earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp]
    admin.close()
    assert (found.offset, found.timestamp) == (1, 9000)
    assert earliest.offset == 0


def test_config_file_and_set_overrides(broker_factory: Any, tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("# Kafka syntax\nnum.partitions=3\nlog.retention.hours: 2\n")
    broker: BrokerProcess = broker_factory(
        settings={"log.segment.bytes": "2097152"}, extra_args=["--config", str(properties)]
    )
    broker.start()
    produce(broker.bootstrap, "auto-created", [{"value": b"x"}])  # auto-created topic
    client = admin(broker.bootstrap)
    metadata = client.list_topics("auto-created", timeout=10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "auto-created")
    configs = client.describe_configs([resource])[resource].result(10)
    assert len(metadata.topics["auto-created"].partitions) == 3  # from the file
    assert configs["retention.ms"].value == "7200000"  # log.retention.hours=2, the file
    assert configs["segment.bytes"].value == "2097152"  # --set
    assert configs["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value


def test_a_transactional_batch_without_a_transactional_id_is_refused(
    broker: BrokerProcess,
) -> None:
    # Kafka's rule: nobody could ever end that transaction, and it would hold the
    # partition's last stable offset (read_committed readers) for good.
    create_topic(broker.bootstrap, "txn-wire")
    batch = build_batch(
        [Record(0, 1000, b"k", b"v")],
        producer_id=7, producer_epoch=0, base_sequence=0, transactional=True,
    )  # fmt: skip
    with connect(broker) as sock:
        response = roundtrip(sock, produce_request("txn-wire", batch), ProduceResponse, 1)
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    end = admin.list_partition_offsets({TopicPartition("txn-wire", 0): OffsetSpec.LATEST})
    admin.close()
    assert end[TopicPartition("txn-wire", 0)].offset == 0  # nothing written
