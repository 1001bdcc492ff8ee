"""Spark's Kafka row schema, and record batches turned into Arrow columns.

The schema is exactly the one of Spark's own Kafka source. Conversion is batch-oriented:
records are decoded by aiokafka's compiled codec, columns are gathered as lists and handed
to Arrow once per fetch; the constant columns (topic, partition, timestamp type) are built
from buffers without touching each row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from partita.client.consumer import decoded_batches
from partita.protocol.record_columns import Columns, decode_columns


def kafka_schema(include_headers: bool = False) -> StructType:
    """``key, value, topic, partition, offset, timestamp, timestampType[, headers]``."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


@cache
def arrow_schema(include_headers: bool) -> pa.Schema:
    # Spark compares the batches' schema with this one, nullability included.
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def _constant_string(text: str, count: int) -> pa.Array:
    data = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)]
    )


@dataclass(slots=True)
class RowBuilder:
    """Rows of one topic partition, collected fetch by fetch, emitted as Arrow.

    Without headers, batches are decoded column-wise (``record_columns``); headers need
    a look at every record, which aiokafka's compiled decoder does."""

    topic: str
    partition: int
    include_headers: bool = False
    check_crcs: bool = True
    chunks: list[Columns] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)
    rows: int = 0

    def __len__(self) -> int:
        return self.rows

    def add_record_set(self, data: bytes, start: int, end: int) -> int:
        """Add every whole batch of a fetched record set; returns the next offset to fetch."""
        if self.include_headers:
            columns, next_offset = self._decode_with_headers(data, start, end)
        else:
            columns, next_offset = decode_columns(data, start, end, self.check_crcs)
        if columns is not None:
            self.chunks.append(columns)
            self.rows += len(columns)
        return max(start, next_offset)

    def _decode_with_headers(self, data: bytes, start: int, end: int) -> tuple[Columns | None, int]:
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        offsets: list[int] = []
        timestamps: list[int] = []
        kinds: list[int] = []
        next_offset = start
        where = f"{self.topic}-{self.partition}"
        for batch in decoded_batches(data, check_crcs=self.check_crcs, where=where):
            next_offset = max(next_offset, batch.next_offset)
            if batch.is_control_batch or batch.next_offset <= start:
                continue
            records = [r for r in batch if start <= r.offset < end]
            keys.extend([r.key for r in records])
            values.extend([r.value for r in records])
            offsets.extend([r.offset for r in records])
            timestamps.extend([r.timestamp for r in records])
            kinds.extend([batch.timestamp_type] * len(records))
            self.headers.extend([list(r.headers) for r in records])
        if not offsets:
            return None, next_offset
        columns = Columns(
            keys=pa.array(keys, pa.binary()),
            values=pa.array(values, pa.binary()),
            offsets=np.array(offsets, dtype=np.int64),
            timestamps_ms=np.array(timestamps, dtype=np.int64),
            timestamp_types=np.array(kinds, dtype=np.int32),
        )
        return columns, next_offset

    def flush(self) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow record batch; the builder starts empty."""
        count = self.rows
        schema = arrow_schema(self.include_headers)
        chunks = self.chunks
        millis = np.concatenate([c.timestamps_ms for c in chunks])
        columns = [
            pa.concat_arrays([c.keys for c in chunks]),
            pa.concat_arrays([c.values for c in chunks]),
            _constant_string(self.topic, count),
            pa.array(np.full(count, self.partition, dtype=np.int32), pa.int32()),
            pa.array(np.concatenate([c.offsets for c in chunks]), pa.int64()),
            pa.array(millis * 1000, schema.field("timestamp").type),
            pa.array(np.concatenate([c.timestamp_types for c in chunks]), pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, schema.field("headers").type))
        self.chunks, self.headers, self.rows = [], [], 0
        return pa.RecordBatch.from_arrays(columns, schema=schema)
