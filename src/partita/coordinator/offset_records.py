"""Kafka's ``__consumer_offsets`` record layouts, and which partition holds a group.

Keys and values start with an int16 version, then fields in Kafka's classic encoding
(int16-length strings, big-endian integers):

    OffsetCommitKey   v1: group, topic, partition
    OffsetCommitValue v3: offset, leader epoch, metadata, commit timestamp
                      v1: offset, metadata, commit timestamp, expire timestamp
    GroupMetadataKey  v2: group

A null value is a tombstone: the compacted topic then forgets the key.
"""

from __future__ import annotations

import struct

from partita.coordinator.group_machine import CommittedOffset

OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31*h + c over UTF-16 code units, in 32-bit ints."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def group_partition(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    pos += 2
    if length < 0:
        return "", pos
    return data[pos : pos + length].decode("utf-8"), pos + length


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", 1) + _string(group_id) + _string(topic) + struct.pack(">i", partition)


def group_key(group_id: str) -> bytes:
    return struct.pack(">h", 2) + _string(group_id)


def offset_value(value: CommittedOffset) -> bytes:
    if value.expire_timestamp is not None:
        return (
            struct.pack(">hq", 1, value.offset)
            + _string(value.metadata)
            + struct.pack(">qq", value.commit_timestamp, value.expire_timestamp)
        )
    return (
        struct.pack(">hqi", 3, value.offset, value.leader_epoch)
        + _string(value.metadata)
        + struct.pack(">q", value.commit_timestamp)
    )


def parse_key(key: bytes) -> tuple[str, str, int] | tuple[str] | None:
    """(group, topic, partition) for an offset key, (group,) for a group key."""
    (version,) = struct.unpack_from(">h", key, 0)
    if version in (0, 1):
        group, pos = _read_string(key, 2)
        topic, pos = _read_string(key, pos)
        (partition,) = struct.unpack_from(">i", key, pos)
        return group, topic, partition
    if version == 2:
        group, _ = _read_string(key, 2)
        return (group,)
    return None


def parse_offset_value(value: bytes) -> CommittedOffset:
    (version,) = struct.unpack_from(">h", value, 0)
    (offset,) = struct.unpack_from(">q", value, 2)
    pos = 10
    epoch = -1
    if version >= 3:
        (epoch,) = struct.unpack_from(">i", value, pos)
        pos += 4
    metadata, pos = _read_string(value, pos)
    (commit_ts,) = struct.unpack_from(">q", value, pos)
    pos += 8
    expire = None
    if version == 1:
        (expire,) = struct.unpack_from(">q", value, pos)
        expire = None if expire < 0 else expire
    return CommittedOffset(offset, epoch, metadata, commit_ts, expire)
