"""Encoding many records at once into v2 record sets, for bulk writers.

A bulk writer (the Spark sink) has columns, not records: values, maybe keys, and headers
that are the same for a whole task. Encoding them through a generic builder costs ~2 µs a
record; here the constant parts are encoded once, varints come from a lookup table and each
record is a handful of byte strings joined at the end.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partita.protocol.compression import Compression, compress
from partita.protocol.record_batch import (
    CRC_POS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    compute_crc,
    encode_header,
)

_TABLE_SIZE = 1 << 14


def _encode_varint(n: int) -> bytes:
    v = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_VARINTS = [_encode_varint(n) for n in range(_TABLE_SIZE)]
_NULL = _encode_varint(-1)


def varint(n: int) -> bytes:
    """Kafka's zigzag varint; a table lookup for the small lengths and deltas records use."""
    return _VARINTS[n] if 0 <= n < _TABLE_SIZE else _encode_varint(n)


def encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """Header entries without their count, to be shared by many records."""
    out = bytearray()
    for key, value in headers:
        name = key.encode()
        out += varint(len(name)) + name
        out += _NULL if value is None else varint(len(value)) + value
    return bytes(out)


@dataclass(frozen=True, slots=True)
class RecordSet:
    """Encoded records (offset deltas from 0) ready to become one batch."""

    body: bytes
    count: int
    first_row: int


def _binary_array(items: list[bytes]) -> pa.Array:
    """A binary column of ``items``, built from buffers: ``pa.array`` on a list probes for
    pandas, an import of most of a second that every CLI command would pay at start-up."""
    offsets = np.zeros(len(items) + 1, dtype=np.int32)
    np.cumsum([len(item) for item in items], out=offsets[1:])
    data = pa.py_buffer(b"".join(items))
    return pa.Array.from_buffers(pa.binary(), len(items), [None, pa.py_buffer(offsets), data])


_TABLE = _binary_array([*_VARINTS, _NULL])  # the last entry encodes -1 (null)
_TABLE_LENGTHS = np.array([*(len(v) for v in _VARINTS), len(_NULL)], dtype=np.int64)


def _varint_column(numbers: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Varints of ``numbers`` (-1 for null) as a binary column, and their sizes."""
    index = np.where(numbers < 0, _TABLE_SIZE, numbers)
    if (index > _TABLE_SIZE).any():  # a rare big value: outside the lookup table
        encoded = pa.array([varint(int(n)) for n in numbers], pa.binary())
        return encoded, np.array([len(v) for v in encoded.to_pylist()], dtype=np.int64)
    return _TABLE.take(pa.array(index)), _TABLE_LENGTHS[index]


# Record prefixes after the length: attributes 0, timestamp delta 0, then the offset delta.
_DELTA_PREFIXES = _binary_array([b"\x00\x00" + v for v in _VARINTS])
_DELTA_PREFIX_LENGTHS = np.array([2 + len(v) for v in _VARINTS], dtype=np.int64)
# A null key followed by the value's length varint (the last entry: a null value too).
_KEYLESS_VALUE_LENGTHS = _binary_array([_NULL + v for v in [*_VARINTS, _NULL]])


def _delta_prefixes(count: int) -> tuple[pa.Array, np.ndarray]:
    if count > _TABLE_SIZE:
        encoded = pa.array([b"\x00\x00" + varint(i) for i in range(count)], pa.binary())
        return encoded, np.array([2 + len(varint(i)) for i in range(count)], dtype=np.int64)
    return _DELTA_PREFIXES.slice(0, count), _DELTA_PREFIX_LENGTHS[:count]


def _no_nulls(column: pa.Array) -> pa.Array:
    # A null joins as nothing: its length varint already says -1.
    return column.fill_null(b"") if column.null_count else column


def _lengths(column: pa.Array) -> np.ndarray:
    return np.asarray(pc.binary_length(column).fill_null(-1), dtype=np.int64)


def encode_record_sets(
    values: pa.Array,
    keys: pa.Array | None,
    rows: np.ndarray | None = None,
    *,
    shared_headers: Sequence[tuple[str, bytes | None]] = (),
    row_header: str | None = None,
    row_base: int = 0,
    max_bytes: int = 1 << 20,
) -> list[RecordSet]:
    """Encode the binary columns ``values`` and ``keys`` (the rows at ``rows``, or all) as
    record sets of at most ``max_bytes`` each (one record always fits). Every record gets
    ``shared_headers`` and, when ``row_header`` is set, a header of that name holding
    ``row_base`` + the row index in decimal, which names the record across retries.

    No Python runs per record: lengths and varints are numpy and table lookups, and the
    records are concatenated by Arrow's element-wise binary join, whose data buffer is
    the record set."""
    if rows is None:
        rows = np.arange(len(values), dtype=np.int64)
        picked_values, picked_keys = values, keys
    else:
        picked_values = values.take(pa.array(rows))
        picked_keys = keys.take(pa.array(rows)) if keys is not None else None
    if len(rows) == 0:
        return []
    if picked_keys is not None and picked_keys.null_count == len(picked_keys):
        picked_keys = None
    value_lengths = _lengths(picked_values)
    # Between the prefix and the value: the key's length, the key, the value's length.
    middle: list[pa.Array]
    if picked_keys is None:
        index = np.where(value_lengths < 0, _TABLE_SIZE, value_lengths)
        if (index > _TABLE_SIZE).any():
            keyless, keyless_sizes = _varint_column(value_lengths)
            middle = [pa.array([_NULL] * len(rows), pa.binary()), keyless]
            middle_sizes = 1 + keyless_sizes
        else:
            middle = [_KEYLESS_VALUE_LENGTHS.take(pa.array(index))]
            middle_sizes = 1 + _TABLE_LENGTHS[index]
    else:
        key_lengths = _lengths(picked_keys)
        key_part, key_part_sizes = _varint_column(key_lengths)
        value_part, value_part_sizes = _varint_column(value_lengths)
        middle = [key_part, _no_nulls(picked_keys), value_part]
        middle_sizes = key_part_sizes + np.maximum(key_lengths, 0) + value_part_sizes

    header_count = len(shared_headers) + (row_header is not None)
    tail = varint(header_count) + encode_headers(shared_headers)
    pieces_after_value: list[pa.Array | pa.Scalar] = []
    row_sizes = np.zeros(len(rows), dtype=np.int64)
    if row_header is not None:
        name = row_header.encode()
        tail += varint(len(name)) + name
        numbers = pc.cast(pa.array(rows + row_base), pa.string()).cast(pa.binary())
        number_lengths, number_sizes = _varint_column(_lengths(numbers))
        pieces_after_value = [number_lengths, numbers]
        row_sizes = number_sizes + _lengths(numbers)
    rest = middle_sizes + np.maximum(value_lengths, 0) + len(tail) + row_sizes
    # Cut greedily, leaving room for each record's offset-delta and length varints (three
    # bytes each cover a million records of up to a megabyte).
    cumulative = np.cumsum(rest + 6)
    sets: list[RecordSet] = []
    start = 0
    while start < len(rows):
        taken = cumulative[start - 1] if start else 0
        stop = int(np.searchsorted(cumulative, taken + max_bytes, side="right"))
        stop = max(stop, start + 1)
        count = stop - start
        prefixes, prefix_sizes = _delta_prefixes(count)
        lengths, _sizes = _varint_column(rest[start:stop] + prefix_sizes)
        joined = pc.binary_join_element_wise(
            lengths,
            prefixes,
            *(piece.slice(start, count) for piece in middle),
            _no_nulls(picked_values.slice(start, count)),
            pa.scalar(tail, pa.binary()),
            *(piece.slice(start, count) for piece in pieces_after_value),
            pa.scalar(b"", pa.binary()),
        )
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[
            joined.offset : joined.offset + count + 1
        ]
        body = joined.buffers()[2][int(offsets[0]) : int(offsets[-1])].to_pybytes()
        sets.append(RecordSet(body, count, int(rows[start])))
        start = stop
    return sets


def build_producer_batch(
    records: RecordSet,
    *,
    timestamp: int,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """One v2 batch around an encoded record set, as a producer sends it."""
    payload = compress(compression, records.body)
    size = HEADER_SIZE + len(payload)
    header = BatchHeader(
        base_offset=0,
        batch_length=size - LOG_OVERHEAD,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=MAGIC_V2,
        crc=0,
        attributes=int(compression),
        last_offset_delta=records.count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=records.count,
    )
    batch = bytearray(encode_header(header))
    batch += payload
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch, 0, size))
    return bytes(batch)
