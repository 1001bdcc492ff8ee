"""Fetched record batches made into ``ConsumerRecord``s, with aiokafka's compiled record
reader (a C extension; aiokafka is a dependency already, for the producer's batch
builder), batch by batch.

It is ready as soon as it is imported (~40 ms) and costs about 0.5 µs a record. The
column decoder (``protocol.record_columns`` over numba's compiled scan) is what the Spark
connector reads with, because it makes Arrow columns without a Python object per record;
a consumer, which must hand out one object per record, loses with it: loading numba
costs 0.5 s of CPU, its 100,000 objects make every full garbage collection slower, and
values are copied twice (into Arrow, then into bytes). Measured with 1,000,000 records of
100 B, one process each: 0.74-0.80 s of CPU with this reader alone, 1.44-1.50 with numba
loaded in a thread and unused, 1.51-1.56 using it for every fetch of 4,000 records or
more (600,000 records of 1,000 B: 0.85-0.90 against 1.74-1.81).

Records below the position a fetch asked for (a batch may start before it) are dropped,
control batches (transaction markers) yield nothing, and the CRC is checked first when
asked. A malformed record is refused with CorruptRecordError; like Java's
``DefaultRecord.readFrom``, the reader reads a key or value length below -1 as null,
where the column scan refuses it. A batch the reader cannot read for another reason (a
header name that is not UTF-8) is decoded by ``protocol.records``, which replaces invalid
UTF-8 as Java does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatch

from partita.errors import CorruptRecordError
from partita.protocol.aborted_batches import aborted_filter
from partita.protocol.fetched_batches import whole_batches
from partita.protocol.record_batch import CONTROL_BIT, TIMESTAMP_TYPE_BIT, check_crc
from partita.protocol.records import decode_records

TopicPartition = tuple[str, int]
Header = tuple[str, bytes | None]


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]


_NO_HEADERS: tuple[Header, ...] = ()  # shared: immutable, and not one list per record
_new = tuple.__new__


def read_batches(
    tp: TopicPartition,
    data: bytes | memoryview,
    start: int,
    check_crcs: bool,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> list[ConsumerRecord]:
    """The records at offsets ``start`` and after, in the whole batches of ``data``, with
    aiokafka's compiled reader; those of the ``aborted`` transactions a read_committed
    fetch listed are left out."""
    topic, partition = tp
    view = memoryview(data)
    out: list[ConsumerRecord] = []
    dropping = aborted_filter(aborted)
    for pos, header in whole_batches(view):
        if dropping is not None and dropping.drops(view, pos, header):
            continue
        if check_crcs:
            check_crc(view, pos, header)
        last = header.base_offset + header.last_offset_delta
        if header.attributes & CONTROL_BIT or last < start or not header.records_count:
            continue
        batch = view[pos : pos + header.size]
        try:
            records = [
                _new(
                    ConsumerRecord,
                    (
                        topic,
                        partition,
                        r.offset,
                        r.timestamp,
                        r.timestamp_type,
                        r.key,
                        r.value,
                        r.headers or _NO_HEADERS,
                    ),
                )
                for r in DefaultRecordBatch(batch)
            ]
        except CorruptRecordException as exc:
            raise CorruptRecordError(
                f"{topic}-{partition}, batch at offset {header.base_offset}: {exc}"
            ) from None
        except Exception:  # a header name that is not UTF-8, or the like: the exact path
            records = _decode_exactly(tp, batch)
        if header.base_offset < start:
            records = [r for r in records if r.offset >= start]
        out += records
    return out


def _decode_exactly(tp: TopicPartition, batch: memoryview) -> list[ConsumerRecord]:
    header, records = decode_records(batch)
    kind = 1 if header.attributes & TIMESTAMP_TYPE_BIT else 0
    return [
        ConsumerRecord(
            tp[0], tp[1], r.offset, r.timestamp, kind, r.key, r.value, r.headers or _NO_HEADERS
        )
        for r in records
    ]
