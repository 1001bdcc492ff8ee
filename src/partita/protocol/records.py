"""Encoding and decoding the records inside a v2 batch.

This is the slow path, record by record, used only where a broker has to look inside a
batch (compaction, the exact offset for a timestamp) and by partita's own producer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression, compress, decompress
from partita.protocol.record_batch import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_POS,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    compute_crc,
    encode_header,
    read_header,
)

Header = tuple[str, bytes | None]


@dataclass(slots=True)
class Record:
    """One record with absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the end of the record")
    return buf[pos : pos + length], pos + length


def encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] = (),
) -> None:
    body = bytearray(b"\x00")  # record attributes are unused in v2
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, key)
    _write_bytes(body, value)
    write_varint(body, len(headers))
    for hkey, hvalue in headers:
        _write_bytes(body, hkey.encode())
        _write_bytes(body, hvalue)
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    log_append_time: bool = False,
    transactional: bool = False,
    control: bool = False,
    delete_horizon_ms: int | None = None,
    last_offset_delta: int | None = None,
) -> bytes:
    """Encode ``records`` (absolute offsets and timestamps) as one v2 batch.

    ``last_offset_delta`` may exceed the last record's delta: compaction keeps a batch's
    offset range even when it drops the records at its end.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    first_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    base_ts = delete_horizon_ms if delete_horizon_ms is not None else first_ts
    body = bytearray()
    for r in records:
        encode_record(
            body, r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers
        )
    payload = compress(compression, bytes(body))
    attributes = int(compression)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_BIT
    if transactional:
        attributes |= TRANSACTIONAL_BIT
    if control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset
    size = HEADER_SIZE + len(payload)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=size - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    batch = bytearray(encode_header(header))
    batch += payload
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch, 0, size))
    return bytes(batch)


def empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with no record left: what compaction keeps of a producer's
    last batch, whose header (producer id, epoch, sequence range, offset range) replaying
    the log needs. Kafka writes the same."""
    size = HEADER_SIZE
    empty = header._replace(
        batch_length=size - LOG_OVERHEAD,
        crc=0,
        attributes=header.attributes & ~COMPRESSION_MASK,
        records_count=0,
    )
    batch = bytearray(encode_header(empty))
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch, 0, size))
    return bytes(batch)


def decode_records(batch: bytes | memoryview, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Decode every record of the batch at ``pos`` into absolute offsets and timestamps."""
    header = read_header(batch, pos)
    if pos + header.size > len(batch):
        raise CorruptRecordError("record batch is truncated")
    raw = memoryview(batch)[pos + HEADER_SIZE : pos + header.size]
    data = decompress(header.compression, raw)
    records: list[Record] = []
    cursor = 0
    for _ in range(header.records_count):
        length, cursor = read_varint(data, cursor)
        end = cursor + length
        if end > len(data):
            raise CorruptRecordError("record runs past the end of its batch")
        cursor += 1  # record attributes
        ts_delta, cursor = read_varint(data, cursor)
        off_delta, cursor = read_varint(data, cursor)
        key, cursor = _read_bytes(data, cursor)
        value, cursor = _read_bytes(data, cursor)
        n_headers, cursor = read_varint(data, cursor)
        headers: list[Header] = []
        for _h in range(n_headers):
            hkey, cursor = _read_bytes(data, cursor)
            hvalue, cursor = _read_bytes(data, cursor)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))
        if cursor != end:
            raise CorruptRecordError("record length does not match its fields")
        timestamp = (
            header.max_timestamp if header.is_log_append_time else header.base_timestamp + ts_delta
        )
        records.append(Record(header.base_offset + off_delta, timestamp, key, value, headers))
    return header, records


def attributes_of(batch: bytes | memoryview, pos: int = 0) -> int:
    return int(struct.unpack_from(">h", batch, pos + ATTRIBUTES_POS)[0])
