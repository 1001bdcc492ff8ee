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

    def _length(self, field: str, width: struct.Struct) -> int:
        """A length prefix: an unsigned varint of the length + 1 in flexible versions,
        else a signed integer of ``width``. -1 means null."""
        if self.flexible:
            encoded, self.pos = read_uvarint(self.view, self.pos)
            return encoded - 1
        (length,) = self.fixed(width)
        if length < -1:
            raise MalformedRequestError(f"produce request: {field} has length {length}")
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

    def nullable_string(self, field: str) -> str | None:
        size = self._length(field, _I16)
        if size == -1:
            return None
        try:
            return str(self.take(size), "utf-8")
        except UnicodeDecodeError:
            raise MalformedRequestError(f"produce request: {field} is not UTF-8") from None

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise MalformedRequestError(f"produce request: {field} is null but may not be")
        return value

    def nullable_bytes(self, field: str) -> memoryview | None:
        size = self._length(field, _I32)
        return None if size == -1 else self.take(size)

    def count(self, field: str) -> int:
        size = self._length(field, _I32)
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
    transactional_id = body.nullable_string("transactional_id")
    acks, timeout_ms = body.fixed(_ACKS_TIMEOUT)
    topics: list[ProduceTopicData] = []
    for _ in range(body.count("topic_data")):
        name = body.string("topic_data.name")
        partitions: list[ProducePartitionData] = []
        for _ in range(body.count("topic_data.partition_data")):
            (index,) = body.fixed(_I32)
            records = body.nullable_bytes("topic_data.partition_data.records")
            body.end_of_struct()
            partitions.append(ProducePartitionData(index, records))
        body.end_of_struct()
        topics.append(ProduceTopicData(name, partitions))
    body.end_of_struct()
    return ProduceRequestBody(transactional_id, acks, timeout_ms, topics)
