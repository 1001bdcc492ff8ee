"""The requests a consumer sends before its first record, framed by hand, and their
responses read by hand: Metadata v12, ListOffsets v7 and Fetch v11 (whose response is
``fetch_response.decode_fetch_response_v11``); and a follower's Fetch v12, sent once per
acknowledged batch, where kafka-python's classes cost 40 µs a request (``struct`` packs:
4 µs).

Every other request of the client uses kafka-python's classes, generated from Kafka's
JSON schemas. Those take 0.1 s to import and add 20,000 objects that every full garbage
collection of the process then walks; a consumer's start, and its steady state, should
pay for neither. Field names are those of Kafka's schemas, as kafka-python's are, so
callers read either kind of response the same way. The unit tests compare every byte
of these requests with kafka-python's encoding and every field of the responses with
its decoding.

``BrokerConnection.send`` writes ``frame_chunks`` instead of encoding the request, and
reads the response body with ``decode_response``; ``flexible_response`` says whether the
response header carries tagged fields (KIP-482).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from partita.errors import CorruptRecordError
from partita.protocol.fetch_response import (
    FetchedResponse,
    decode_fetch_response_v11,
    decode_fetch_response_v12,
)
from partita.protocol.wire import encode_uvarint, read_uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
_NO_TAGS = b"\x00"
_NULL_UUID = bytes(16)


def _request_header(
    api_key: int, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """Request header v1 (v2 adds the tagged fields, written by the caller)."""
    out = bytearray(_HEADER.pack(api_key, version, correlation_id))
    if client_id is None:
        out += _I16.pack(-1)
    else:
        name = client_id.encode()
        out += _I16.pack(len(name)) + name
    return bytes(out)


def _framed(parts: Sequence[bytes]) -> list[bytes]:
    size = sum(len(part) for part in parts)
    return [_I32.pack(size), *parts]


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return encode_uvarint(len(data) + 1) + data


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


class _Reader:
    """Fields of a response body, in order; CorruptRecordError when one runs past the end."""

    __slots__ = ("pos", "view")

    def __init__(self, body: memoryview) -> None:
        self.view = body
        self.pos = 0

    def fixed(self, layout: struct.Struct) -> int:
        end = self.pos + layout.size
        if end > len(self.view):
            raise CorruptRecordError("response ends inside a field")
        (value,) = layout.unpack_from(self.view, self.pos)
        self.pos = end
        return int(value)

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.view, self.pos)
        except Exception as exc:
            raise CorruptRecordError(f"response: {exc}") from None
        return value

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if size < 0 or end > len(self.view):
            raise CorruptRecordError("response ends inside a field")
        data = self.view[self.pos : end]
        self.pos = end
        return data

    def compact_nullable_string(self) -> str | None:
        size = self.uvarint() - 1
        return None if size < 0 else str(self.take(size), "utf-8", "replace")

    def compact_string(self) -> str:
        return self.compact_nullable_string() or ""

    def compact_count(self) -> int:
        """Entries of a compact array (-1: null)."""
        return self.uvarint() - 1

    def int32_array(self) -> list[int]:
        return [self.fixed(_I32) for _ in range(max(self.compact_count(), 0))]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(16)))

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            self.take(self.uvarint())


# -- Metadata v12 ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataBroker:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class MetadataPartition:
    error_code: int
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: list[int]
    isr_nodes: list[int]
    offline_replicas: list[int]


@dataclass(frozen=True, slots=True)
class MetadataTopic:
    error_code: int
    name: str | None
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[MetadataPartition]
    authorized_operations: int  # a bitfield; -2147483648: not asked for


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    throttle_time_ms: int
    brokers: list[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataTopic]


def decode_metadata_response_v12(body: memoryview) -> MetadataResponse:
    r = _Reader(body)
    throttle = r.fixed(_I32)
    brokers = []
    for _ in range(max(r.compact_count(), 0)):
        node_id = r.fixed(_I32)
        host = r.compact_string()
        port = r.fixed(_I32)
        rack = r.compact_nullable_string()
        r.skip_tags()
        brokers.append(MetadataBroker(node_id, host, port, rack))
    cluster_id = r.compact_nullable_string()
    controller_id = r.fixed(_I32)
    topics = []
    for _ in range(max(r.compact_count(), 0)):
        error_code = r.fixed(_I16)
        name = r.compact_nullable_string()
        topic_id = r.uuid()
        is_internal = bool(r.fixed(_I8))
        partitions = []
        for _ in range(max(r.compact_count(), 0)):
            p_error, index, leader, epoch = (
                r.fixed(_I16),
                r.fixed(_I32),
                r.fixed(_I32),
                r.fixed(_I32),
            )
            replicas, isr, offline = r.int32_array(), r.int32_array(), r.int32_array()
            r.skip_tags()
            partitions.append(
                MetadataPartition(p_error, index, leader, epoch, replicas, isr, offline)
            )
        operations = r.fixed(_I32)
        r.skip_tags()
        topics.append(
            MetadataTopic(error_code, name, topic_id, is_internal, partitions, operations)
        )
    r.skip_tags()
    return MetadataResponse(throttle, brokers, cluster_id, controller_id, topics)


class MetadataRequestV12:
    """Metadata for ``topics`` (None: every topic)."""

    API_KEY = 3
    API_VERSION = 12
    flexible_response = True

    @staticmethod
    def decode_response(body: memoryview) -> MetadataResponse:
        return decode_metadata_response_v12(body)

    def __init__(
        self,
        topics: Sequence[str] | None,
        allow_auto_topic_creation: bool = False,
        include_topic_authorized_operations: bool = False,
    ) -> None:
        self.topics = topics
        self.allow_auto_topic_creation = allow_auto_topic_creation
        self.include_topic_authorized_operations = include_topic_authorized_operations

    def frame_chunks(self, correlation_id: int, client_id: str | None) -> list[bytes]:
        body = bytearray(_request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))
        body += _NO_TAGS
        if self.topics is None:
            body += encode_uvarint(0)
        else:
            body += encode_uvarint(len(self.topics) + 1)
            for name in self.topics:
                body += _NULL_UUID + _compact_string(name) + _NO_TAGS
        body += _I8.pack(self.allow_auto_topic_creation)
        body += _I8.pack(self.include_topic_authorized_operations)
        body += _NO_TAGS
        return _framed([bytes(body)])


# -- ListOffsets v7 --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResponse:
    partition_index: int
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: list[ListOffsetsPartitionResponse]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    throttle_time_ms: int
    topics: list[ListOffsetsTopicResponse]


def decode_list_offsets_response_v7(body: memoryview) -> ListOffsetsResponse:
    r = _Reader(body)
    throttle = r.fixed(_I32)
    topics = []
    for _ in range(max(r.compact_count(), 0)):
        name = r.compact_string()
        partitions = []
        for _ in range(max(r.compact_count(), 0)):
            index, code = r.fixed(_I32), r.fixed(_I16)
            timestamp, offset, epoch = r.fixed(_I64), r.fixed(_I64), r.fixed(_I32)
            r.skip_tags()
            partitions.append(ListOffsetsPartitionResponse(index, code, timestamp, offset, epoch))
        r.skip_tags()
        topics.append(ListOffsetsTopicResponse(name, partitions))
    r.skip_tags()
    return ListOffsetsResponse(throttle, topics)


class ListOffsetsRequestV7:
    """ListOffsets for (topic, [(partition, timestamp)]) pairs: a timestamp, or -2
    earliest, -1 latest, -3 the record with the largest timestamp."""

    API_KEY = 2
    API_VERSION = 7
    flexible_response = True

    @staticmethod
    def decode_response(body: memoryview) -> ListOffsetsResponse:
        return decode_list_offsets_response_v7(body)

    def __init__(
        self,
        topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
        isolation_level: int = 0,
        replica_id: int = -1,
    ) -> None:
        self.topics = topics
        self.isolation_level = isolation_level
        self.replica_id = replica_id

    def frame_chunks(self, correlation_id: int, client_id: str | None) -> list[bytes]:
        body = bytearray(_request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))
        body += _NO_TAGS
        body += _I32.pack(self.replica_id) + _I8.pack(self.isolation_level)
        body += encode_uvarint(len(self.topics) + 1)
        for name, partitions in self.topics:
            body += _compact_string(name) + encode_uvarint(len(partitions) + 1)
            for index, timestamp in partitions:
                # current leader epoch -1: no fencing, as a consumer without epochs asks
                body += _I32.pack(index) + _I32.pack(-1) + _I64.pack(timestamp) + _NO_TAGS
            body += _NO_TAGS
        body += _NO_TAGS
        return _framed([bytes(body)])


# -- Fetch v11 -------------------------------------------------------------------------

_FETCH_HEAD = struct.Struct(">iiiibii")
_FETCH_PARTITION = struct.Struct(">iiqqi")


class FetchRequestV11:
    """A session-less Fetch (v11): ``topics`` is (topic, [(partition, fetch offset)])."""

    API_KEY = 1
    API_VERSION = 11
    flexible_response = False

    @staticmethod
    def decode_response(body: memoryview) -> FetchedResponse:
        return decode_fetch_response_v11(body)

    def __init__(
        self,
        topics: Sequence[tuple[str, Sequence[tuple[int, int]]]],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partition_max_bytes: int,
        isolation_level: int = 0,
        rack_id: str = "",
        replica_id: int = -1,
    ) -> None:
        self.topics = topics
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.isolation_level = isolation_level
        self.rack_id = rack_id
        self.replica_id = replica_id

    def frame_chunks(self, correlation_id: int, client_id: str | None) -> list[bytes]:
        body = bytearray(_request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))
        body += _FETCH_HEAD.pack(
            self.replica_id,
            self.max_wait_ms,
            self.min_bytes,
            self.max_bytes,
            self.isolation_level,
            0,  # session id: no fetch session
            -1,  # session epoch: a full fetch
        )
        body += _I32.pack(len(self.topics))
        for name, partitions in self.topics:
            body += _string(name) + _I32.pack(len(partitions))
            for index, offset in partitions:
                # current leader epoch and log start offset: -1, unknown to a consumer
                body += _FETCH_PARTITION.pack(index, -1, offset, -1, self.partition_max_bytes)
        body += _I32.pack(0)  # forgotten topics: none without a session
        body += _string(self.rack_id)
        return _framed([bytes(body)])


_REPLICA_PARTITION = struct.Struct(">iiqiqi")


class ReplicaFetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class ReplicaFetchRequestV12:
    """A follower's session-less Fetch (v12, the first flexible one and the first with
    LastFetchedEpoch): ``topics`` is (topic, [ReplicaFetchPartition])."""

    API_KEY = 1
    API_VERSION = 12
    flexible_response = True

    @staticmethod
    def decode_response(body: memoryview) -> FetchedResponse:
        return decode_fetch_response_v12(body)

    def __init__(
        self,
        replica_id: int,
        topics: Sequence[tuple[str, Sequence[ReplicaFetchPartition]]],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> None:
        self.replica_id = replica_id
        self.topics = topics
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes

    def frame_chunks(self, correlation_id: int, client_id: str | None) -> list[bytes]:
        body = bytearray(_request_header(self.API_KEY, self.API_VERSION, correlation_id, client_id))
        body += _NO_TAGS  # request header v2
        body += _FETCH_HEAD.pack(
            self.replica_id,
            self.max_wait_ms,
            self.min_bytes,
            self.max_bytes,
            0,  # isolation level: a follower reads to the log end regardless
            0,  # session id: no fetch session
            -1,  # session epoch: a full fetch
        )
        body += encode_uvarint(len(self.topics) + 1)
        for name, partitions in self.topics:
            body += _compact_string(name) + encode_uvarint(len(partitions) + 1)
            for p in partitions:
                body += _REPLICA_PARTITION.pack(*p) + _NO_TAGS
            body += _NO_TAGS
        body += encode_uvarint(1)  # forgotten topics: none without a session
        body += _compact_string("")  # rack id: only a consumer's matters
        body += _NO_TAGS
        return _framed([bytes(body)])
