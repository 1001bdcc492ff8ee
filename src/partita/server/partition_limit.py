"""``max.broker.partitions``: how many partition replicas one broker may hold, checked
before a CreateTopics or CreatePartitions records anything.

The name is KIP-578's (proposed for Kafka, never shipped). A refusal is
POLICY_VIOLATION, what Kafka 4 answers when a create asks for more partitions than it
accepts (KAFKA-17870's per-request cap, also checked before any replica is placed);
INVALID_PARTITIONS stays the answer for a count that is wrong in itself (below 1, or a
shrink). KIP-578's own proposed error code never shipped, so no client knows it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from partita.cluster.model import TopicState
from partita.errors import PolicyViolationError

CONFIG = "max.broker.partitions"


def check_placement(
    limit: int, topics: Iterable[TopicState], placed: Mapping[int, list[int]]
) -> None:
    """Refuse a placement (partition -> replica brokers) that would give any broker more
    than ``limit`` replicas, counting those ``topics`` already place there."""
    adding = Counter(broker for replicas in placed.values() for broker in replicas)
    held = Counter(
        broker
        for topic in topics
        for state in topic.partitions.values()
        for broker in state.replicas
        if broker in adding
    )
    for broker, count in sorted(adding.items()):
        if held[broker] + count > limit:
            raise PolicyViolationError(
                f"broker {broker} holds {held[broker]} partitions; {count} more would pass "
                f"{CONFIG}={limit}"
            )
