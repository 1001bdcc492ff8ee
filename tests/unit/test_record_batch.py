from __future__ import annotations

import struct

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from partita.errors import CorruptRecordError, InvalidRecordError
from partita.protocol.compression import Compression, decompress
from partita.protocol.record_batch import (
    HEADER_SIZE,
    check_crc,
    check_producer_batch,
    iter_headers,
    patch_base_offset,
    patch_leader_epoch,
    read_header,
    stamp_log_append_time,
)
from partita.protocol.records import Record, build_batch, decode_records
from tests.conftest import make_batch


@pytest.mark.parametrize("codec", list(Compression))
def test_our_batches_decode_with_aiokafka(codec: Compression) -> None:
    batch = build_batch(
        [Record(10, 1000, b"key", b"value", [("h1", b"x")]), Record(11, 1005, None, None)],
        base_offset=10,
        compression=codec,
    )
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    records = list(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (10, 1000, b"key", b"value"),
        (11, 1005, None, None),
    ]
    assert list(records[0].headers) == [("h1", b"x")]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_aiokafka_batches_decode_with_ours(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=7,
        producer_epoch=1,
        base_sequence=5,
        batch_size=1 << 20,
    )
    for i in range(5):
        builder.append(i, timestamp=2000 + i, key=f"k{i}".encode(), value=b"v" * i, headers=[])
    data = bytes(builder.build())
    header, records = decode_records(data)
    assert header.producer_id == 7 and header.base_sequence == 5
    assert header.records_count == 5 and header.last_offset_delta == 4
    assert [r.key for r in records] == [f"k{i}".encode() for i in range(5)]
    assert [r.timestamp for r in records] == [2000 + i for i in range(5)]
    check_crc(data, 0, header)


def test_patching_offset_and_epoch_keeps_crc_valid() -> None:
    batch = bytearray(make_batch(4))
    patch_base_offset(batch, 0, 1234)
    patch_leader_epoch(batch, 0, 9)
    header = read_header(batch)
    assert header.base_offset == 1234 and header.partition_leader_epoch == 9
    check_crc(batch, 0, header)


def test_log_append_time_restamps_and_rechecksums() -> None:
    batch = bytearray(make_batch(2))
    header = read_header(batch)
    stamp_log_append_time(batch, 0, header.size, 99_999)
    stamped = read_header(batch)
    assert stamped.is_log_append_time and stamped.max_timestamp == 99_999
    check_crc(batch, 0, stamped)
    _, records = decode_records(bytes(batch))
    assert {r.timestamp for r in records} == {99_999}


def test_flipped_payload_byte_fails_crc() -> None:
    batch = bytearray(make_batch(3))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        check_crc(batch, 0, read_header(batch))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.__setitem__(16, 1), "magic"),
        (lambda b: struct.pack_into(">i", b, 8, 10), "length"),
    ],
)
def test_malformed_headers_are_corrupt(mutate: object, message: str) -> None:
    batch = bytearray(make_batch(1))
    mutate(batch)  # type: ignore[operator]
    with pytest.raises(CorruptRecordError, match=message):
        read_header(batch)


def test_truncated_header_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_header(make_batch(1)[: HEADER_SIZE - 1])


def test_producer_batch_rules() -> None:
    batch = bytearray(make_batch(3))
    struct.pack_into(">i", batch, 23, 5)  # lastOffsetDelta no longer matches the count
    with pytest.raises(InvalidRecordError, match="inconsistent"):
        check_producer_batch(read_header(batch))
    batch = bytearray(make_batch(3))
    struct.pack_into(">i", batch, 57, 0)
    with pytest.raises(InvalidRecordError, match="record count"):
        check_producer_batch(read_header(batch))


def test_iter_headers_stops_at_partial_tail() -> None:
    a, b = make_batch(2), make_batch(3)
    data = a + b + b[:20]
    positions = [pos for pos, _ in iter_headers(data)]
    assert positions == [0, len(a)]


def test_xerial_framed_snappy_is_accepted() -> None:
    body = bytearray()
    raw = build_batch([Record(0, 1, b"k", b"v" * 50)])
    records_part = raw[HEADER_SIZE:]
    chunk = bytes(cramjam.snappy.compress_raw(records_part))
    body += b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(chunk)) + chunk
    assert decompress(Compression.SNAPPY, bytes(body)) == records_part
