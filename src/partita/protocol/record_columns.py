"""Fetched record batches decoded straight into columns, without a Python object per record.

A compiled scan (``record_scan``) finds where every field of every record is; offsets and
timestamps then follow for all records at once with numpy, and keys, values and headers
are cut out of the fetched bytes by Arrow's ``take`` over a binary array whose offsets
alternate between "a value" and "the bytes up to the next value" — one copy, into the
final compact column. Arrow's take beats a compiled copy loop here because it allocates
from Arrow's pool, whose pages are already mapped; fresh pages cost more than the copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from partita.protocol.aborted_batches import aborted_filter
from partita.protocol.compression import Compression, decompress
from partita.protocol.fetched_batches import end_of_whole_batches, whole_batches
from partita.protocol.record_batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    check_crc,
)

if TYPE_CHECKING:
    from partita.protocol.record_scan import RecordFields

# end_of_whole_batches lives in fetched_batches (no numpy or Arrow to import); callers
# that decode columns find it here too.
__all__ = ["HEADER_TYPE", "Columns", "decode_columns", "end_of_whole_batches"]


@dataclass(slots=True)
class Columns:
    """Decoded records in offset order."""

    keys: pa.Array
    values: pa.Array
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    timestamp_types: np.ndarray
    header_counts: np.ndarray
    # list<struct<key: string, value: binary>>, one list per record; when asked for.
    headers: pa.ListArray | None = None

    def __len__(self) -> int:
        return len(self.offsets)


def _cut(data: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Binary column of ``data[start:start+length]`` (null where length is -1)."""
    count = len(starts)
    present = lengths >= 0
    if count and not present.any():
        return pa.nulls(count, pa.binary())  # keyless records: nothing to cut
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
    data: bytes | memoryview,
    start: int,
    end: int,
    check_crcs: bool = True,
    *,
    with_headers: bool = False,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> tuple[Columns | None, int]:
    """Records of the whole batches in ``data`` whose offsets are in ``[start, end)``, and
    the offset where the next fetch continues; ``with_headers`` adds the headers column.
    The batches of the ``aborted`` transactions a read_committed fetch listed are left
    out (and still read past)."""
    # Each batch's records as (bytes, start, end): uncompressed ones stay where they are
    # in ``data``; decompressed ones are new bytes.
    bodies: list[tuple[bytes | memoryview, int, int]] = []
    counts: list[int] = []
    base_offsets: list[int] = []
    base_times: list[int] = []
    kinds: list[int] = []
    next_offset = start
    view = memoryview(data)
    dropping = aborted_filter(aborted)
    for pos, header in whole_batches(view):
        size = LOG_OVERHEAD + header.batch_length
        if check_crcs:
            check_crc(view, pos, header)
        batch_end = header.base_offset + header.last_offset_delta + 1
        dropped = dropping is not None and dropping.drops(view, pos, header)
        readable = batch_end > start and header.records_count and not dropped
        if readable and not header.attributes & CONTROL_BIT:
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
    if not bodies:
        return None, next_offset

    if all(body is data for body, _, _ in bodies):
        joined = data  # nothing compressed: positions are in the fetched bytes themselves
        ranges = [(begin, stop) for _, begin, stop in bodies]
    else:
        joined = b"".join(body[begin:stop] for body, begin, stop in bodies)
        ends = np.cumsum([stop - begin for _, begin, stop in bodies]).tolist()
        ranges = list(zip([0, *ends[:-1]], ends, strict=True))
    buf = np.frombuffer(joined, dtype=np.uint8)
    counts_array = np.array(counts, dtype=np.int64)
    # Imported here, not above: numba and the compiled scans take 0.2-0.4 s to load, and
    # processes that never decode (Spark's planning workers, admin commands) import this
    # module for its batch-header helpers.
    from partita.protocol.record_scan import scan_records  # noqa: PLC0415

    fields = scan_records(buf, np.array(ranges, dtype=np.int64).reshape(-1, 2), counts_array)
    offsets = np.repeat(np.array(base_offsets, dtype=np.int64), counts_array)
    offsets += fields.offset_deltas
    kinds_per_record = np.repeat(np.array(kinds, dtype=np.int32), counts_array)
    base_per_record = np.repeat(np.array(base_times, dtype=np.int64), counts_array)
    timestamps = np.where(
        kinds_per_record == 1, base_per_record, base_per_record + fields.timestamp_deltas
    )
    wanted = (offsets >= start) & (offsets < end)
    if not wanted.all():
        if not wanted.any():
            return None, next_offset
        fields = fields.where(wanted)
        offsets, timestamps = offsets[wanted], timestamps[wanted]
        kinds_per_record = kinds_per_record[wanted]
    buffer = pa.py_buffer(joined)
    columns = Columns(
        keys=_cut(buffer, fields.key_starts, fields.key_lengths),
        values=_cut(buffer, fields.value_starts, fields.value_lengths),
        offsets=offsets,
        timestamps_ms=timestamps,
        timestamp_types=kinds_per_record,
        header_counts=fields.header_counts,
    )
    if with_headers:
        columns.headers = _headers_column(buf, buffer, fields)
    return columns, next_offset


# Spark's Arrow type for its Kafka source's headers column, nullability included.
HEADER_TYPE = pa.list_(
    pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
)


def _headers_column(buf: np.ndarray, buffer: pa.Buffer, records: RecordFields) -> pa.ListArray:
    from partita.protocol.record_scan import scan_headers  # noqa: PLC0415

    counts = records.header_counts
    found = scan_headers(buf, records.header_starts, records.ends, counts)
    names = _cut(buffer, found.name_starts, found.name_lengths)
    try:
        names = names.cast(pa.string())
    except pa.ArrowInvalid:
        # Not UTF-8: Java's String decoding replaces what it cannot read; so do we.
        texts = [name.decode("utf-8", "replace") for name in names.to_pylist()]
        names = pa.array(texts, pa.string())
    values = _cut(buffer, found.value_starts, found.value_lengths)
    struct_type = HEADER_TYPE.value_type
    entries = pa.StructArray.from_arrays([names, values], fields=list(struct_type))
    bounds = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=bounds[1:])
    offsets = pa.Array.from_buffers(pa.int32(), len(bounds), [None, pa.py_buffer(bounds)])
    return pa.ListArray.from_arrays(offsets, entries, type=HEADER_TYPE)
