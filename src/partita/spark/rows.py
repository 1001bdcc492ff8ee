"""Spark's Kafka row schema, and record batches turned into Arrow columns.

The schema is exactly the one of Spark's own Kafka source. Conversion is batch-oriented:
each fetch is decoded into Arrow columns without a Python object per record, and the
constant columns (topic, partition, timestamp type) are built from buffers without
touching each row.
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


def _joined(arrays: list[pa.Array]) -> pa.Array:
    # Usually one fetch fills a batch: no need to copy its column into a new one.
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


@dataclass(slots=True)
class RowBuilder:
    """Rows of one topic partition, collected fetch by fetch (decoded column-wise by
    ``record_columns``, headers too when asked), emitted as Arrow."""

    topic: str
    partition: int
    include_headers: bool = False
    check_crcs: bool = True
    chunks: list[Columns] = field(default_factory=list)
    rows: int = 0

    def __len__(self) -> int:
        return self.rows

    def add_record_set(
        self,
        data: bytes | memoryview,
        start: int,
        end: int,
        aborted: list[tuple[int, int]] | None = None,
    ) -> int:
        """Add every whole batch of a fetched record set, but those of the ``aborted``
        transactions (read_committed); returns the next offset to fetch."""
        columns, next_offset = decode_columns(
            data,
            start,
            end,
            self.check_crcs,
            with_headers=self.include_headers,
            aborted=aborted,
        )
        if columns is not None:
            self.chunks.append(columns)
            self.rows += len(columns)
        return max(start, next_offset)

    def flush(self) -> pa.RecordBatch:
        """The rows gathered so far as one Arrow record batch; the builder starts empty."""
        count = self.rows
        schema = arrow_schema(self.include_headers)
        chunks = self.chunks
        millis = np.concatenate([c.timestamps_ms for c in chunks])
        columns = [
            _joined([c.keys for c in chunks]),
            _joined([c.values for c in chunks]),
            _constant_string(self.topic, count),
            pa.array(np.full(count, self.partition, dtype=np.int32), pa.int32()),
            pa.array(np.concatenate([c.offsets for c in chunks]), pa.int64()),
            pa.array(millis * 1000, schema.field("timestamp").type),
            pa.array(np.concatenate([c.timestamp_types for c in chunks]), pa.int32()),
        ]
        if self.include_headers:
            columns.append(_joined([c.headers for c in chunks]))
        self.chunks, self.rows = [], 0
        return pa.RecordBatch.from_arrays(columns, schema=schema)
