"""Kafka's standard consumer protocol: the subscription and assignment bytes that group
members exchange through JoinGroup and SyncGroup (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3). Newer versions only append fields, so any
reader can take the prefix it knows."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from partita.errors import CorruptRecordError

SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = -1
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, n: int) -> None:
        self.out += struct.pack(">h", n)

    def i32(self, n: int) -> None:
        self.out += struct.pack(">i", n)

    def string(self, text: str | None) -> None:
        if text is None:
            self.i16(-1)
            return
        data = text.encode("utf-8")
        self.i16(len(data))
        self.out += data

    def bytes_(self, data: bytes | None) -> None:
        if data is None:
            self.i32(-1)
            return
        self.i32(len(data))
        self.out += data

    def topic_partitions(self, partitions: tuple[TopicPartition, ...]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        self.i32(len(by_topic))
        for topic, numbers in by_topic.items():
            self.string(topic)
            self.i32(len(numbers))
            for n in numbers:
                self.i32(n)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def more(self) -> bool:
        return self.pos < len(self.data)

    def _take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CorruptRecordError("consumer protocol data is truncated")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def i16(self) -> int:
        return self._take(">h")

    def i32(self) -> int:
        return self._take(">i")

    def string(self) -> str | None:
        length = self.i16()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise CorruptRecordError("consumer protocol string is truncated")
        text = self.data[self.pos : end].decode("utf-8")
        self.pos = end
        return text

    def bytes_(self) -> bytes | None:
        length = self.i32()
        if length < 0:
            return None
        end = self.pos + length
        if end > len(self.data):
            raise CorruptRecordError("consumer protocol bytes are truncated")
        data = self.data[self.pos : end]
        self.pos = end
        return data

    def topic_partitions(self) -> tuple[TopicPartition, ...]:
        out: list[TopicPartition] = []
        for _ in range(max(self.i32(), 0)):
            topic = self.string() or ""
            out += [(topic, self.i32()) for _ in range(max(self.i32(), 0))]
        return tuple(out)


def encode_subscription(sub: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    w = _Writer()
    w.i16(version)
    w.i32(len(sub.topics))
    for topic in sub.topics:
        w.string(topic)
    w.bytes_(sub.user_data)
    if version >= 1:
        w.topic_partitions(sub.owned_partitions)
    if version >= 2:
        w.i32(sub.generation)
    if version >= 3:
        w.string(sub.rack)
    return bytes(w.out)


def decode_subscription(data: bytes) -> Subscription:
    try:
        r = _Reader(data)
        version = r.i16()
        topics = tuple(r.string() or "" for _ in range(max(r.i32(), 0)))
        user_data = r.bytes_()
        owned: tuple[TopicPartition, ...] = ()
        generation, rack = -1, None
        if version >= 1 and r.more:
            owned = r.topic_partitions()
        if version >= 2 and r.more:
            generation = r.i32()
        if version >= 3 and r.more:
            rack = r.string()
        return Subscription(topics, user_data, owned, generation, rack)
    except (UnicodeDecodeError, struct.error) as exc:
        raise CorruptRecordError(f"unreadable subscription: {exc}") from exc


def encode_assignment(assignment: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    w = _Writer()
    w.i16(version)
    w.topic_partitions(assignment.partitions)
    w.bytes_(assignment.user_data)
    return bytes(w.out)


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(())
    try:
        r = _Reader(data)
        r.i16()
        partitions = r.topic_partitions()
        user_data = r.bytes_() if r.more else None
        return Assignment(partitions, user_data)
    except (UnicodeDecodeError, struct.error) as exc:
        raise CorruptRecordError(f"unreadable assignment: {exc}") from exc
