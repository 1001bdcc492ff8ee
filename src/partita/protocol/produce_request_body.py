"""ProduceRequest bodies (v3-v10) decoded by hand, record sets left as views of the frame.

kafka-python's decoder copies every ``bytes`` field out of the frame, so each record set
a broker receives was copied once before the log wrote it: 27 µs per 1 MB request. The
frame is a buffer of its own (``frames.FrameReceiver``) that nothing overwrites, so the
record sets can stay views of it for as long as anything holds them.

Layout (Kafka's ProduceRequest.json): transactional id (nullable string), acks (int16),
timeout (int32), then an array of topics (name, array of partitions: index (int32),
records (nullable bytes)). v9 is the first flexible version: compact strings, arrays and
bytes (unsigned varint length + 1, 0 for null), and a tagged-field section after each
partition, each topic and the body. The field names are kafka-python's, so the produce
handler reads either decoder's output alike.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from partita.protocol.wire import MalformedRequestError, read_uvarint, skip_tagged_fields

FIRST_FLEXIBLE_VERSION = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ProducePartitionData:
    index: int
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class ProduceTopicData:
    name: str
    partition_data: list[ProducePartitionData]


@dataclass(frozen=True, slots=True)
class ProduceRequestBody:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopicData]


class _Body:
    """A cursor over the body; every read checks the frame's end."""

    def __init__(self, view: memoryview, pos: int, flexible: bool) -> None:
        self.view = view
        self.pos = pos
        self.flexible = flexible

    def fixed(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.pos + layout.size > len(self.view):
            raise MalformedRequestError("produce request ends inside a field")
        values = layout.unpack_from(self.view, self.pos)
        self.pos += layout.size
        return values

    def length(self, what: str) -> int:
        """A string, bytes or array length; -1 means null."""
        if self.flexible:
            encoded, self.pos = read_uvarint(self.view, self.pos)
            return encoded - 1
        (length,) = self.fixed(_I32 if what != "string" else _I16)
        if length < -1:
            raise MalformedRequestError(f"produce request: {what} length {length}")
        return length

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.view):
            raise MalformedRequestError(
                f"produce request: a field of {size} bytes runs past the end of the frame"
            )
        data = self.view[self.pos : end]
        self.pos = end
        return data

    def string(self, field: str, *, nullable: bool = False) -> str | None:
        size = self.length("string")
        if size == -1:
            if nullable:
                return None
            raise MalformedRequestError(f"produce request: {field} is null but may not be")
        try:
            return str(self.take(size), "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError(f"produce request: {field} is not UTF-8") from None

    def count(self, field: str) -> int:
        size = self.length("array")
        if size == -1:
            raise MalformedRequestError(f"produce request: {field} is null but may not be")
        return size

    def end_of_struct(self) -> None:
        if self.flexible:
            self.pos = skip_tagged_fields(self.view, self.pos)
            if self.pos > len(self.view):
                raise MalformedRequestError("produce request: a tagged field runs past the end")


def decode_produce_request(view: memoryview, pos: int, version: int) -> ProduceRequestBody:
    """The body starting at ``pos`` of a ProduceRequest of ``version`` (3-10)."""
    body = _Body(view, pos, flexible=version >= FIRST_FLEXIBLE_VERSION)
    transactional_id = body.string("transactional_id", nullable=True)
    acks, timeout_ms = body.fixed(_ACKS_TIMEOUT)
    topics: list[ProduceTopicData] = []
    for _ in range(body.count("topic_data")):
        name = body.string("topic_data.name")
        assert name is not None
        partitions: list[ProducePartitionData] = []
        for _ in range(body.count("topic_data.partition_data")):
            (index,) = body.fixed(_I32)
            size = body.length("bytes")
            records = None if size == -1 else body.take(size)
            body.end_of_struct()
            partitions.append(ProducePartitionData(index, records))
        body.end_of_struct()
        topics.append(ProduceTopicData(name, partitions))
    body.end_of_struct()
    return ProduceRequestBody(transactional_id, acks, timeout_ms, topics)
