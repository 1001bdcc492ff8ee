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


def assignment_partitions(data: bytes) -> dict[str, list[int]]:
    """The partitions of a ConsumerProtocolAssignment (empty if it cannot be read)."""
    out: dict[str, list[int]] = {}
    try:
        pos = 2
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + length].decode("utf-8")
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = list(struct.unpack_from(f">{max(count, 0)}i", data, pos))
            pos += 4 * max(count, 0)
            out[topic] = partitions
    except (struct.error, UnicodeDecodeError):
        return {}
    return out
