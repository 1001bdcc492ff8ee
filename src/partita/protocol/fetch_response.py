"""FetchResponse by hand: the broker's encoder (v4-v16) and the clients' v11 decoder.

Fetch is the hottest path of a broker: record bytes go from the segment file into the
response as they are. Building kafka-python objects for it would copy every record
set twice; this encoder writes the few fixed fields around the records itself and
returns the frame as a list of chunks for ``transport.writelines``. On the client side
the same holds in reverse: kafka-python's decoder copies each partition's records out of
the frame (megabytes a fetch, into fresh memory); ``decode_fetch_response_v11`` hands
them out as views of the frame instead.

Layouts (Kafka's FetchResponse.json): v4-v11 use int32 array and record lengths and int16
strings; v12+ are "flexible": unsigned varint lengths +1, and a tagged-field section after
every struct. v13+ name topics by id instead of by name.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from partita.errors import CorruptRecordError
from partita.protocol.file_region import FileRegion
from partita.protocol.wire import encode_uvarint, read_uvarint, skip_tagged_fields

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_V7 = struct.Struct(">ihi")  # throttle, error, session id
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable, log start
_PARTITION_V4 = struct.Struct(">ihqq")  # no log start offset before v5


@dataclass(slots=True)
class PartitionResult:
    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileRegion | None = b""  # a region is sent by sendfile
    preferred_read_replica: int = -1
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12+ tag 0
    current_leader: tuple[int, int] | None = None  # (leader id, epoch), v12+ tag 1
    # read_committed: the aborted transactions in the offsets returned, (producer id,
    # first offset); None for a read_uncommitted fetch.
    aborted_transactions: list[tuple[int, int]] | None = None


@dataclass(slots=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionResult]


def _partition_tags(p: PartitionResult) -> bytes:
    fields: list[bytes] = []
    if p.diverging_epoch is not None:
        body = struct.pack(">iq", *p.diverging_epoch) + b"\x00"
        fields.append(encode_uvarint(0) + encode_uvarint(len(body)) + body)
    if p.current_leader is not None:
        body = struct.pack(">ii", *p.current_leader) + b"\x00"
        fields.append(encode_uvarint(1) + encode_uvarint(len(body)) + body)
    return encode_uvarint(len(fields)) + b"".join(fields)


_ABORTED = struct.Struct(">qq")  # producer id, first offset


def _aborted(aborted: list[tuple[int, int]] | None, flexible: bool) -> bytes:
    if aborted is None:
        return b"\x00" if flexible else _I32.pack(-1)
    if flexible:
        entries = b"".join(_ABORTED.pack(*a) + b"\x00" for a in aborted)  # + tagged fields
        return encode_uvarint(len(aborted) + 1) + entries
    return _I32.pack(len(aborted)) + b"".join(_ABORTED.pack(*a) for a in aborted)


def set_fetch_throttle(
    chunks: list[bytes | FileRegion], version: int, throttle_time_ms: int
) -> list[bytes | FileRegion]:
    """An encoded response with its throttle time set (the body's first field; v1+)."""
    head = chunks[0]
    if version < 1 or not isinstance(head, bytes) or len(head) < 4:
        return chunks
    return [_I32.pack(throttle_time_ms) + head[4:], *chunks[1:]]


def encode_fetch_response(
    version: int,
    topics: list[TopicResult],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[bytes | FileRegion]:
    """The response body (no frame size or header) as chunks to be written in order."""
    flexible = version >= 12
    chunks: list[bytes | FileRegion] = []
    if version >= 7:
        chunks.append(_HEAD_V7.pack(throttle_time_ms, error_code, session_id))
    else:
        chunks.append(_I32.pack(throttle_time_ms))
    chunks.append(encode_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)))
    for topic in topics:
        if version >= 13:
            chunks.append(topic.topic_id.bytes)
        else:
            name = topic.name.encode()
            chunks.append(
                encode_uvarint(len(name) + 1) + name if flexible else _I16.pack(len(name)) + name
            )
        parts = topic.partitions
        chunks.append(encode_uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for p in parts:
            if version >= 5:
                chunks.append(
                    _PARTITION.pack(
                        p.index,
                        p.error_code,
                        p.high_watermark,
                        p.last_stable_offset,
                        p.log_start_offset,
                    )
                )
            else:
                chunks.append(
                    _PARTITION_V4.pack(
                        p.index, p.error_code, p.high_watermark, p.last_stable_offset
                    )
                )
            chunks.append(_aborted(p.aborted_transactions, flexible))
            if version >= 11:
                chunks.append(_I32.pack(p.preferred_read_replica))
            records = p.records
            if records is None:
                chunks.append(b"\x00" if flexible else _I32.pack(-1))
            else:
                size = len(records)
                chunks.append(encode_uvarint(size + 1) if flexible else _I32.pack(size))
                if records:
                    chunks.append(records)
            if flexible:
                chunks.append(_partition_tags(p))
        if flexible:
            chunks.append(b"\x00")  # topic tagged fields
    if flexible:
        chunks.append(b"\x00")  # response tagged fields (NodeEndpoints only when non-empty)
    return chunks


# -- decoding (clients; the session-less v11 fetches partita's consumers send) ---------


@dataclass(slots=True)
class FetchedPartition:
    """One partition of a fetch response, named as kafka-python names the fields."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None  # (producer id, first offset)
    preferred_read_replica: int
    records: memoryview | None  # a view of the response frame: nothing copied
    # v12+: (epoch, end offset) where a follower's log diverged from the leader's.
    diverging_epoch: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchedTopic:
    topic: str
    partitions: list[FetchedPartition]


@dataclass(slots=True)
class FetchedResponse:
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: list[FetchedTopic]


_ABORTED = struct.Struct(">qq")


class _Reader:
    """Fields read off a response body in order; any overrun is a corrupt response."""

    __slots__ = ("body", "pos")

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.pos = 0

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if self.pos + layout.size > len(self.body):
            raise CorruptRecordError(f"fetch response ends inside a field at {self.pos}")
        values = layout.unpack_from(self.body, self.pos)
        self.pos += layout.size
        return values

    def count(self) -> int:
        (n,) = self.unpack(_I32)
        return n

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.body):
            raise CorruptRecordError(f"fetch response: {n} bytes at {self.pos} run past its end")
        view = self.body[self.pos : self.pos + n]
        self.pos += n
        return view


def decode_fetch_response_v11(body: memoryview) -> FetchedResponse:
    """A FetchResponse v11 body (after the correlation id); records stay views of it."""
    reader = _Reader(body)
    throttle, error, session = reader.unpack(_HEAD_V7)
    topics: list[FetchedTopic] = []
    for _ in range(reader.count()):
        (name_length,) = reader.unpack(_I16)
        name = str(reader.take(name_length), "utf-8", "replace")
        partitions: list[FetchedPartition] = []
        for _ in range(reader.count()):
            index, code, high_watermark, last_stable, log_start = reader.unpack(_PARTITION)
            aborted: list[tuple[int, int]] | None = None
            entries = reader.count()
            if entries < -1:
                raise CorruptRecordError(f"fetch response: {entries} aborted transactions")
            if entries >= 0:
                aborted = []
                for _ in range(entries):
                    producer, first = reader.unpack(_ABORTED)
                    aborted.append((producer, first))
            (preferred,) = reader.unpack(_I32)
            size = reader.count()
            records = None if size == -1 else reader.take(size)
            partitions.append(
                FetchedPartition(
                    index, code, high_watermark, last_stable, log_start, aborted, preferred, records
                )
            )
        topics.append(FetchedTopic(name, partitions))
    return FetchedResponse(throttle, error, session, topics)


_I64_PAIR = struct.Struct(">iq")


def decode_fetch_response_v12(body: memoryview) -> FetchedResponse:
    """A FetchResponse v12 body (flexible: compact arrays and strings, tagged fields),
    as a follower reads it; the DivergingEpoch tag is kept, the others skipped."""
    reader = _Reader(body)
    throttle, error, session = reader.unpack(_HEAD_V7)
    topics: list[FetchedTopic] = []
    for _ in range(_compact_count(reader)):
        name = str(reader.take(_compact_count(reader)), "utf-8", "replace")
        partitions: list[FetchedPartition] = []
        for _ in range(_compact_count(reader)):
            index, code, high_watermark, last_stable, log_start = reader.unpack(_PARTITION)
            aborted: list[tuple[int, int]] | None = None
            entries = _compact_count(reader, nullable=True)
            if entries >= 0:
                aborted = []
                for _ in range(entries):
                    producer, first = reader.unpack(_ABORTED)
                    aborted.append((producer, first))
                    _skip_tags(reader)
            (preferred,) = reader.unpack(_I32)
            size = _compact_count(reader, nullable=True)
            records = None if size < 0 else reader.take(size)
            diverging = None
            tags, reader.pos = read_uvarint(reader.body, reader.pos)
            for _ in range(tags):
                tag, reader.pos = read_uvarint(reader.body, reader.pos)
                length, reader.pos = read_uvarint(reader.body, reader.pos)
                field = reader.take(length)
                if tag == 0 and length >= _I64_PAIR.size:
                    diverging = _I64_PAIR.unpack_from(field, 0)
            partitions.append(
                FetchedPartition(
                    index, code, high_watermark, last_stable, log_start, aborted, preferred,
                    records, diverging,
                )
            )  # fmt: skip
        _skip_tags(reader)
        topics.append(FetchedTopic(name, partitions))
    _skip_tags(reader)
    return FetchedResponse(throttle, error, session, topics)


def _compact_count(reader: _Reader, *, nullable: bool = False) -> int:
    """A compact array's length or a compact string's size: a uvarint of n + 1 (0 is
    null, -1 here)."""
    value, reader.pos = read_uvarint(reader.body, reader.pos)
    if value == 0 and not nullable:
        raise CorruptRecordError("fetch response: a null where a value is required")
    return value - 1


def _skip_tags(reader: _Reader) -> None:
    reader.pos = skip_tagged_fields(reader.body, reader.pos)
