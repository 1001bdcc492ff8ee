"""Views over Kafka record batches (message format v2, magic 2) as opaque bytes.

A batch is a 61-byte header followed by its records. The storage and network paths
only ever touch the header: validating it, checking its CRC32C and patching the base
offset and partition leader epoch in place. Neither of those two fields is covered by
the CRC (it starts at the attributes field), so patching them costs no re-checksum.

    offset  size  field
         0     8  baseOffset
         8     4  batchLength (bytes after this field)
        12     4  partitionLeaderEpoch
        16     1  magic (2)
        17     4  crc (CRC32C of everything from attributes to the end)
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordsCount
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from partita.errors import CorruptRecordError, InvalidRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2

BASE_OFFSET_POS = 0
BATCH_LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
PRODUCER_ID_POS = 43
BASE_SEQUENCE_POS = 53

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

assert HEADER_STRUCT.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    """The decoded fixed header of one record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``pos``; raise if it is not a v2 batch."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header truncated: {len(buf) - pos} bytes, need {HEADER_SIZE}"
        )
    header = BatchHeader._make(HEADER_STRUCT.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic}, expected 2")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {header.batch_length} is below the minimum")
    return header


def read_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """The (baseOffset, batchLength) pair: enough to walk from batch to batch."""
    base_offset, batch_length = _PREFIX.unpack_from(buf, pos)
    return base_offset, batch_length


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    view = memoryview(buf)[pos + ATTRIBUTES_POS : pos + size]
    return int(crc32c.crc32c(view))


def check_crc(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    if pos + header.size > len(buf):
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} is truncated: "
            f"{len(buf) - pos} of {header.size} bytes present"
        )
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} failed its CRC32C check "
            f"(stored {header.crc:#010x}, computed {actual:#010x})"
        )


def check_producer_batch(header: BatchHeader) -> None:
    """The rules a broker applies to batches that come from a client, not a replica."""
    if header.records_count <= 0:
        raise InvalidRecordError(f"record batch has an invalid record count {header.records_count}")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"record batch's lastOffsetDelta {header.last_offset_delta} is inconsistent "
            f"with its record count {header.records_count}"
        )
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError("idempotent batch has no base sequence")


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch in ``buf``; stop at a partial tail."""
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    _INT64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    _INT32.pack_into(buf, pos + LEADER_EPOCH_POS, epoch)


def patch_base_sequence(buf: bytearray, sequence: int) -> None:
    """Give the single batch in ``buf`` a new base sequence (a producer renumbering what
    follows a batch that failed for good); the sequence is CRC-covered, so re-sum."""
    _INT32.pack_into(buf, BASE_SEQUENCE_POS, sequence)
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, len(buf)))


def stamp_log_append_time(buf: bytearray | memoryview, pos: int, size: int, now_ms: int) -> None:
    """Turn a batch into a LogAppendTime batch; this changes CRC-covered bytes, so re-sum."""
    attributes = struct.unpack_from(">h", buf, pos + ATTRIBUTES_POS)[0]
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_BIT)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_POS, now_ms)
    _UINT32.pack_into(buf, pos + CRC_POS, compute_crc(buf, pos, size))


def encode_header(header: BatchHeader) -> bytes:
    return HEADER_STRUCT.pack(*header)
