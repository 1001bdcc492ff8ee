"""Writing a DataFrame to topics: Spark's Kafka sink semantics over partita's producer.

Columns: ``value`` (required), ``key``, ``topic`` (or the ``topic`` option, which wins),
``partition``, ``headers``; anything else is ignored, as in Spark's sink. Without a
``partition`` the producer's partitioner decides (murmur2 on the key, sticky when keyless).

Delivery is at-least-once by default, like Spark's Kafka sink: a retried task writes its
rows again. ``deliveryGuarantee=exactly-once`` writes each task's rows in a Kafka
transaction committed with the write (``spark.exactly_once``): read_committed readers see
every row once. Every record carries where it came from, so an at-least-once reader can
drop the duplicates:

- ``spark.batch.id``: ``<query id>.<micro-batch id>`` for a streaming query (the query id
  survives restarts from the checkpoint, so a re-run micro-batch has the same one), or
  one random 16-hex-digit id per batch write job;
- ``spark.task.id``: the Spark partition the row was written from;
- ``spark.row``: the row's position in the task's input.

``(spark.batch.id, spark.task.id, spark.row)`` names a row; attempts of the same task see
the same rows in the same order, so a duplicate has the same triple. Two streaming
queries writing one topic have different query ids, so their rows never share a triple.
The headers are about half of a 100-byte value's record, so they say no more than that.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import secrets
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
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
from partita.spark.exactly_once import Prepared, end_all, prepare
from partita.spark.options import OptionError, SinkOptions
from partita.spark.producer_cache import PRODUCERS
from partita.spark.worker_gc import freeze_loaded_modules

HEADER_BATCH = "spark.batch.id"
HEADER_TASK = "spark.task.id"
HEADER_ROW = "spark.row"


@dataclass(frozen=True)
class WrittenRows(WriterCommitMessage):
    task: int
    attempt: int
    rows: int
    # exactly-once: the task's open transaction (None: nothing written, or this version
    # had already committed for this task)
    prepared: Prepared | None = None


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


def _binary(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if not pa.types.is_binary(column.type):
        column = pc.cast(column, pa.binary())  # from string: the same bytes, a new type
    return column


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
    partitions: pa.Array | None, keys: pa.Array | None, count: int, rows: int
) -> dict[int, np.ndarray] | None:
    """Row indexes per target partition: an explicit partition wins, else Java's murmur2 of
    the key; None when some row has neither (keyless rows go by record set instead)."""
    if partitions is None and keys is None:
        return None  # every row is keyless: nothing to compute per row
    explicit = (
        np.asarray(partitions.fill_null(-1), dtype=np.int64)
        if partitions is not None
        else np.full(rows, -1, dtype=np.int64)
    )
    if ((explicit >= count) | (explicit < -1)).any():
        bad = int(explicit[(explicit >= count) | (explicit < -1)][0])
        raise KafkaError(f"partition {bad} does not exist: the topic has {count}")
    missing = np.flatnonzero(explicit < 0)
    if len(missing):
        if keys is None:
            return None
        chosen = keys.take(pa.array(missing)).to_pylist()
        if any(key is None for key in chosen):
            return None
        explicit[missing] = [partition_for_key(key, count) for key in chosen]
    order = np.argsort(explicit, kind="stable")
    targets, firsts = np.unique(explicit[order], return_index=True)
    groups = np.split(order, firsts[1:])
    return {int(t): g for t, g in zip(targets, groups, strict=True)}


async def produce_batches(
    producer: AsyncProducer,
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    origin: list[tuple[str, bytes]],
) -> int:
    """Produce every row; returns the row count once all are acknowledged.

    The common shapes (one topic, default partitioner, no per-row headers) are encoded a
    record set at a time; anything else goes record by record through ``send``."""
    delivery = _Delivery()
    written = 0
    bulk = isinstance(producer.partitioner, DefaultPartitioner)
    for batch in batches:
        sent = False
        if bulk and options.topic and batch.schema.get_field_index("headers") < 0:
            sent = await _produce_bulk(producer, delivery, options.topic, batch, origin, written)
        if not sent:
            await _produce_rows(producer, delivery, options, batch, origin, written)
        written += batch.num_rows
    await producer.flush()
    if delivery.failures:
        raise KafkaError(
            f"{len(delivery.failures)} batches were not written: {delivery.failures[0]}"
        )
    return written


async def _produce_rows(
    producer: AsyncProducer,
    delivery: _Delivery,
    options: SinkOptions,
    batch: pa.RecordBatch,
    origin: list[tuple[str, bytes]],
    row_base: int,
) -> None:
    """Record by record through ``send``: per-row topics, headers or partitioners."""
    value_column = _binary(batch, "value")
    assert value_column is not None
    key_column = _binary(batch, "key")
    keys = key_column.to_pylist() if key_column is not None else None
    partitions = _column(batch, "partition")
    topics = None if options.topic else _column(batch, "topic")
    headers = _column(batch, "headers")
    for i, value in enumerate(value_column.to_pylist()):
        topic = options.topic or (topics[i] if topics else None)
        if topic is None:
            raise KafkaError(f"row {row_base + i} has a null topic and no topic option is set")
        record_headers = [*origin, (HEADER_ROW, str(row_base + i).encode())]
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


async def _produce_bulk(
    producer: AsyncProducer,
    delivery: _Delivery,
    topic: str,
    batch: pa.RecordBatch,
    origin: list[tuple[str, bytes]],
    row_base: int,
) -> bool:
    """Whole record sets per partition; False (nothing sent) when rows mix keyed, keyless
    and explicitly placed records, which only the per-record partitioner can place."""
    values = _binary(batch, "value")
    assert values is not None
    keys = _binary(batch, "key")
    index = batch.schema.get_field_index("partition")
    partitions = batch.column(index) if index >= 0 else None
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
    keyless = partitions is None and (keys is None or keys.null_count == len(keys))
    if groups is not None:
        for partition, rows in groups.items():
            for records in encode(rows):
                future = await producer.send_record_set(
                    topic, partition, records, timestamp_ms=timestamp
                )
                await delivery.add(future)
    elif keyless:
        # Whole record sets stick to one partition, as the sticky partitioner keeps a
        # partition until a batch is full.
        for records in encode(None):
            partition = producer.partitioner.partition(topic, None, None, count)
            future = await producer.send_record_set(
                topic, partition, records, timestamp_ms=timestamp
            )
            await delivery.add(future)
            producer.partitioner.on_append(topic, partition, len(records.body), count)
    else:
        return False
    return True


@dataclass(frozen=True)
class _Task:
    """Where a task's rows come from: its partition and attempt, and inside a streaming
    query the query's id and the micro-batch's."""

    partition: int
    attempt: int
    query: str | None
    micro_batch: int | None

    @staticmethod
    def current() -> _Task:
        context = TaskContext.get()
        if context is None:
            return _Task(0, 0, None, None)
        batch = context.getLocalProperty("streaming.sql.batchId")
        return _Task(
            context.partitionId(),
            context.attemptNumber(),
            context.getLocalProperty("sql.streaming.queryId"),
            int(batch) if batch is not None else None,
        )

    def batch_header(self, job_id: str) -> str:
        """``<query id>.<micro-batch id>`` for a streaming query, else the job's id."""
        if self.micro_batch is None:
            return job_id
        return f"{self.query}.{self.micro_batch}" if self.query else str(self.micro_batch)


def _write(options: SinkOptions, batches: Iterator[pa.RecordBatch], job_id: str) -> WrittenRows:
    freeze_loaded_modules()
    task = _Task.current()
    origin = [
        (HEADER_BATCH, task.batch_header(job_id).encode()),
        (HEADER_TASK, str(task.partition).encode()),
    ]
    if options.exactly_once:
        return _write_once(options, batches, job_id, task, origin)
    rows = PRODUCERS.run(
        options, lambda producer: produce_batches(producer, options, batches, origin)
    )
    return WrittenRows(task=task.partition, attempt=task.attempt, rows=rows)


def _write_once(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    job_id: str,
    task: _Task,
    origin: list[tuple[str, bytes]],
) -> WrittenRows:
    """Exactly-once: the task's rows in one transaction, unless this write's version
    already committed for this task (``spark.exactly_once``). The writer is named by the
    option, else the streaming query, else this job; the version is the option, else the
    micro-batch, else 0."""
    default_writer = f"partita-sink-{task.query or job_id}"
    writer = options.transactional_id_prefix or default_writer
    version = options.write_version
    if version is None:
        version = task.micro_batch or 0
    first = next(batches, None)
    if first is None:
        return WrittenRows(task=task.partition, attempt=task.attempt, rows=0)
    first_topic = options.topic or _first_topic(first)
    prepared, rows = PRODUCERS.run_on_loop(
        prepare(
            options,
            writer,
            version,
            task.partition,
            first_topic,
            lambda producer: produce_batches(
                producer, options, itertools.chain([first], batches), origin
            ),
        )
    )
    return WrittenRows(task=task.partition, attempt=task.attempt, rows=rows, prepared=prepared)


def _end_transactions(
    options: SinkOptions, messages: list[WriterCommitMessage | None], commit: bool
) -> None:
    """Phase two of the exactly-once mode: end the tasks' open transactions."""
    prepared = [
        m.prepared for m in messages if isinstance(m, WrittenRows) and m.prepared is not None
    ]
    if options.exactly_once and prepared:
        PRODUCERS.run_on_loop(end_all(options, prepared, commit))


def _first_topic(batch: pa.RecordBatch) -> str:
    topics = _column(batch, "topic")
    if not topics or topics[0] is None:
        raise KafkaError("row 0 has a null topic and no topic option is set")
    return str(topics[0])


class PartitaWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options
        self.write_id = secrets.token_hex(8)  # one id for every task of this write job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self.options, iterator, self.write_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """At-least-once, rows are in the topics once each task's ``write`` returned;
        exactly-once, the tasks' transactions commit now. This runs in the worker that
        commits the job, which also collects per task."""
        freeze_loaded_modules()
        _end_transactions(self.options, messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """At-least-once, rows already produced stay; exactly-once, the transactions of
        the tasks that finished are aborted (those that did not are aborted by the next
        attempt, or by the transaction timeout)."""
        _end_transactions(self.options, messages, commit=False)


class PartitaStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(schema, options)
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write(self.options, iterator, "unknown")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once, rows are in the topic once ``write`` returned; exactly-once, the
        tasks' transactions commit now, before Spark records the batch as done."""
        freeze_loaded_modules()
        _end_transactions(self.options, messages, commit=True)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """At-least-once: rows already produced stay; the retry writes them again.
        Exactly-once: the finished tasks' transactions are aborted."""
        _end_transactions(self.options, messages, commit=False)
