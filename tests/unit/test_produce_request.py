"""The hand-framed ProduceRequest v9 is byte for byte what kafka-python encodes, with the
record sets passed through as the very objects given (not copies)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

from partita.protocol.produce_request import ProduceRequestV9

Partition = ProduceRequest.TopicProduceData.PartitionProduceData

topics_strategy = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=40),
        st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=300)), max_size=3),
    ),
    max_size=3,
)


def _reference(
    acks: int,
    correlation: int,
    client: str | None,
    topics: list[tuple[str, list[tuple[int, bytes]]]],
) -> bytes:
    request = ProduceRequest(
        version=9,
        transactional_id=None,
        acks=acks,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=name,
                partition_data=[Partition(index=i, records=records) for i, records in parts],
            )
            for name, parts in topics
        ],
    )
    request.with_header(correlation_id=correlation, client_id=client)
    return bytes(request.encode(header=True, framed=True))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([-1, 0, 1]),
    st.integers(0, 2**31 - 1),
    st.one_of(st.none(), st.text(max_size=30)),
    topics_strategy,
)
def test_frames_match_kafka_python(
    acks: int,
    correlation: int,
    client: str | None,
    topics: list[tuple[str, list[tuple[int, bytes]]]],
) -> None:
    views = [(name, [(i, memoryview(r)) for i, r in parts]) for name, parts in topics]
    chunks = ProduceRequestV9(acks, 30_000, views).frame_chunks(correlation, client)
    assert b"".join(bytes(c) for c in chunks) == _reference(acks, correlation, client, topics)
    # Each record set is written from the caller's own buffer.
    passed = [records for _, parts in views for _, records in parts]
    assert [c for c in chunks if isinstance(c, memoryview)] == passed
    assert all(any(c is records for c in chunks) for records in passed), "a record set was copied"


def test_a_view_of_wider_items_is_framed_by_its_bytes() -> None:
    records = np.frombuffer(bytes(range(40)), dtype=np.int32)
    view = memoryview(records)[2:7]  # five 4-byte items
    chunks = ProduceRequestV9(-1, 30_000, [("t", [(0, view)])]).frame_chunks(1, "c")
    assert b"".join(bytes(c) for c in chunks) == _reference(-1, 1, "c", [("t", [(0, bytes(view))])])
