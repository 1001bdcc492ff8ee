"""Range and roundrobin assignors against the Java client's reference cases."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from partita.client.assignors.base import MemberSubscription
from partita.client.assignors.range_roundrobin import RangeAssignor, RoundRobinAssignor
from partita.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def members(**subs: list[str]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, tuple(topics)) for m, topics in subs.items()}


def test_range_two_consumers_two_topics_six_partitions() -> None:
    result = RangeAssignor().assign({"t1": 3, "t2": 3}, members(c1=["t1", "t2"], c2=["t1", "t2"]))
    assert result == {
        "c1": [("t1", 0), ("t1", 1), ("t2", 0), ("t2", 1)],
        "c2": [("t1", 2), ("t2", 2)],
    }


def test_range_only_subscribed_topics_and_uneven() -> None:
    result = RangeAssignor().assign({"t1": 3, "other": 3}, members(c=["t1"]))
    assert result == {"c": [("t1", 0), ("t1", 1), ("t1", 2)]}
    result = RangeAssignor().assign({"t1": 2}, members(c1=["t1"], c2=["t1"], c3=["t1"]))
    assert result == {"c1": [("t1", 0)], "c2": [("t1", 1)], "c3": []}


def test_range_static_members_sort_first() -> None:
    subs = {
        "b-dynamic": MemberSubscription("b-dynamic", ("t",)),
        "z-static": MemberSubscription("z-static", ("t",), group_instance_id="a-instance"),
    }
    assert RangeAssignor().assign({"t": 2}, subs) == {
        "z-static": [("t", 0)],
        "b-dynamic": [("t", 1)],
    }


def test_roundrobin_two_consumers_two_topics_six_partitions() -> None:
    result = RoundRobinAssignor().assign(
        {"t1": 3, "t2": 3}, members(c1=["t1", "t2"], c2=["t1", "t2"])
    )
    assert result == {
        "c1": [("t1", 0), ("t1", 2), ("t2", 1)],
        "c2": [("t1", 1), ("t2", 0), ("t2", 2)],
    }


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    # Java's RoundRobinAssignorTest.testMultipleConsumersMixedTopics.
    result = RoundRobinAssignor().assign(
        {"t1": 3, "t2": 2}, members(c1=["t1"], c2=["t1", "t2"], c3=["t1"])
    )
    assert result == {"c1": [("t1", 0)], "c2": [("t1", 1), ("t2", 0), ("t2", 1)], "c3": [("t1", 2)]}


topic_names = st.sampled_from(["a", "b", "c", "d"])


@given(
    st.dictionaries(topic_names, st.integers(0, 7), min_size=1),
    st.dictionaries(
        st.text("mnopq", min_size=1, max_size=3),
        st.lists(topic_names, min_size=1, max_size=4, unique=True),
        min_size=1,
        max_size=6,
    ),
)
def test_every_subscribed_partition_assigned_exactly_once(
    counts: dict[str, int], subs: dict[str, list[str]]
) -> None:
    subscriptions = {m: MemberSubscription(m, tuple(t)) for m, t in subs.items()}
    wanted = {(t, p) for m in subs.values() for t in m if t in counts for p in range(counts[t])}
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        result = assignor.assign(counts, subscriptions)
        flat = [tp for parts in result.values() for tp in parts]
        assert sorted(flat) == sorted(wanted)
        for member, parts in result.items():
            assert all(t in subs[member] for t, _ in parts)


def test_consumer_protocol_roundtrip_every_version() -> None:
    sub = Subscription(("a", "b"), b"ud", (("a", 0), ("b", 3)), 7, "rack-1")
    assert decode_subscription(encode_subscription(sub)) == sub
    v0 = decode_subscription(encode_subscription(sub, version=0))
    assert v0 == Subscription(("a", "b"), b"ud")
    assignment = Assignment((("a", 1), ("a", 2), ("b", 0)), None)
    assert decode_assignment(encode_assignment(assignment)) == assignment
    assert decode_assignment(b"") == Assignment(())


def test_reads_kafka_python_subscription_bytes() -> None:
    sub_tp = ConsumerProtocolSubscription.TopicPartition
    theirs = ConsumerProtocolSubscription(
        version=1,
        topics=["x", "y"],
        user_data=None,
        owned_partitions=[sub_tp(topic="x", partitions=[0, 2])],
    )
    decoded = decode_subscription(bytes(theirs.encode(version=1)))
    assert decoded.topics == ("x", "y")
    assert decoded.owned_partitions == (("x", 0), ("x", 2))
    ours = encode_subscription(Subscription(("z",), None, (("z", 1),), 4, None))
    back = ConsumerProtocolSubscription.decode(ours, version=3)
    assert list(back.topics) == ["z"] and back.generation_id == 4
