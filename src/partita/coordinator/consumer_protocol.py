"""What the coordinator (and the CLI) read from consumer protocol bytes; unreadable
metadata yields None or nothing instead of an error, as Kafka's coordinator does."""

from __future__ import annotations

from partita.errors import CorruptRecordError
from partita.protocol.consumer_protocol import decode_assignment, decode_subscription


def subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics named in a subscription; None when the bytes cannot be read."""
    try:
        return set(decode_subscription(metadata).topics)
    except CorruptRecordError:
        return None


def assignment_partitions(data: bytes) -> dict[str, list[int]]:
    """The partitions of an assignment, by topic (empty if it cannot be read)."""
    try:
        partitions = decode_assignment(data).partitions
    except CorruptRecordError:
        return {}
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return out
