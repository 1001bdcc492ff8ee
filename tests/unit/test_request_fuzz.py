"""Fuzzing the request decoder and the frame splitter (sans-IO).

Whatever bytes a client sends, ``decode_request`` may only answer with a decoded request,
``MalformedRequestError`` (close the connection) or ``UnsupportedRequestError`` (close it,
or answer ApiVersions with UNSUPPORTED_VERSION). Any other exception would escape into the
network loop as a crash of that connection with a traceback instead of a clean, logged
close. Valid requests encoded by kafka-python must round-trip for every supported API and
version, and any truncation of or trailing bytes after a valid request must be refused.
``FrameReceiver`` must split any chunking of a byte stream into exactly the frames sent.
"""

from __future__ import annotations

import os
import struct
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from partita.protocol.api import SUPPORTED, ApiKey
from partita.protocol.codec import UnsupportedRequestError, decode_request
from partita.protocol.frames import FrameReceiver
from partita.protocol.wire import MalformedRequestError

REJECTIONS = (MalformedRequestError, UnsupportedRequestError)

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Every (api key, version) partita advertises.
SPEC_VERSIONS: list[tuple[int, int]] = [
    (key, version)
    for key, spec in sorted(SUPPORTED.items())
    for version in range(spec.min_version, spec.max_version + 1)
]

int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
short_text = st.text(max_size=12)
client_ids = st.none() | st.text(max_size=16)


# -- valid requests, built with kafka-python's own classes ---------------------------------


@st.composite
def metadata_requests(draw: Any, version: int) -> Any:
    topic = MetadataRequest.MetadataRequestTopic
    names = st.lists(short_text, max_size=3)
    if version >= 10:
        topics = [
            topic(name=name, topic_id=draw(st.uuids())) for name in draw(names)
        ]  # name is nullable from v10 but kafka-python needs one to encode
    else:
        topics = [topic(name=name) for name in draw(names)]
    if version >= 1 and draw(st.booleans()):
        topics = None  # all topics
    return MetadataRequest(
        version=version,
        topics=topics,
        allow_auto_topic_creation=draw(st.booleans()),
        include_cluster_authorized_operations=draw(st.booleans()),
        include_topic_authorized_operations=draw(st.booleans()),
    )


@st.composite
def produce_requests(draw: Any, version: int) -> Any:
    data = ProduceRequest.TopicProduceData
    partition = data.PartitionProduceData
    topics = [
        data(
            name=draw(short_text),
            partition_data=[
                partition(index=draw(int32), records=draw(st.none() | st.binary(max_size=80)))
                for _ in range(draw(st.integers(0, 2)))
            ],
        )
        for _ in range(draw(st.integers(0, 2)))
    ]
    return ProduceRequest(
        version=version,
        transactional_id=draw(st.none() | short_text),
        acks=draw(int16),
        timeout_ms=draw(int32),
        topic_data=topics,
    )


@st.composite
def fetch_requests(draw: Any, version: int) -> Any:
    topic = FetchRequest.FetchTopic
    partition = topic.FetchPartition
    topics = [
        topic(
            topic=draw(short_text),
            topic_id=draw(st.uuids()),
            partitions=[
                partition(
                    partition=draw(int32),
                    current_leader_epoch=draw(int32),
                    fetch_offset=draw(int64),
                    last_fetched_epoch=draw(int32),
                    log_start_offset=draw(int64),
                    partition_max_bytes=draw(int32),
                )
                for _ in range(draw(st.integers(0, 2)))
            ],
        )
        for _ in range(draw(st.integers(0, 2)))
    ]
    return FetchRequest(
        version=version,
        replica_id=draw(int32),
        max_wait_ms=draw(int32),
        min_bytes=draw(int32),
        max_bytes=draw(int32),
        isolation_level=draw(int8),
        session_id=draw(int32),
        session_epoch=draw(int32),
        topics=topics,
        forgotten_topics_data=[],
        rack_id=draw(short_text),
    )


@st.composite
def list_offsets_requests(draw: Any, version: int) -> Any:
    topic = ListOffsetsRequest.ListOffsetsTopic
    partition = topic.ListOffsetsPartition
    topics = [
        topic(
            name=draw(short_text),
            partitions=[
                partition(
                    partition_index=draw(int32),
                    current_leader_epoch=draw(int32),
                    timestamp=draw(int64),
                )
                for _ in range(draw(st.integers(0, 2)))
            ],
        )
        for _ in range(draw(st.integers(0, 2)))
    ]
    return ListOffsetsRequest(
        version=version,
        replica_id=draw(int32),
        isolation_level=draw(int8),
        topics=topics,
    )


@st.composite
def create_topics_requests(draw: Any, version: int) -> Any:
    topic = CreateTopicsRequest.CreatableTopic
    config = topic.CreatableTopicConfig
    topics = [
        topic(
            name=draw(short_text),
            num_partitions=draw(int32),
            replication_factor=draw(int16),
            assignments=[],
            configs=[
                config(name=draw(short_text), value=draw(st.none() | short_text))
                for _ in range(draw(st.integers(0, 2)))
            ],
        )
        for _ in range(draw(st.integers(0, 2)))
    ]
    return CreateTopicsRequest(
        version=version,
        topics=topics,
        timeout_ms=draw(int32),
        validate_only=draw(st.booleans()),
    )


@st.composite
def api_versions_requests(draw: Any, version: int) -> Any:
    return ApiVersionsRequest(
        version=version,
        client_software_name=draw(short_text),
        client_software_version=draw(short_text),
    )


BUILDERS = {
    ApiKey.METADATA: metadata_requests,
    ApiKey.PRODUCE: produce_requests,
    ApiKey.FETCH: fetch_requests,
    ApiKey.LIST_OFFSETS: list_offsets_requests,
    ApiKey.CREATE_TOPICS: create_topics_requests,
    ApiKey.API_VERSIONS: api_versions_requests,
}


@st.composite
def valid_requests(draw: Any) -> tuple[Any, bytes]:
    """A kafka-python request for a supported API and version, and its frame (no size)."""
    key, version = draw(st.sampled_from(SPEC_VERSIONS))
    builder = BUILDERS.get(ApiKey(key))
    if builder is not None and draw(st.integers(0, 3)):
        request = draw(builder(version))
    else:  # every other API, and sometimes these too: the schema defaults
        request = SUPPORTED[key].request(version=version)
    request.with_header(correlation_id=draw(int32), client_id=draw(client_ids))
    return request, bytes(request.encode(header=True))


def schema(key: int) -> Any:
    """The request fields of API ``key``, from kafka-python's schema."""
    return SUPPORTED[key].request._struct._fields


def as_tree(obj: Any, version: int, fields: Any = None) -> Any:
    """The fields a request has in ``version``, as plain data (for comparisons). The
    schema's ``fields`` default to the object's own kafka-python struct; partita's hand
    decoders return plain objects with the same field names, walked by the schema."""
    if obj is None:
        return None
    if isinstance(obj, list):
        return [as_tree(item, version, fields) for item in obj]
    if fields is None:
        struct_ = getattr(type(obj), "_struct", None)
        fields = struct_._fields if struct_ is not None else None
    if fields is not None:
        return {
            f.name: as_tree(
                getattr(obj, f.name),
                version,
                f._fields if f.is_struct_array() or f.is_struct() else None,
            )
            for f in fields
            if f.for_version_q(version)
        }
    if isinstance(obj, memoryview | bytearray):
        return bytes(obj)
    return obj


def decode_or_reject(frame: bytes) -> Any:
    """Decode ``frame``; a rejection is fine, anything else propagates and fails."""
    try:
        header, spec, body = decode_request(frame)
    except REJECTIONS as exc:
        return exc
    assert spec.supports(header.api_version)
    assert SUPPORTED[header.api_key] is spec
    return body


def null_violations(obj: Any, version: int, path: str = "", fields: Any = None) -> list[str]:
    """Fields that hold None although the schema does not allow null in ``version``."""
    out: list[str] = []
    for f in fields if fields is not None else type(obj)._struct._fields:
        if not f.for_version_q(version) or f.tagged_field_q(version):
            continue
        if not (f.is_array() or f.is_struct() or f.type_str in ("string", "bytes", "records")):
            continue
        value = getattr(obj, f.name)
        here = f"{path}{f.name}"
        if value is None:
            if not f.nullable_for_version_q(version):
                out.append(here)
        elif f.is_struct_array():
            for i, item in enumerate(value):
                out += null_violations(item, version, f"{here}[{i}].", f._fields)
        elif f.is_struct():
            out += null_violations(value, version, f"{here}.", f._fields)
    return out


def request_header(key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    out = struct.pack(">hhi", key, version, correlation_id)
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        out += struct.pack(">h", len(client_id)) + client_id
    return out


# -- (a) arbitrary bytes ------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=600))
@example(b"")
@example(b"\x00" * 9)  # one byte short of a header
@example(b"\x00\x03\x00\x01\x00\x00\x00\x01\x7f\xff")  # client id of 32767 bytes, none sent
@example(b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x01\xff")  # client id not UTF-8
@example(b"\x00\x03\x00\x01\x00\x00\x00\x01\xff\xfe")  # client id length -2
@example(b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff" + b"\xff" * 8)  # endless header varint
@example(b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x01\x00\x7f")  # tagged field past the end
@example(b"\x03\xe7\x00\x00\x00\x00\x00\x01\xff\xff")  # api key 999
@example(b"\x00\x03\x00\x63\x00\x00\x00\x01\xff\xff")  # Metadata v99
@example(b"\x00\x12\x7f\xff\x00\x00\x00\x01\xff\xff")  # ApiVersions v32767
def test_random_bytes_only_raise_protocol_errors(frame: bytes) -> None:
    decode_or_reject(frame)


@FUZZ
@given(
    st.sampled_from(SPEC_VERSIONS),
    int32,
    st.none() | st.binary(max_size=8),
    st.binary(max_size=300),
)
def test_random_body_after_a_valid_header_only_raises_protocol_errors(
    api: tuple[int, int], correlation_id: int, client_id: bytes | None, body: bytes
) -> None:
    """Most random frames die in the header; this drives the body decoders."""
    key, version = api
    prefix = request_header(key, version, correlation_id, client_id)
    if SUPPORTED[key].flexible(version):
        prefix += b"\x00"  # no header tagged fields
    decode_or_reject(prefix + body)


@FUZZ
@given(st.integers(-(2**15), 2**15 - 1), int16, st.binary(max_size=64))
def test_unknown_api_keys_and_versions_are_unsupported(key: int, version: int, body: bytes) -> None:
    spec = SUPPORTED.get(key)
    if spec is not None and spec.supports(version):
        return
    frame = request_header(key, version, 42, b"fuzz") + body
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame)
    assert info.value.header.api_key == key
    assert info.value.header.api_version == version
    assert info.value.header.correlation_id == 42
    assert info.value.spec is spec


# Kafka's generated readers throw "non-nullable field X was serialized as null" for a
# negative length in a field that is not nullable in that version, and close the
# connection; kafka-python reads it as None, which no handler expects. (A count below -1
# is read as an empty array by kafka-python and answered as an empty request: a known,
# harmless difference from Kafka, which refuses it.)
_V1_HEADER = struct.Struct(">hhih")
_PRODUCE_V7 = _V1_HEADER.pack(0, 7, 1, -1) + struct.pack(">hhi", -1, 1, 100)
_PRODUCE_V9 = _V1_HEADER.pack(0, 9, 1, -1) + b"\x00" + b"\x00" + struct.pack(">hi", 1, 100)
NULL_IN_NON_NULLABLE = {
    "produce-v7-topic-data": _PRODUCE_V7 + struct.pack(">i", -1),
    "produce-v7-topic-name": _PRODUCE_V7 + struct.pack(">ihi", 1, -1, 0),
    "produce-v9-topic-data": _PRODUCE_V9 + b"\x00\x00",
    "produce-v9-topic-name": _PRODUCE_V9 + b"\x02\x00\x01\x00\x00",
    "metadata-v0-topics": _V1_HEADER.pack(3, 0, 1, -1) + struct.pack(">i", -1),
    "metadata-v1-topic-name": _V1_HEADER.pack(3, 1, 1, -1) + struct.pack(">ih", 1, -1),
    "create-topics-v2-topics": _V1_HEADER.pack(19, 2, 1, -1) + struct.pack(">iib", -1, 0, 0),
}


@pytest.mark.parametrize(
    "frame", list(NULL_IN_NON_NULLABLE.values()), ids=list(NULL_IN_NON_NULLABLE)
)
def test_null_in_a_non_nullable_field_is_malformed(frame: bytes) -> None:
    with pytest.raises(MalformedRequestError):
        decode_request(frame)


@FUZZ
@given(st.sampled_from(SPEC_VERSIONS), st.binary(max_size=120))
def test_whatever_decodes_respects_nullability(api: tuple[int, int], body: bytes) -> None:
    """The general form of the cases above, found by fuzzing: a request that decodes
    never carries None where its schema forbids null."""
    key, version = api
    prefix = request_header(key, version, 1, None)
    if SUPPORTED[key].flexible(version):
        prefix += b"\x00"
    result = decode_or_reject(prefix + body)
    if not isinstance(result, Exception):
        assert null_violations(result, version, fields=schema(key)) == []


# -- (b) valid requests and their mutations -----------------------------------------------


@pytest.mark.parametrize(("key", "version"), SPEC_VERSIONS)
def test_every_supported_version_round_trips(key: int, version: int) -> None:
    request = SUPPORTED[key].request(version=version)
    request.with_header(correlation_id=7, client_id="partita-test")
    header, spec, body = decode_request(bytes(request.encode(header=True)))
    assert (header.api_key, header.api_version) == (key, version)
    assert (header.correlation_id, header.client_id) == (7, "partita-test")
    assert spec is SUPPORTED[key]
    assert as_tree(body, version, schema(key)) == as_tree(request, version)


@FUZZ
@given(valid_requests())
def test_valid_requests_round_trip(case: tuple[Any, bytes]) -> None:
    request, frame = case
    header, spec, body = decode_request(frame)
    version = request.API_VERSION
    assert (header.api_key, header.api_version) == (request.API_KEY, version)
    assert header.correlation_id == request.header.correlation_id
    assert header.client_id == request.header.client_id
    assert spec.key == request.API_KEY
    assert as_tree(body, version, schema(spec.key)) == as_tree(request, version)
    assert null_violations(body, version, fields=schema(spec.key)) == []


@settings(FUZZ, max_examples=60)
@given(valid_requests())
def test_every_truncation_is_malformed(case: tuple[Any, bytes]) -> None:
    _, frame = case
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequestError):
            decode_request(frame[:cut])


@FUZZ
@given(valid_requests(), st.binary(min_size=1, max_size=16))
def test_trailing_bytes_are_refused_or_ignored(case: tuple[Any, bytes], trailer: bytes) -> None:
    """Kafka parses a request and ignores whatever follows it in the frame (librdkafka
    relies on that), so partita may either refuse trailing bytes as malformed or ignore
    them, but never let them change what the request says."""
    request, frame = case
    try:
        header, _, body = decode_request(frame + trailer)
    except MalformedRequestError:
        return
    version = request.API_VERSION
    assert (header.api_key, header.api_version) == (request.API_KEY, version)
    assert header.correlation_id == request.header.correlation_id
    assert header.client_id == request.header.client_id
    assert as_tree(body, version, schema(request.API_KEY)) == as_tree(request, version)


@FUZZ
@given(valid_requests(), st.data())
def test_byte_flips_decode_or_are_rejected(case: tuple[Any, bytes], data: Any) -> None:
    _, frame = case
    flips = data.draw(
        st.lists(
            st.tuples(st.integers(0, len(frame) - 1), st.integers(1, 255)),
            min_size=1,
            max_size=4,
        )
    )
    mutated = bytearray(frame)
    for position, mask in flips:
        mutated[position] ^= mask
    decode_or_reject(bytes(mutated))


@FUZZ
@given(valid_requests(), st.data())
def test_spliced_bytes_decode_or_are_rejected(case: tuple[Any, bytes], data: Any) -> None:
    """Insertions and deletions in the middle shift every later field."""
    _, frame = case
    start = data.draw(st.integers(0, len(frame)))
    end = data.draw(st.integers(start, min(len(frame), start + 8)))
    insert = data.draw(st.binary(max_size=8))
    decode_or_reject(frame[:start] + insert + frame[end:])


# -- (c) splitting a byte stream into frames ----------------------------------------------


def framed(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def receive_in_reads(receiver: FrameReceiver, stream: bytes, cuts: list[int]) -> list[bytes]:
    """Deliver ``stream`` as an asyncio buffered protocol would, in reads that end at
    ``cuts`` (a read also ends where the receiver's buffer does)."""
    out: list[bytes] = []
    previous = 0
    for cut in [*sorted(cuts), len(stream)]:
        while previous < cut and receiver.error is None:
            buffer = receiver.buffer()
            size = min(len(buffer), cut - previous)
            buffer[:size] = stream[previous : previous + size]
            out += [bytes(frame) for frame in receiver.received(size)]
            previous += size
    return out


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_any_chunking_yields_exactly_the_frames(frames: list[bytes], data: Any) -> None:
    stream = framed(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=24))
    receiver = FrameReceiver(max_frame_bytes=300)
    assert receive_in_reads(receiver, stream, cuts) == frames
    assert receiver.buffered == 0


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=5))
def test_byte_at_a_time_yields_exactly_the_frames(frames: list[bytes]) -> None:
    stream = framed(frames)
    receiver = FrameReceiver(max_frame_bytes=40)
    assert receive_in_reads(receiver, stream, list(range(len(stream)))) == frames
    assert receiver.buffered == 0


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    receiver = FrameReceiver(max_frame_bytes=16)
    assert receive_in_reads(receiver, framed([b"x" * 16, b""]), []) == [b"x" * 16, b""]
    assert receiver.error is None


@FUZZ
@given(
    st.lists(st.binary(max_size=50), max_size=4),
    st.one_of(st.integers(101, 2**31 - 1), st.integers(-(2**31), -1)),
    st.data(),
)
def test_an_oversized_or_negative_size_prefix_stops_the_stream_at_once(
    frames: list[bytes], bad_size: int, data: Any
) -> None:
    """The error comes from the read that completes the 4 size bytes, never after waiting
    for a body that will not come; and, as Kafka reads one request at a time, every
    complete frame in front of the bad prefix still comes out first, even from that read."""
    prefix_end = len(framed(frames)) + 4
    stream = framed(frames) + struct.pack(">i", bad_size) + b"junk"
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    receiver = FrameReceiver(max_frame_bytes=100)
    out: list[bytes] = []
    received = 0
    for cut in [*sorted(cuts), len(stream)]:
        if cut <= received:
            continue
        buffer = receiver.buffer()
        size = min(len(buffer), cut - received)
        buffer[:size] = stream[received : received + size]
        out += [bytes(frame) for frame in receiver.received(size)]
        received += size
        assert (receiver.error is not None) == (received >= prefix_end)
    assert receiver.error is not None, "an oversized or negative size prefix was accepted"
    assert (receiver.error.size, receiver.error.limit) == (bad_size, 100)
    assert out == frames
    assert receiver.received(0) == []  # nothing after the bad prefix is read


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_an_announced_frame_takes_memory_only_as_its_bytes_arrive() -> None:
    # A client may announce up to socket.request.max.bytes and send nothing more: the
    # frame's buffer is reserved, but memory is only used as its bytes arrive.
    receiver = FrameReceiver(max_frame_bytes=200 << 20)
    before = _resident_bytes()
    assert receive_in_reads(receiver, struct.pack(">i", 100 << 20) + b"x", []) == []
    assert _resident_bytes() - before < 8 << 20
    assert receiver.buffered == 1


def test_a_frame_dribbled_byte_by_byte_costs_about_its_size() -> None:
    frame = bytes(range(256)) * 800  # 200 KiB
    stream = struct.pack(">i", len(frame)) + frame
    receiver = FrameReceiver(max_frame_bytes=1 << 20)
    out: list[memoryview] = []
    tracemalloc.start()
    try:
        for i in range(len(stream)):
            receiver.buffer()[:1] = stream[i : i + 1]
            out += receiver.received(1)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [bytes(f) for f in out] == [frame]
    assert peak < 2 * len(frame)
