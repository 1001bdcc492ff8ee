"""The broker's hand decoder of ProduceRequest bodies, beyond what the request fuzz tests
check against kafka-python for every version: record sets stay views of the frame, and
tagged fields (which kafka-python's encoder never writes) are skipped or refused."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.producer import ProduceRequest

from partita.protocol.codec import decode_request
from partita.protocol.produce_request_body import ProduceRequestBody, decode_produce_request
from partita.protocol.wire import MalformedRequestError

Topic = ProduceRequest.TopicProduceData
Partition = Topic.PartitionProduceData


def _frame(version: int, records: bytes) -> bytearray:
    request = ProduceRequest(
        version=version,
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[Topic(name="t", partition_data=[Partition(index=3, records=records)])],
    )
    request.with_header(correlation_id=1, client_id="c")
    return bytearray(request.encode(header=True))


@pytest.mark.parametrize("version", [3, 8, 9, 10])
def test_record_sets_are_views_of_the_frame_not_copies(version: int) -> None:
    frame = _frame(version, b"R" * 1000)
    _, _, body = decode_request(memoryview(frame))
    assert isinstance(body, ProduceRequestBody)
    records = body.topic_data[0].partition_data[0].records
    assert records is not None and bytes(records) == b"R" * 1000
    start = frame.index(b"R" * 1000)
    frame[start] = ord("X")  # the view sees the frame's own bytes
    assert bytes(records[:2]) == b"XR"


# A v9 body by hand: no transactional id, acks -1, timeout, one topic "t" with partition 3
# holding a 2-byte record set, and a tagged-field section after the partition, the topic
# and the body, given as arguments.
def _v9_body(partition_tags: bytes, topic_tags: bytes, body_tags: bytes) -> bytes:
    return (
        b"\x00"  # transactional id: null
        + struct.pack(">hi", -1, 30_000)
        + b"\x02"  # one topic
        + b"\x02t"  # name "t"
        + b"\x02"  # one partition
        + struct.pack(">i", 3)
        + b"\x03RR"  # records: 2 bytes
        + partition_tags
        + topic_tags
        + body_tags
    )


NO_TAGS = b"\x00"
ONE_TAG = b"\x01" + b"\x05" + b"\x03abc"  # one field: tag 5, 3 bytes


@pytest.mark.parametrize(
    "tags",
    [(ONE_TAG, NO_TAGS, NO_TAGS), (NO_TAGS, ONE_TAG, NO_TAGS), (NO_TAGS, NO_TAGS, ONE_TAG)],
    ids=["partition", "topic", "body"],
)
def test_tagged_fields_are_skipped(tags: tuple[bytes, bytes, bytes]) -> None:
    body = decode_produce_request(memoryview(_v9_body(*tags)), 0, 9)
    assert (body.transactional_id, body.acks, body.timeout_ms) == (None, -1, 30_000)
    [topic] = body.topic_data
    assert topic.name == "t"
    [partition] = topic.partition_data
    assert partition.index == 3
    assert partition.records is not None and bytes(partition.records) == b"RR"


def test_a_tagged_field_running_past_the_frame_is_malformed() -> None:
    cut_short = b"\x01" + b"\x05" + b"\x09abc"  # says 9 bytes, has 3
    with pytest.raises(MalformedRequestError, match="tagged field"):
        decode_produce_request(memoryview(_v9_body(NO_TAGS, NO_TAGS, cut_short)), 0, 9)
