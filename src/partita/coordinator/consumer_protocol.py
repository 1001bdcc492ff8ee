"""The parts of Kafka's consumer protocol (ConsumerProtocolSubscription) the coordinator
reads: which topics a member subscribes to. Everything else stays opaque bytes."""

from __future__ import annotations

import struct


def subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics named in a subscription (any version: they all start the same way)."""
    try:
        pos = 2  # int16 version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
