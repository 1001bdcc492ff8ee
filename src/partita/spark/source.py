"""``format("partita")``: the Python data source Spark finds through ``pyspark_partita``.

Batch and streaming reads plan one input partition per topic-partition offset range on the
driver (``partitions``); executors fetch their range and yield Arrow batches (``read``).
Streaming offsets are Spark's Kafka checkpoint layout, ``{"topic": {"0": next_offset}}``,
and all planning state is derived from the offsets Spark hands back, so a restarted query
resumes exactly where its last committed batch ended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from partita.spark.broker_io import BrokerView, DataLossError, read_range
from partita.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    SourceOptions,
    TimestampSpec,
    parse_sink_options,
    parse_source_options,
)
from partita.spark.planning import (
    OffsetRange,
    Offsets,
    TopicPartition,
    backlog,
    from_checkpoint,
    rate_limit,
    split_ranges,
    to_checkpoint,
)
from partita.spark.rows import kafka_schema
from partita.spark.worker_gc import freeze_loaded_modules

log = logging.getLogger("partita.spark")


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task: an offset range of one topic partition."""

    offset_range: OffsetRange

    def __init__(self, offset_range: OffsetRange) -> None:
        object.__setattr__(self, "offset_range", offset_range)
        object.__setattr__(self, "value", offset_range)


class PartitaDataSource(DataSource):
    """Read and write partita (or any Kafka) topics with Spark's Kafka options and schema."""

    @classmethod
    def name(cls) -> str:
        return "partita"

    # Every method below runs in a PySpark worker that plans the query: each first takes
    # what is loaded out of that worker's per-task collection (worker_gc).
    def schema(self) -> StructType:
        freeze_loaded_modules()
        # Checked here so that a bad option fails at load(), before any job runs.
        options = parse_source_options(self.options, streaming=None)
        return kafka_schema(options.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        freeze_loaded_modules()
        return PartitaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        freeze_loaded_modules()
        return PartitaStreamReader(parse_source_options(self.options, streaming=True))

    # The sink is imported when a query writes: it loads the compiled encoder (numba),
    # which the workers that plan reads and read topics do not need.
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from partita.spark.sink import PartitaWriter  # noqa: PLC0415

        freeze_loaded_modules()
        if overwrite:
            # Spark's Kafka sink refuses Overwrite (and Ignore, which Spark already refuses
            # for every Python data source): nothing in a topic can be replaced, and
            # appending instead would silently do something else than was asked.
            raise OptionError(
                "Save mode Overwrite not allowed for partita, as for Kafka: records can only "
                'be appended to a topic. Allowed save mode is Append: .mode("append")'
            )
        return PartitaWriter(parse_sink_options(self.options), schema)

    # A streaming query in Complete mode asks to overwrite; Spark's Kafka sink appends every
    # result row each micro-batch instead (its truncate() does nothing), and so does this.
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from partita.spark.sink import PartitaStreamWriter  # noqa: PLC0415

        freeze_loaded_modules()
        return PartitaStreamWriter(parse_sink_options(self.options), schema)


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    freeze_loaded_modules()
    if not isinstance(partition, RangePartition):
        # PySpark plans one InputPartition(None) when partitions() found nothing to read
        # (empty topics, a pattern matching none): an empty result, like Spark's Kafka source.
        return
    yield from read_range(
        options.bootstrap_servers,
        partition.offset_range,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        security=options.security,
        isolation=options.isolation,
    )


class _Planner:
    """Driver-side offset resolution shared by batch and streaming reads.

    A subscribed topic that does not exist fails a batch query as it is planned, naming
    the topic. A streaming query waits for it, as a Kafka consumer's subscription does:
    its partitions are new partitions when it appears, read from their earliest offsets.
    """

    def __init__(self, options: SourceOptions, *, wait_for_topics: bool) -> None:
        self.options = options
        self.broker = BrokerView(options.bootstrap_servers, options.security, options.isolation)
        self.wait_for_topics = wait_for_topics
        self._waiting_for: dict[str, int] = {}

    def snapshot(self) -> tuple[list[TopicPartition], Offsets, Offsets]:
        """The subscription's partitions now, with their earliest and latest offsets."""
        subscribed = self.broker.partitions(self.options.subscription)
        if subscribed.unavailable and not self.wait_for_topics:
            raise subscribed.unavailable_error()
        if subscribed.unavailable != self._waiting_for:  # said once, not every trigger
            self._waiting_for = subscribed.unavailable
            if subscribed.unavailable:
                log.warning("%s: waiting for it", subscribed.unavailable_error())
        partitions = subscribed.partitions
        earliest, latest = self.broker.bounds(partitions)
        return partitions, earliest, latest

    def starting_offsets(
        self, partitions: list[TopicPartition], earliest: Offsets, latest: Offsets
    ) -> Offsets:
        options = self.options
        return self.resolve(
            partitions,
            options.starting,
            options.starting_timestamp,
            earliest,
            latest,
            starting=True,
        )

    def resolve(
        self,
        partitions: list[TopicPartition],
        spec: OffsetSpec,
        timestamps: TimestampSpec | None,
        earliest: Offsets,
        latest: Offsets,
        *,
        starting: bool,
    ) -> Offsets:
        """Concrete offsets for a starting or ending spec (timestamps win over offsets)."""
        if timestamps is not None:
            return self._by_timestamp(partitions, timestamps, latest, starting=starting)
        if spec == "earliest":
            return {tp: earliest[tp] for tp in partitions}
        if spec == "latest":
            return {tp: latest[tp] for tp in partitions}
        out: Offsets = {}
        for tp in partitions:
            wanted = spec.get(tp)
            if wanted is None:
                if self.options.subscription.kind != "assign":
                    # Spark requires every partition in the JSON; a partition that appeared
                    # since the query was written starts at the default for its side.
                    wanted = EARLIEST if starting else LATEST
                else:
                    raise OptionError(f"offsets for {tp[0]}-{tp[1]} are not specified")
            out[tp] = (
                earliest[tp] if wanted == EARLIEST else latest[tp] if wanted == LATEST else wanted
            )
        return out

    def _by_timestamp(
        self,
        partitions: list[TopicPartition],
        timestamps: TimestampSpec,
        latest: Offsets,
        *,
        starting: bool,
    ) -> Offsets:
        if isinstance(timestamps, int):
            wanted = dict.fromkeys(partitions, timestamps)
        else:
            unknown = sorted(set(timestamps) - set(partitions))
            if unknown:
                raise OptionError(
                    "timestamps given for partitions that are not read: "
                    + ", ".join(f"{t}-{p}" for t, p in unknown)
                )
            wanted = {tp: timestamps[tp] for tp in partitions if tp in timestamps}
        found = self.broker.list_offsets(wanted)
        out: Offsets = {}
        for tp in partitions:
            offset = found.get(tp, -1)
            if offset < 0:
                if tp in wanted and starting and self.options.timestamp_not_found == "error":
                    raise DataLossError(
                        f"no record in {tp[0]}-{tp[1]} has a timestamp at or after "
                        f"{wanted[tp]}; set startingOffsetsByTimestampStrategy=latest to "
                        "start at the end instead"
                    )
                offset = latest[tp]
            out[tp] = offset
        return out


class PartitaBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        planner = _Planner(options, wait_for_topics=False)
        partitions, earliest, latest = planner.snapshot()
        start = planner.starting_offsets(partitions, earliest, latest)
        end = planner.resolve(
            partitions, options.ending, options.ending_timestamp, earliest, latest, starting=False
        )
        ranges = []
        for tp in partitions:
            if start[tp] > end[tp]:
                raise OptionError(
                    f"{tp[0]}-{tp[1]}: the starting offset {start[tp]} is after the ending "
                    f"offset {end[tp]}"
                )
            if start[tp] < earliest[tp]:
                message = (
                    f"{tp[0]}-{tp[1]}: offsets {start[tp]}..{earliest[tp]} were deleted; "
                    "some data may have been lost"
                )
                if options.fail_on_data_loss:
                    raise DataLossError(message + " (set failOnDataLoss=false to skip them)")
                log.warning(message)
                start[tp] = earliest[tp]
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], max(start[tp], end[tp])))
        pieces = split_ranges(
            ranges,
            min_partitions=options.min_partitions,
            max_records_per_partition=options.max_records_per_partition,
        )
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class PartitaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads. Driver-side state (the initial offsets, the AvailableNow target,
    the time of the last trigger) only shapes planning; what was read is in Spark's
    checkpoint."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = _Planner(options, wait_for_topics=True)
        self._initial: Offsets | None = None
        self._target: Offsets | None = None
        self._last_trigger = time.monotonic()

    # -- offsets --------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        # Spark asks twice; with "latest" the answers must not drift between the calls.
        if self._initial is None:
            self._initial = self._planner.starting_offsets(*self._planner.snapshot())
        return to_checkpoint(self._initial)

    def prepareForTriggerAvailableNow(self) -> None:
        _partitions, _earliest, self._target = self._planner.snapshot()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def _available(self, start: Offsets) -> tuple[Offsets, Offsets]:
        """(start offsets including new partitions at earliest, latest offsets)."""
        partitions, earliest, latest = self._planner.snapshot()
        vanished = sorted(set(start) - set(partitions))
        if vanished:
            message = "partitions disappeared: " + ", ".join(f"{t}-{p}" for t, p in vanished)
            if self.options.fail_on_data_loss:
                raise DataLossError(message + "; some data may have been lost")
            log.warning(message)
        begin = {tp: start.get(tp, earliest[tp]) for tp in partitions}
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target.get(tp, begin[tp])) for tp in partitions}
        return begin, latest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin, latest = self._available(from_checkpoint(start))
        latest = {tp: max(latest[tp], begin[tp]) for tp in latest}
        if isinstance(limit, ReadAllAvailable):
            return to_checkpoint(latest)
        options = self.options
        waiting = backlog(begin, latest)
        if options.min_offsets_per_trigger is not None and self._target is None:
            overdue = (time.monotonic() - self._last_trigger) * 1000 >= options.max_trigger_delay_ms
            if waiting < options.min_offsets_per_trigger and not overdue:
                return to_checkpoint(begin)
        if options.max_offsets_per_trigger is not None:
            latest = rate_limit(begin, latest, options.max_offsets_per_trigger)
        if latest != begin:
            self._last_trigger = time.monotonic()
        return to_checkpoint(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        _partitions, _earliest, latest = self._planner.snapshot()
        return to_checkpoint(latest)

    # -- planning and reading -------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_checkpoint(start), from_checkpoint(end)
        if not stop:
            return []
        earliest, latest = self._planner.broker.bounds(sorted(stop))
        ranges = []
        for tp, planned_end in sorted(stop.items()):
            until = planned_end
            since = begin.get(tp, earliest[tp])
            if since < earliest[tp] or until > latest[tp]:
                message = (
                    f"{tp[0]}-{tp[1]}: offsets {since}..{until} are no longer all in the log "
                    f"({earliest[tp]}..{latest[tp]}); some data may have been lost"
                )
                if self.options.fail_on_data_loss:
                    raise DataLossError(message + " (set failOnDataLoss=false to skip them)")
                log.warning(message)
                since = max(since, earliest[tp])
                until = min(until, latest[tp])
            ranges.append(OffsetRange(tp[0], tp[1], since, until))
        pieces = split_ranges(
            ranges,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the brokers."""
