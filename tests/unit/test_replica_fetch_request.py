"""The follower's hand-framed Fetch v12 is, byte for byte, what kafka-python's generated
class encodes from the same fields, and the leader decodes it back to them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest

from partita.protocol.codec import decode_request
from partita.protocol.consumer_requests import ReplicaFetchPartition, ReplicaFetchRequestV12

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
partitions = st.builds(ReplicaFetchPartition, int32, int32, int64, int32, int64, int32)


def kafka_python_frame(message: Any, correlation_id: int, client_id: str | None) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(message.encode(header=True, framed=True))


def theirs(
    replica: int,
    topics: list[tuple[str, list[ReplicaFetchPartition]]],
    limits: tuple[int, int, int],
) -> Any:
    entry = FetchRequest.FetchTopic
    return FetchRequest(
        version=12,
        replica_id=replica,
        max_wait_ms=limits[0],
        min_bytes=limits[1],
        max_bytes=limits[2],
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            entry(topic=name, partitions=[entry.FetchPartition(**p._asdict()) for p in ps])
            for name, ps in topics
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


@settings(max_examples=150, deadline=None)
@given(
    replica=int32,
    topics=st.lists(st.tuples(names, st.lists(partitions, max_size=4)), max_size=3),
    limits=st.tuples(int32, int32, int32),
    correlation_id=int32,
    client_id=st.none() | st.text(max_size=16),
)
def test_replica_fetch_request_is_kafka_pythons(
    replica: int,
    topics: list[tuple[str, list[ReplicaFetchPartition]]],
    limits: tuple[int, int, int],
    correlation_id: int,
    client_id: str | None,
) -> None:
    ours = ReplicaFetchRequestV12(
        replica, topics, max_wait_ms=limits[0], min_bytes=limits[1], max_bytes=limits[2]
    )
    frame = b"".join(ours.frame_chunks(correlation_id, client_id))
    assert frame == kafka_python_frame(theirs(replica, topics, limits), correlation_id, client_id)


def test_the_leader_reads_back_every_field() -> None:
    wanted = ReplicaFetchPartition(3, 7, 1_000_000, 6, 42, 1 << 20)
    ours = ReplicaFetchRequestV12(
        2, [("orders", [wanted])], max_wait_ms=500, min_bytes=1, max_bytes=1 << 24
    )
    header, _spec, request = decode_request(
        memoryview(b"".join(ours.frame_chunks(9, "replica-2")))[4:]
    )
    assert (header.api_key, header.api_version, header.correlation_id) == (1, 12, 9)
    assert header.client_id == "replica-2"
    assert request.replica_id == 2 and request.max_wait_ms == 500
    (topic,) = request.topics
    (got,) = topic.partitions
    assert topic.topic == "orders"
    assert ReplicaFetchPartition(
        got.partition, got.current_leader_epoch, got.fetch_offset, got.last_fetched_epoch,
        got.log_start_offset, got.partition_max_bytes,
    ) == wanted  # fmt: skip
