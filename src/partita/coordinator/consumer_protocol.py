"""What the coordinator reads from consumer protocol bytes; unreadable
metadata yields None or nothing instead of an error, as Kafka's coordinator does."""

from __future__ import annotations

from partita.errors import CorruptRecordError
from partita.protocol.consumer_protocol import decode_subscription


def subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics named in a subscription; None when the bytes cannot be read."""
    try:
        return set(decode_subscription(metadata).topics)
    except CorruptRecordError:
        return None
