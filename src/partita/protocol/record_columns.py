"""Fetched record batches decoded straight into columns, without a Python object per record.

Only the record boundaries are found in Python (one varint per record, usually one or two
bytes); every other field is decoded for all records at once with numpy, and keys and values
are cut out of the fetched bytes by Arrow's ``take`` over a binary array whose offsets
alternate between "a value" and "the bytes up to the next value" — zero copies until the
final compact column. Headers are skipped using the record length, which is why this path
serves reads that need no headers (Spark without ``includeHeaders``, and consumers when
no record has any: ``header_counts`` tells); otherwise the per-record decoder is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression, decompress
from partita.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    check_crc,
    read_header,
)


@dataclass(slots=True)
class Columns:
    """Decoded records in offset order."""

    keys: pa.Array
    values: pa.Array
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    timestamp_types: np.ndarray
    header_counts: np.ndarray | None = None  # per record, where the decoder looked

    def __len__(self) -> int:
        return len(self.offsets)


def _find_record_starts(
    joined: bytes, pos: int, end: int, count: int, starts: list[int], first_index: int
) -> None:
    """Fill ``starts[first_index:first_index+count]`` with where each record of the batch
    body ``joined[pos:end]`` begins (its attributes byte). The hot loop of the read path:
    lengths below 64 take one varint byte and below 8192 two, which covers most records."""
    try:
        for i in range(first_index, first_index + count):
            first = joined[pos]
            if first < 0x80:
                pos += 1
                starts[i] = pos
                pos += first >> 1
            elif joined[pos + 1] < 0x80:
                pos += 2
                starts[i] = pos
                pos += ((first & 0x7F) | (joined[pos - 1] << 7)) >> 1
            else:
                raw, shift = 0, 0
                while True:
                    byte = joined[pos]
                    pos += 1
                    raw |= (byte & 0x7F) << shift
                    if byte < 0x80:
                        break
                    shift += 7
                    if shift > 63:
                        raise CorruptRecordError("a record length varint is too long")
                starts[i] = pos
                pos += raw >> 1
    except IndexError:
        raise CorruptRecordError("a record runs past the end of its batch") from None
    if pos != end:
        raise CorruptRecordError("a batch's records do not fill it exactly")


def _varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at every position in ``pos``: (values, positions after them)."""
    raw = np.zeros(len(pos), dtype=np.uint64)
    at = pos.copy()
    going = np.ones(len(pos), dtype=bool)
    last = len(buf) - 1
    for shift in range(0, 70, 7):
        byte = buf[np.minimum(at, last)].astype(np.uint64)
        raw |= np.where(going, (byte & 0x7F) << np.uint64(shift), np.uint64(0))
        at += going
        going &= (byte & 0x80) != 0
        if not going.any():
            break
    else:
        raise CorruptRecordError("a varint is longer than 10 bytes")
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, at


def _cut(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Binary column of ``data[start:start+length]`` (null where length is -1)."""
    count = len(starts)
    present = lengths >= 0
    sizes = np.where(present, lengths, 0)
    ends = starts + sizes
    bounds = np.empty(2 * count + 1, dtype=np.int64)
    bounds[0:-1:2] = starts
    bounds[1:-1:2] = ends
    bounds[-1] = ends[-1] if count else 0
    # Every other element of this view is a wanted slice; the ones between are skipped.
    view = pa.Array.from_buffers(pa.large_binary(), 2 * count, [None, pa.py_buffer(bounds), data])
    every_other = np.arange(0, 2 * count, 2, dtype=np.int64)
    # From a buffer, not pa.array(): that probes for pandas, a costly first import.
    indices = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(every_other)])
    picked = pc.take(view, indices)
    compact = picked.cast(pa.binary())
    if present.all():
        return compact
    validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    buffers = compact.buffers()
    return pa.Array.from_buffers(pa.binary(), count, [validity, buffers[1], buffers[2]])


def decode_columns(
    data: bytes, start: int, end: int, check_crcs: bool = True
) -> tuple[Columns | None, int]:
    """Records of the whole batches in ``data`` whose offsets are in ``[start, end)``, and
    the offset where the next fetch continues."""
    # Each batch's records as (bytes, start, end): uncompressed ones stay where they are
    # in ``data``; decompressed ones are new bytes.
    bodies: list[tuple[bytes, int, int]] = []
    counts: list[int] = []
    base_offsets: list[int] = []
    base_times: list[int] = []
    kinds: list[int] = []
    next_offset = start
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        size = LOG_OVERHEAD + header.batch_length
        if header.batch_length <= 0 or pos + size > len(view):
            break  # a partial batch at the end of a fetch: the next fetch gets it whole
        if check_crcs:
            check_crc(view, pos, header)
        batch_end = header.base_offset + header.last_offset_delta + 1
        if not header.attributes & CONTROL_BIT and batch_end > start and header.records_count:
            codec = Compression(header.attributes & COMPRESSION_MASK)
            if codec is Compression.NONE:
                bodies.append((data, pos + HEADER_SIZE, pos + size))
            else:
                body = decompress(codec, view[pos + HEADER_SIZE : pos + size])
                bodies.append((body, 0, len(body)))
            counts.append(header.records_count)
            base_offsets.append(header.base_offset)
            log_append = bool(header.attributes & TIMESTAMP_TYPE_BIT)
            base_times.append(header.max_timestamp if log_append else header.base_timestamp)
            kinds.append(1 if log_append else 0)
        next_offset = max(next_offset, batch_end)
        pos += size
    if not bodies:
        return None, next_offset

    if all(body is data for body, _, _ in bodies):
        joined = data  # nothing compressed: positions are in the fetched bytes themselves
        ranges = [(begin, stop) for _, begin, stop in bodies]
    else:
        joined = b"".join(body[begin:stop] for body, begin, stop in bodies)
        ends = np.cumsum([stop - begin for _, begin, stop in bodies]).tolist()
        ranges = list(zip([0, *ends[:-1]], ends, strict=True))
    starts_list = [0] * sum(counts)
    index = 0
    for (begin, stop), count in zip(ranges, counts, strict=True):
        _find_record_starts(joined, begin, stop, count, starts_list, index)
        index += count
    buf = np.frombuffer(joined, dtype=np.uint8)
    starts = np.array(starts_list, dtype=np.int64)
    counts_array = np.array(counts, dtype=np.int64)
    # Fields in order: attributes (1 byte), timestamp delta, offset delta, key, value.
    timestamp_deltas, after = _varints(buf, starts + 1)
    offset_deltas, after = _varints(buf, after)
    key_lengths, key_starts = _varints(buf, after)
    value_lengths, value_starts = _varints(buf, key_starts + np.maximum(key_lengths, 0))
    header_counts, _after = _varints(buf, value_starts + np.maximum(value_lengths, 0))
    offsets = np.repeat(np.array(base_offsets, dtype=np.int64), counts_array) + offset_deltas
    kinds_per_record = np.repeat(np.array(kinds, dtype=np.int32), counts_array)
    base_per_record = np.repeat(np.array(base_times, dtype=np.int64), counts_array)
    timestamps = np.where(
        kinds_per_record == 1, base_per_record, base_per_record + timestamp_deltas
    )

    wanted = (offsets >= start) & (offsets < end)
    if not wanted.all():
        key_starts, key_lengths = key_starts[wanted], key_lengths[wanted]
        value_starts, value_lengths = value_starts[wanted], value_lengths[wanted]
        offsets, timestamps = offsets[wanted], timestamps[wanted]
        kinds_per_record = kinds_per_record[wanted]
        header_counts = header_counts[wanted]
        if not len(offsets):
            return None, next_offset
    buffer = pa.py_buffer(joined)
    columns = Columns(
        keys=_cut(buffer, key_starts, key_lengths),
        values=_cut(buffer, value_starts, value_lengths),
        offsets=offsets,
        timestamps_ms=timestamps,
        timestamp_types=kinds_per_record,
        header_counts=header_counts,
    )
    return columns, next_offset


def end_of_whole_batches(data: bytes, position: int) -> int:
    """The offset after the last complete batch of fetched bytes, from the batch headers
    alone: where the next fetch starts, known before anything is decoded."""
    view = memoryview(data)
    end = position
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        size = LOG_OVERHEAD + header.batch_length
        if header.batch_length <= 0 or pos + size > len(view):
            break
        end = max(end, header.base_offset + header.last_offset_delta + 1)
        pos += size
    return end
