"""Spark's Kafka row schema, and record batches turned into Arrow columns.

The schema is exactly the one of Spark's own Kafka source. Conversion is batch-oriented:
records are decoded by aiokafka's compiled codec, columns are gathered as lists and handed
to Arrow once per fetch; the constant columns (topic, partition, timestamp type) are built
from buffers without touching each row.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch
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

from partita.client.consumer import split_batches
from partita.errors import CorruptRecordError


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
    """Rows of one topic partition, collected batch by batch, emitted as Arrow."""

    topic: str
    partition: int
    include_headers: bool = False
    check_crcs: bool = True
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    # (row count so far, timestamp type) at each change, so the column is built in runs.
    timestamp_types: list[tuple[int, int]] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def add_batch(self, raw: memoryview, start: int, end: int) -> int:
        """Add the records of one v2 batch whose offsets fall in ``[start, end)``; returns
        the offset after the batch, where the next read continues."""
        batch: Any = DefaultRecordBatch(bytearray(raw))
        if self.check_crcs and not batch.validate_crc():
            raise CorruptRecordError(
                f"{self.topic}-{self.partition}: batch at offset {batch.base_offset} failed its CRC"
            )
        next_offset: int = batch.next_offset
        if batch.is_control_batch or next_offset <= start:
            return next_offset
        records = list(batch)
        if batch.base_offset < start or next_offset > end:
            records = [r for r in records if start <= r.offset < end]
        if not records:
            return next_offset
        timestamp_type: int = batch.timestamp_type
        if not self.timestamp_types or self.timestamp_types[-1][1] != timestamp_type:
            self.timestamp_types.append((len(self.offsets), timestamp_type))
        self.keys.extend([r.key for r in records])
        self.values.extend([r.value for r in records])
        self.offsets.extend([r.offset for r in records])
        self.timestamps.extend([r.timestamp for r in records])
        if self.include_headers:
            self.headers.extend([list(r.headers) for r in records])
        return next_offset

    def add_record_set(self, data: bytes, start: int, end: int) -> int:
        """Add every whole batch of a fetched record set; returns the next offset to fetch."""
        position = start
        for raw in split_batches(data):
            position = max(position, self.add_batch(raw, start, end))
        return position

    def _timestamp_type_column(self, count: int) -> pa.Array:
        column = np.empty(count, dtype=np.int32)
        bounds = [*self.timestamp_types, (count, 0)]
        for (lo, kind), (hi, _next) in itertools.pairwise(bounds):
            column[lo:hi] = kind
        return pa.array(column, pa.int32())

    def flush(self) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow record batch; the builder starts empty."""
        count = len(self.offsets)
        schema = arrow_schema(self.include_headers)
        millis = np.fromiter(self.timestamps, dtype=np.int64, count=count)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            _constant_string(self.topic, count),
            pa.array(np.full(count, self.partition, dtype=np.int32), pa.int32()),
            pa.array(np.fromiter(self.offsets, dtype=np.int64, count=count), pa.int64()),
            pa.array(millis * 1000, schema.field("timestamp").type),
            self._timestamp_type_column(count),
        ]
        if self.include_headers:
            columns.append(pa.array(self.headers, schema.field("headers").type))
        self.keys, self.values, self.offsets, self.timestamps = [], [], [], []
        self.timestamp_types, self.headers = [], []
        return pa.RecordBatch.from_arrays(columns, schema=schema)
