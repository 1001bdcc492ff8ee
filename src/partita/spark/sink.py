"""Writing a DataFrame to topics: Spark's Kafka sink semantics over partita's producer.

Columns: ``value`` (required), ``key``, ``topic`` (or the ``topic`` option, which wins),
``partition``, ``headers``; anything else is ignored, as in Spark's sink. Without a
``partition`` the producer's partitioner decides (murmur2 on the key, sticky when keyless).

Delivery is at-least-once, like Spark's Kafka sink: a retried task writes its rows again.
Every record therefore carries where it came from, so a consumer can drop the duplicates:

- ``spark.batch.id``: the streaming micro-batch id, or one id per batch write job;
- ``spark.task.id``: the Spark partition the row was written from;
- ``spark.task.attempt``: which attempt of that task wrote it;
- ``spark.row``: the row's position in the task's input.

``(spark.batch.id, spark.task.id, spark.row)`` names a row; attempts of the same task see
the same rows in the same order, so a duplicate has the same triple.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from partita.client.murmur2 import partition_for_key
from partita.client.partitioners import DefaultPartitioner
from partita.client.producer import AsyncProducer, RecordMetadata
from partita.errors import KafkaError
from partita.protocol.bulk_records import encode_record_sets
from partita.spark.options import OptionError, SinkOptions

HEADER_BATCH = "spark.batch.id"
HEADER_TASK = "spark.task.id"
HEADER_ATTEMPT = "spark.task.attempt"
HEADER_ROW = "spark.row"


@dataclass(frozen=True)
class WrittenRows(WriterCommitMessage):
    task: int
    attempt: int
    rows: int


def check_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's sink checks, with its wording: refuse a write that cannot be produced."""
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("Required attribute 'value' not found in the DataFrame to write")
    for column in ("key", "value"):
        if column in types and not isinstance(types[column], StringType | BinaryType):
            raise OptionError(
                f"{column} attribute type must be a string or binary, not "
                f"{types[column].simpleString()}"
            )
    if options.topic is None:
        if "topic" not in types:
            raise OptionError(
                "topic option required when no 'topic' attribute is present. Use the "
                "topic option for setting a topic."
            )
        if not isinstance(types["topic"], StringType):
            raise OptionError(f"Topic type must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(
            f"partition attribute type must be an int, not {types['partition'].simpleString()}"
        )
    if "headers" in types:
        wanted = ArrayType(
            StructType().add("key", StringType()).add("value", BinaryType())
        ).simpleString()
        given = types["headers"]
        if not isinstance(given, ArrayType) or given.simpleString() != wanted:
            raise OptionError(
                f"headers attribute type must be {wanted}, not {given.simpleString()}"
            )


def _as_bytes(batch: pa.RecordBatch, name: str) -> list[bytes | None] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())  # zero-copy: same bytes, new type
    result: list[bytes | None] = column.to_pylist()
    return result


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index).to_pylist()


class _Delivery:
    """Acknowledgements still owed, bounded so a fast task cannot queue without limit."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self.waiting: deque[asyncio.Future[RecordMetadata]] = deque()
        self.failures: list[BaseException] = []

    def _check(self, done: asyncio.Future[RecordMetadata]) -> None:
        if not done.cancelled() and done.exception() is not None:
            self.failures.append(done.exception())  # type: ignore[arg-type]

    async def add(self, future: asyncio.Future[RecordMetadata]) -> None:
        future.add_done_callback(self._check)
        self.waiting.append(future)
        while len(self.waiting) > self.limit:
            await asyncio.wait([self.waiting.popleft()])
        if self.failures:
            raise KafkaError(f"records were not written: {self.failures[0]}")


def _rows_by_partition(
    partitions: list[int | None] | None, keys: list[bytes | None] | None, count: int, rows: int
) -> dict[int, list[int]] | None:
    """Row indexes per target partition: an explicit partition wins, else Java's murmur2 of
    the key; None when some row has neither (keyless rows go by record set instead)."""
    groups: dict[int, list[int]] = {}
    for row in range(rows):
        target = partitions[row] if partitions is not None else None
        if target is None:
            key = keys[row] if keys is not None else None
            if key is None:
                return None
            target = partition_for_key(key, count)
        elif not 0 <= target < count:
            raise KafkaError(f"partition {target} does not exist: the topic has {count}")
        groups.setdefault(target, []).append(row)
    return groups


async def produce_batches(
    options: SinkOptions, batches: Iterator[pa.RecordBatch], origin: list[tuple[str, bytes]]
) -> int:
    """Produce every row; returns the row count once all are acknowledged.

    The common shapes (one topic, default partitioner, no per-row headers) are encoded a
    record set at a time; anything else goes record by record through ``send``."""
    delivery = _Delivery()
    written = 0
    async with AsyncProducer(options.bootstrap_servers, **options.producer) as producer:
        bulk = isinstance(producer.partitioner, DefaultPartitioner)
        for batch in batches:
            values = _as_bytes(batch, "value")
            assert values is not None
            keys = _as_bytes(batch, "key")
            partitions = _column(batch, "partition")
            if bulk and options.topic and batch.schema.get_field_index("headers") < 0:
                written += await _produce_bulk(
                    producer, delivery, options.topic, values, keys, partitions, origin, written
                )
                continue
            topics = None if options.topic else _column(batch, "topic")
            headers = _column(batch, "headers")
            for i, value in enumerate(values):
                topic = options.topic or (topics[i] if topics else None)
                if topic is None:
                    raise KafkaError(f"row {written} has a null topic and no topic option is set")
                record_headers = [*origin, (HEADER_ROW, str(written).encode())]
                if headers is not None and headers[i]:
                    record_headers[:0] = [(h["key"], h["value"]) for h in headers[i]]
                future = await producer.send(
                    topic,
                    value,
                    keys[i] if keys is not None else None,
                    partition=partitions[i] if partitions is not None else None,
                    headers=record_headers,
                )
                await delivery.add(future)
                written += 1
        await producer.flush()
    if delivery.failures:
        raise KafkaError(
            f"{len(delivery.failures)} batches were not written: {delivery.failures[0]}"
        )
    return written


async def _produce_bulk(
    producer: AsyncProducer,
    delivery: _Delivery,
    topic: str,
    values: list[bytes | None],
    keys: list[bytes | None] | None,
    partitions: list[int | None] | None,
    origin: list[tuple[str, bytes]],
    row_base: int,
) -> int:
    count = await producer.partitions_for(topic)
    timestamp = int(time.time() * 1000)
    encode = functools.partial(
        encode_record_sets,
        values,
        keys,
        shared_headers=origin,
        row_header=HEADER_ROW,
        row_base=row_base,
        max_bytes=producer.batch_size,
    )
    groups = _rows_by_partition(partitions, keys, count, len(values))
    if groups is not None:
        for partition, rows in groups.items():
            for records in encode(rows):
                await delivery.add(
                    await producer.send_record_set(
                        topic, partition, records, timestamp_ms=timestamp
                    )
                )
    elif partitions is None and (keys is None or all(k is None for k in keys)):
        # Keyless: whole record sets stick to one partition, as the sticky partitioner
        # keeps a partition until a batch is full.
        for records in encode(range(len(values))):
            partition = producer.partitioner.partition(topic, None, None, count)
            await delivery.add(
                await producer.send_record_set(topic, partition, records, timestamp_ms=timestamp)
            )
            producer.partitioner.on_append(topic, partition, len(records.body), count)
    else:  # a mix of keyed, keyless and explicit rows: one at a time
        for row, value in enumerate(values):
            future = await producer.send(
                topic,
                value,
                keys[row] if keys is not None else None,
                partition=partitions[row] if partitions is not None else None,
                headers=[*origin, (HEADER_ROW, str(row_base + row).encode())],
            )
            await delivery.add(future)
    return len(values)


def _write(options: SinkOptions, batches: Iterator[pa.RecordBatch], batch_id: str) -> WrittenRows:
    context = TaskContext.get()
    task = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    streaming_batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    origin = [
        (HEADER_BATCH, (streaming_batch or batch_id).encode()),
        (HEADER_TASK, str(task).encode()),
        (HEADER_ATTEMPT, str(attempt).encode()),
    ]
    rows = asyncio.run(produce_batches(options, batches, origin))
    return WrittenRows(task=task, attempt=attempt, rows=rows)


class PartitaWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options
        self.write_id = uuid.uuid4().hex  # one id for every task of this write job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self.options, iterator, self.write_id)


class PartitaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self.options, iterator, "unknown")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are in the topic once ``write`` returned; nothing is left to publish."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: rows already produced stay; the retry writes them again."""
