"""What a partita group member puts in its JoinGroup subscription, read back by other
clients' decoders: a group leader of another client must understand it."""

from __future__ import annotations

from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from partita.client.group_member import assignor_for
from partita.protocol.consumer_protocol import Subscription, encode_subscription


def test_eager_sticky_member_tells_the_leader_its_previous_assignment() -> None:
    previous = [("b", 2), ("a", 0), ("a", 3)]
    user_data = assignor_for("sticky").subscription_user_data(previous, 7)
    # An eager member has revoked everything by the time it joins: it owns nothing, and
    # a leader (aiokafka's sticky assignor here, Java's alike) learns the previous
    # assignment from the user data alone.
    metadata = encode_subscription(Subscription(("a", "b"), user_data, (), 7, "r1"))
    parsed = StickyPartitionAssignor.parse_member_metadata(
        ConsumerProtocolMemberMetadata.decode(metadata)
    )
    assert sorted((tp.topic, tp.partition) for tp in parsed.partitions) == sorted(previous)
    assert parsed.generation == 7
    assert sorted(parsed.subscription) == ["a", "b"]
    assert ConsumerProtocolSubscription.decode(metadata, version=3).rack_id == "r1"


def test_cooperative_member_sends_its_generation_and_others_send_nothing() -> None:
    cooperative = assignor_for("cooperative-sticky")
    assert cooperative.subscription_user_data([("a", 1)], 9) == (9).to_bytes(4, "big")
    assert assignor_for("range").subscription_user_data([("a", 1)], 9) is None
    assert assignor_for("roundrobin").subscription_user_data([], -1) is None
