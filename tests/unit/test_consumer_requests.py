"""The consumer's hand-framed requests (Metadata v12, ListOffsets v7, Fetch v11) are byte
for byte what kafka-python encodes, and their responses decode to the fields kafka-python
decodes; a truncated response is refused, never misread."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from partita.errors import CorruptRecordError
from partita.protocol.consumer_requests import (
    FetchRequestV11,
    ListOffsetsRequestV7,
    MetadataRequestV12,
    decode_list_offsets_response_v7,
    decode_metadata_response_v12,
)

int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
client_ids = st.none() | st.text(max_size=16)
EXAMPLES = settings(max_examples=150, deadline=None)


def kafka_python_frame(message: Any, correlation_id: int, client_id: str | None) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(header=True, framed=True))


@EXAMPLES
@given(
    topics=st.none() | st.lists(names, max_size=4),
    auto_create=st.booleans(),
    operations=st.booleans(),
    correlation_id=int32,
    client_id=client_ids,
)
def test_metadata_request_is_kafka_pythons(
    topics: list[str] | None,
    auto_create: bool,
    operations: bool,
    correlation_id: int,
    client_id: str | None,
) -> None:
    ours = MetadataRequestV12(topics, auto_create, operations)
    theirs = MetadataRequest(
        version=12,
        topics=None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(topic_id=None, name=t) for t in topics],
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=operations,
    )
    assert b"".join(ours.frame_chunks(correlation_id, client_id)) == kafka_python_frame(
        theirs, correlation_id, client_id
    )


offsets_topics = st.lists(
    st.tuples(names, st.lists(st.tuples(int32, int64), max_size=4)), max_size=3
)


@EXAMPLES
@given(topics=offsets_topics, isolation=st.sampled_from([0, 1]), correlation_id=int32)
def test_list_offsets_request_is_kafka_pythons(
    topics: list[tuple[str, list[tuple[int, int]]]], isolation: int, correlation_id: int
) -> None:
    ours = ListOffsetsRequestV7(topics, isolation_level=isolation)
    entry = ListOffsetsRequest.ListOffsetsTopic
    theirs = ListOffsetsRequest(
        version=7,
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            entry(
                name=name,
                partitions=[
                    entry.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=ts
                    )
                    for p, ts in partitions
                ],
            )
            for name, partitions in topics
        ],
    )
    assert b"".join(ours.frame_chunks(correlation_id, "c")) == kafka_python_frame(
        theirs, correlation_id, "c"
    )


@EXAMPLES
@given(
    topics=st.lists(st.tuples(names, st.lists(st.tuples(int32, int64), max_size=4)), max_size=3),
    limits=st.tuples(int32, int32, int32, int32),
    isolation=st.sampled_from([0, 1]),
    rack=names,
    client_id=client_ids,
)
def test_fetch_request_is_kafka_pythons(
    topics: list[tuple[str, list[tuple[int, int]]]],
    limits: tuple[int, int, int, int],
    isolation: int,
    rack: str,
    client_id: str | None,
) -> None:
    wait, min_bytes, max_bytes, partition_max = limits
    ours = FetchRequestV11(
        topics,
        max_wait_ms=wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        partition_max_bytes=partition_max,
        isolation_level=isolation,
        rack_id=rack,
    )
    entry = FetchRequest.FetchTopic
    theirs = FetchRequest(
        version=11,
        replica_id=-1,
        max_wait_ms=wait,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation,
        session_id=0,
        session_epoch=-1,
        topics=[
            entry(
                topic=name,
                partitions=[
                    entry.FetchPartition(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max,
                    )
                    for p, offset in partitions
                ],
            )
            for name, partitions in topics
        ],
        forgotten_topics_data=[],
        rack_id=rack,
    )
    assert b"".join(ours.frame_chunks(5, client_id)) == kafka_python_frame(theirs, 5, client_id)


R = MetadataResponse
brokers = st.lists(
    st.builds(
        R.MetadataResponseBroker,
        node_id=int32,
        host=names,
        port=int32,
        rack=st.none() | names,
    ),
    max_size=3,
)
partitions = st.lists(
    st.builds(
        R.MetadataResponseTopic.MetadataResponsePartition,
        error_code=int16,
        partition_index=int32,
        leader_id=int32,
        leader_epoch=int32,
        replica_nodes=st.lists(int32, max_size=3),
        isr_nodes=st.lists(int32, max_size=3),
        offline_replicas=st.lists(int32, max_size=2),
    ),
    max_size=4,
)
metadata_topics = st.lists(
    st.builds(
        R.MetadataResponseTopic,
        error_code=int16,
        name=st.none() | names,
        topic_id=st.uuids(),
        is_internal=st.booleans(),
        partitions=partitions,
        authorized_operations=st.none(),
    ),
    max_size=3,
)


def metadata_fields(response: Any) -> Any:
    """What a caller reads of a Metadata response, from either decoder."""
    return (
        response.throttle_time_ms,
        [(b.node_id, b.host, b.port, b.rack) for b in response.brokers],
        response.cluster_id,
        response.controller_id,
        [
            (
                t.error_code,
                t.name,
                t.topic_id,
                t.is_internal,
                [
                    (
                        p.error_code,
                        p.partition_index,
                        p.leader_id,
                        p.leader_epoch,
                        list(p.replica_nodes),
                        list(p.isr_nodes),
                        list(p.offline_replicas),
                    )
                    for p in t.partitions
                ],
            )
            for t in response.topics
        ],
    )


@EXAMPLES
@given(
    throttle=int32,
    brokers=brokers,
    cluster_id=st.none() | names,
    controller=int32,
    topics=metadata_topics,
)
def test_metadata_response_reads_as_kafka_python_reads_it(
    throttle: int, brokers: list[Any], cluster_id: str | None, controller: int, topics: list[Any]
) -> None:
    encoded = bytes(
        R(
            version=12,
            throttle_time_ms=throttle,
            brokers=brokers,
            cluster_id=cluster_id,
            controller_id=controller,
            topics=topics,
        ).encode(version=12)
    )
    ours = decode_metadata_response_v12(memoryview(encoded))
    assert metadata_fields(ours) == metadata_fields(R.decode(encoded, version=12))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            decode_metadata_response_v12(memoryview(encoded[:cut]))


L = ListOffsetsResponse
offset_results = st.lists(
    st.builds(
        L.ListOffsetsTopicResponse,
        name=names,
        partitions=st.lists(
            st.builds(
                L.ListOffsetsTopicResponse.ListOffsetsPartitionResponse,
                partition_index=int32,
                error_code=int16,
                timestamp=int64,
                offset=int64,
                leader_epoch=int32,
            ),
            max_size=4,
        ),
    ),
    max_size=3,
)


@EXAMPLES
@given(throttle=int32, topics=offset_results)
def test_list_offsets_response_reads_as_kafka_python_reads_it(
    throttle: int, topics: list[Any]
) -> None:
    encoded = bytes(L(version=7, throttle_time_ms=throttle, topics=topics).encode(version=7))

    def fields(response: Any) -> Any:
        return (
            response.throttle_time_ms,
            [
                (
                    t.name,
                    [
                        (p.partition_index, p.error_code, p.timestamp, p.offset, p.leader_epoch)
                        for p in t.partitions
                    ],
                )
                for t in response.topics
            ],
        )

    ours = decode_list_offsets_response_v7(memoryview(encoded))
    assert fields(ours) == fields(L.decode(encoded, version=7))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            decode_list_offsets_response_v7(memoryview(encoded[:cut]))
