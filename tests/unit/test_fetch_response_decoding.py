"""The clients' FetchResponse v11 decoder against kafka-python's encoder and decoder (the
reference here), and against partita's own broker encoder: same fields, records handed
out as views of the frame, and a truncated or inconsistent body refused as corrupt."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchResponse

from partita.errors import CorruptRecordError
from partita.protocol.fetch_response import (
    PartitionResult,
    TopicResult,
    decode_fetch_response_v11,
    decode_fetch_response_v12,
    encode_fetch_response,
)
from partita.protocol.wire import MalformedRequestError

Topic = FetchResponse.FetchableTopicResponse
Partition = Topic.PartitionData
Aborted = Partition.AbortedTransaction

partitions_strategy = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),  # index
        st.integers(-1, 120),  # error code
        st.integers(-1, 2**62),  # high watermark
        st.one_of(st.none(), st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)))),
        st.integers(-1, 5),  # preferred read replica
        st.one_of(st.none(), st.binary(max_size=300)),  # records
    ),
    max_size=4,
)
topics_strategy = st.lists(
    st.tuples(st.text(min_size=1, max_size=20), partitions_strategy), max_size=3
)


def _reference(topics: list[tuple[str, list[Any]]]) -> bytes:
    response = FetchResponse(
        version=11,
        throttle_time_ms=3,
        error_code=0,
        session_id=0,
        responses=[
            Topic(
                topic=name,
                partitions=[
                    Partition(
                        partition_index=index,
                        error_code=code,
                        high_watermark=hw,
                        last_stable_offset=hw,
                        log_start_offset=0,
                        aborted_transactions=(
                            None
                            if aborted is None
                            else [Aborted(producer_id=p, first_offset=f) for p, f in aborted]
                        ),
                        preferred_read_replica=preferred,
                        records=records,
                    )
                    for index, code, hw, aborted, preferred, records in partitions
                ],
            )
            for name, partitions in topics
        ],
    )
    return bytes(response.encode())


@settings(max_examples=150, deadline=None)
@given(topics_strategy)
def test_fields_match_kafka_pythons_decoder(topics: list[tuple[str, list[Any]]]) -> None:
    body = memoryview(_reference(topics))
    ours = decode_fetch_response_v11(body)
    theirs = FetchResponse.decode(body, version=11)
    assert (ours.throttle_time_ms, ours.error_code, ours.session_id) == (3, 0, 0)
    assert [t.topic for t in ours.responses] == [t.topic for t in theirs.responses]
    for mine, reference in zip(ours.responses, theirs.responses, strict=True):
        for p, q in zip(mine.partitions, reference.partitions, strict=True):
            assert (p.partition_index, p.error_code, p.high_watermark) == (
                q.partition_index,
                q.error_code,
                q.high_watermark,
            )
            assert (p.last_stable_offset, p.log_start_offset, p.preferred_read_replica) == (
                q.last_stable_offset,
                q.log_start_offset,
                q.preferred_read_replica,
            )
            expected_aborted = (
                None
                if q.aborted_transactions is None
                else [(a.producer_id, a.first_offset) for a in q.aborted_transactions]
            )
            assert p.aborted_transactions == expected_aborted
            if q.records is None:
                assert p.records is None
            else:
                assert p.records is not None and bytes(p.records) == q.records
                assert p.records.obj is body.obj  # a view of the frame, not a copy


def test_partitas_own_broker_encoding_decodes() -> None:
    records = bytes(range(256)) * 40
    chunks = encode_fetch_response(
        11,
        [
            TopicResult(
                "orders",
                uuid.uuid4(),
                [
                    PartitionResult(0, high_watermark=42, log_start_offset=7, records=records),
                    PartitionResult(1, error_code=1, records=None),
                    PartitionResult(2, records=b""),
                ],
            )
        ],
    )
    body = b"".join(c for c in chunks if isinstance(c, bytes))
    (topic,) = decode_fetch_response_v11(memoryview(body)).responses
    first, second, third = topic.partitions
    assert topic.topic == "orders"
    assert (first.partition_index, first.high_watermark, first.log_start_offset) == (0, 42, 7)
    assert first.records is not None and bytes(first.records) == records
    assert (second.error_code, second.records) == (1, None)
    assert third.records is not None and bytes(third.records) == b""


def test_every_truncation_is_refused_as_corrupt() -> None:
    body = _reference([("t", [(0, 0, 10, [(1, 2)], -1, b"x" * 50), (1, 0, 5, None, -1, None)])])
    for cut in range(len(body)):
        with pytest.raises(CorruptRecordError):
            decode_fetch_response_v11(memoryview(body[:cut]))


@pytest.mark.parametrize("size", [-2, 10_000])
def test_a_records_length_that_does_not_fit_is_refused(size: int) -> None:
    body = bytearray(_reference([("t", [(0, 0, 10, None, -1, b"abc")])]))
    # The records' int32 length sits just before the last three bytes.
    body[-7:-3] = size.to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError):
        decode_fetch_response_v11(memoryview(bytes(body)))


def test_a_negative_aborted_transaction_count_other_than_null_is_refused() -> None:
    body = bytearray(_reference([("t", [(0, 0, 10, None, -1, b"abc")])]))
    # The aborted transactions' int32 count (-1: null) precedes the preferred replica,
    # the records' length and the three record bytes.
    assert body[-15:-11] == (-1).to_bytes(4, "big", signed=True)
    body[-15:-11] = (-2).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptRecordError, match="aborted"):
        decode_fetch_response_v11(memoryview(bytes(body)))


def test_v12_with_a_diverging_epoch_decodes() -> None:
    """What a follower reads (v12, flexible): the DivergingEpoch tag comes through, and
    kafka-python's decoder agrees with ours on every field."""
    records = bytes(range(256)) * 3
    chunks = encode_fetch_response(
        12,
        [
            TopicResult(
                "orders",
                uuid.uuid4(),
                [
                    PartitionResult(0, high_watermark=42, log_start_offset=7, records=records),
                    PartitionResult(1, diverging_epoch=(3, 120), records=b""),
                    PartitionResult(2, error_code=6, records=None),
                ],
            )
        ],
    )
    body = b"".join(c for c in chunks if isinstance(c, bytes))
    (topic,) = decode_fetch_response_v12(memoryview(body)).responses
    first, second, third = topic.partitions
    assert topic.topic == "orders"
    assert (first.high_watermark, first.log_start_offset, first.diverging_epoch) == (42, 7, None)
    assert first.records is not None and bytes(first.records) == records
    assert second.diverging_epoch == (3, 120)
    assert (third.error_code, third.records) == (6, None)
    theirs = FetchResponse.decode(body, version=12)
    assert theirs.responses[0].partitions[1].diverging_epoch.epoch == 3
    assert theirs.responses[0].partitions[1].diverging_epoch.end_offset == 120
    for cut in range(0, len(body) - 1, 7):
        with pytest.raises((CorruptRecordError, MalformedRequestError)):
            decode_fetch_response_v12(memoryview(body[:cut]))
