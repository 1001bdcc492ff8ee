"""Finding every field of every record in batch bodies: the read path's one per-record loop.

A v2 record is a chain of varints: where a record starts depends on the length of the one
before it, so the walk cannot be vectorised. It is compiled instead (numba, cached on disk
beside this file): 9 ns a record (100 B values, four headers jumped over) and 8 ns a
header when headers are decoded, against 0.5 µs a record for the same loop in CPython;
see ``_short_varint`` for what these figures depend on. The scan reports positions
only; cutting keys, values and headers out of the bytes is left to Arrow in
``record_columns``.

Records are checked as Kafka's ``DefaultRecord.readFrom`` checks them: fields must end
exactly where the record's length says, and the records must fill their batch exactly.
A record's headers are walked, and so checked, only when they are decoded: a reader that
does not ask for headers jumps over them by the record's length (about half the scan's
time for records with four headers).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numba
import numpy as np

from partita.errors import CorruptRecordError

_OK = 0
_PAST_END = 1
_NOT_FILLED = 2
_LONG_VARINT = 3
_BAD_SIZE = 4
_WRONG_LENGTH = 5
_SLOW = 6  # internal: not a one- or two-byte varint inside its bounds; take ``_varint``

_PROBLEMS = {
    _PAST_END: "a record runs past the end of its batch",
    _NOT_FILLED: "a batch's records do not fill it exactly",
    _LONG_VARINT: "a varint is longer than 10 bytes",
    _BAD_SIZE: "a record, key, value or header has a negative size",
    _WRONG_LENGTH: "a record's fields do not end where its length says",
}


@numba.njit(cache=True, nogil=True, inline="always")
def _short_varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """A one- or two-byte varint (lengths under 8 KiB, small deltas: nearly all of them)
    as ``_varint`` returns it, or status ``_SLOW`` for ``_varint`` to read.

    Why the split, and why callers write the fallback out rather than wrapping it: with
    a loop inlined into the scan, or a call behind a helper, LLVM gives up on keeping the
    scan's loop in registers, and a record took 63-112 ns; with the rare path spelled
    out at each call site, 8. Reads are clamped to the buffer and checked against
    ``end`` afterwards, which is also what keeps this fast (a read behind a bounds test
    cost the same 63 ns)."""
    last = len(buf) - 1
    first = int(buf[min(pos, last)])
    if first < 0x80 and pos < end:
        return (first >> 1) ^ -(first & 1), pos + 1, _OK
    second = int(buf[min(pos + 1, last)])
    if second < 0x80 and pos + 1 < end:
        raw = (first & 0x7F) | (second << 7)
        return (raw >> 1) ^ -(raw & 1), pos + 2, _OK
    return 0, pos, _SLOW


@numba.njit(cache=True, nogil=True, inline="never")
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """(zigzag-decoded value, position after it, status) of the varint at ``pos``."""
    raw = 0
    shift = 0
    while True:
        if pos >= end:
            return 0, pos, _PAST_END
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            return 0, pos, _LONG_VARINT
    # A logical shift: ``raw`` is signed here, and a 10-byte varint sets its top bit.
    return ((raw >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(raw & 1), pos, _OK


@numba.njit(cache=True, nogil=True)
def _scan_records(
    buf: np.ndarray,
    bodies: np.ndarray,
    counts: np.ndarray,
    fields: np.ndarray,
) -> tuple[int, int]:
    """Fill ``fields`` (a row per field of ``RecordFields``, a column per record);
    (status, index of the record where it failed)."""
    record = 0
    for batch in range(len(counts)):
        pos = bodies[batch, 0]
        end = bodies[batch, 1]
        for _ in range(counts[batch]):
            # Each field: the short path, then the general one if needed (see
            # _short_varint for why this is written out six times).
            size, after, status = _short_varint(buf, pos, end)
            if status != _OK:
                size, after, status = _varint(buf, pos, end)
                if status != _OK:
                    return status, record
            if size < 1:
                return _BAD_SIZE, record
            record_end = after + size
            if record_end > end:
                return _PAST_END, record
            pos = after + 1  # attributes: unused in v2
            timestamp_delta, after, status = _short_varint(buf, pos, record_end)
            if status != _OK:
                timestamp_delta, after, status = _varint(buf, pos, record_end)
                if status != _OK:
                    return status, record
            pos = after
            offset_delta, after, status = _short_varint(buf, pos, record_end)
            if status != _OK:
                offset_delta, after, status = _varint(buf, pos, record_end)
                if status != _OK:
                    return status, record
            pos = after
            key_length, after, status = _short_varint(buf, pos, record_end)
            if status != _OK:
                key_length, after, status = _varint(buf, pos, record_end)
                if status != _OK:
                    return status, record
            if key_length < -1:
                return _BAD_SIZE, record
            key_start = after
            pos = after + max(key_length, 0)
            value_length, after, status = _short_varint(buf, pos, record_end)
            if status != _OK:
                value_length, after, status = _varint(buf, pos, record_end)
                if status != _OK:
                    return status, record
            if value_length < -1:
                return _BAD_SIZE, record
            value_start = after
            pos = after + max(value_length, 0)
            header_count, after, status = _short_varint(buf, pos, record_end)
            if status != _OK:
                header_count, after, status = _varint(buf, pos, record_end)
                if status != _OK:
                    return status, record
            if header_count < 0:
                return _BAD_SIZE, record
            headers_start = after
            if header_count == 0 and after != record_end:
                return _WRONG_LENGTH, record
            pos = record_end  # headers are walked (and checked) when they are decoded
            fields[0, record] = timestamp_delta
            fields[1, record] = offset_delta
            fields[2, record] = key_start
            fields[3, record] = key_length
            fields[4, record] = value_start
            fields[5, record] = value_length
            fields[6, record] = headers_start
            fields[7, record] = header_count
            fields[8, record] = record_end
            record += 1
        if pos != end:
            return _NOT_FILLED, record
    return _OK, record


@numba.njit(cache=True, nogil=True)
def _scan_headers(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray, out: np.ndarray
) -> tuple[int, int]:
    """Fill ``out`` with (name start, name length, value start, value length) of each of
    the ``counts[i]`` headers in ``buf[starts[i]:ends[i]]``; (status, index of the record
    where it failed)."""
    row = 0
    for record in range(len(starts)):
        pos = starts[record]
        end = ends[record]
        for _ in range(counts[record]):
            # As in _scan_records: the short path, the general one spelled out after it.
            name_length, after, status = _short_varint(buf, pos, end)
            if status != _OK:
                name_length, after, status = _varint(buf, pos, end)
                if status != _OK:
                    return status, record
            if name_length < 0:
                return _BAD_SIZE, record
            out[0, row] = after
            out[1, row] = name_length
            pos = after + name_length
            value_length, after, status = _short_varint(buf, pos, end)
            if status != _OK:
                value_length, after, status = _varint(buf, pos, end)
                if status != _OK:
                    return status, record
            if value_length < -1:
                return _BAD_SIZE, record
            out[2, row] = after
            out[3, row] = value_length
            pos = after + max(value_length, 0)
            row += 1
        if pos != end:
            return _WRONG_LENGTH, record
    return _OK, len(starts)


_ONE_BYTE = np.zeros(1, dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class RecordFields:
    """Where each record's fields are, one entry per record in batch order; a length of
    -1 is a null key or value."""

    timestamp_deltas: np.ndarray
    offset_deltas: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    header_starts: np.ndarray  # where each record's first header entry begins
    header_counts: np.ndarray
    ends: np.ndarray  # where each record ends

    def where(self, mask: np.ndarray) -> RecordFields:
        """The fields of the records ``mask`` selects."""
        return RecordFields(*(getattr(self, field.name)[mask] for field in fields(self)))


@dataclass(frozen=True, slots=True)
class HeaderFields:
    """Where each header's name and value are, records' headers one after another."""

    name_starts: np.ndarray
    name_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray


def scan_records(buf: np.ndarray, bodies: np.ndarray, counts: np.ndarray) -> RecordFields:
    """Fields of the ``counts[i]`` records in each batch body ``buf[bodies[i,0]:bodies[i,1]]``.

    Raises CorruptRecordError naming the record when one is malformed."""
    if not len(buf):
        buf = _ONE_BYTE  # _short_varint clamps its reads to the buffer: it must have a byte
    table = np.empty((9, int(counts.sum())), dtype=np.int64)
    status, record = _scan_records(buf, bodies, counts, table)
    if status != _OK:
        raise CorruptRecordError(f"record {record} of the fetch: {_PROBLEMS[status]}")
    return RecordFields(*table)


def scan_headers(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray
) -> HeaderFields:
    """Fields of the ``counts[i]`` headers in ``buf[starts[i]:ends[i]]`` (from
    ``RecordFields``). Raises CorruptRecordError when a record's headers are malformed."""
    if not len(buf):
        buf = _ONE_BYTE
    headers = np.empty((4, int(counts.sum())), dtype=np.int64)
    status, record = _scan_headers(buf, starts, ends, counts, headers)
    if status != _OK:
        raise CorruptRecordError(f"record {record} of the fetch: {_PROBLEMS[status]}")
    return HeaderFields(*headers)


def _load_compiled_code() -> None:
    """Have the compiled scans ready before the first fetch: numba loads them from its
    cache beside this file (0.2-0.4 s), or compiles them on a first run (about 2 s).
    The types are those of a real fetch: read-only bytes, int64 positions."""
    data = np.frombuffer(b"", dtype=np.uint8)
    positions = np.empty(0, dtype=np.int64)
    _scan_records(data, np.empty((0, 2), dtype=np.int64), positions, np.empty((9, 0), np.int64))
    _scan_headers(data, positions, positions, positions, np.empty((4, 0), dtype=np.int64))


_load_compiled_code()
