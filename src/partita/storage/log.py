"""A partition log: an ordered sequence of segments with its offsets and leader epochs.

Offsets kept per partition, as in Kafka:

    log start offset (LSO)  first offset a reader may ask for
    high watermark (HW)     first offset not yet safe to read (replicated everywhere needed)
    log end offset (LEO)    the offset the next appended record gets
    recovery point          everything below it is flushed to disk

All public methods take the partition lock, so the broker may run appends on a worker
thread while the event loop reads.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import crc32c

from partita.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from partita.protocol.file_region import FileRegion
from partita.protocol.record_batch import (
    ATTRIBUTES_POS,
    CONTROL_BIT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    check_crc,
    check_producer_batch,
    read_header,
    stamp_log_append_time,
)
from partita.protocol.records import decode_records
from partita.storage.config import LogConfig
from partita.storage.leader_epochs import LeaderEpochCache
from partita.storage.producer_snapshot import ProducerSnapshotEntry, ProducerSnapshots
from partita.storage.segment import RESERVE_WINDOW, BatchInfo, LogSegment
from partita.storage.txn_index import AbortedTxn, TxnIndexCorruptError

log = logging.getLogger(__name__)

_MAX_RELATIVE_OFFSET = 2**31 - 1
EARLIEST_TIMESTAMP = -2  # ListOffsets' special "timestamps"
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405; with no tiered storage, the earliest
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005; with no tiered storage, nothing
_PREFIX = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_PREFIX_SIZE = _PREFIX.size

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    batches: int
    bytes: int
    log_start_offset: int


@dataclass(slots=True)
class _PendingDeletion:
    segment: LogSegment
    due_ms: int
    close_only: bool = False  # the files now belong to a replacement segment


def _single_batch_limit(config: LogConfig) -> int:
    """The largest batch the single-batch path may take under ``config``: none when
    appends need what only the general path does (keys checked for compaction, stamps
    for LogAppendTime)."""
    if config.compact or config.message_timestamp_type != "CreateTime":
        return 0
    return min(config.max_message_bytes, config.segment_bytes)


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[LogSegment],
        epochs: LeaderEpochCache,
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int,
        clock: Clock = wall_clock_ms,
    ) -> None:
        if not segments:
            raise ValueError("a partition log always has an active segment")
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._use_config(config)
        self.clock = clock
        self.epochs = epochs
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        self._lock = threading.RLock()
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self.first_dirty_offset = self.log_start_offset
        # The first offset of the earliest open transaction (None: none open). The
        # partition, which tracks transactions, sets it; the cleaner stops there, so it
        # only ever meets transactions whose outcome is known.
        self.first_unstable_offset: Callable[[], int | None] = lambda: None
        # The producer state for every batch below the log end, as snapshot entries; the
        # partition, which tracks producers, sets it. The log writes it to a ``.snapshot``
        # when it rolls a segment and when it closes, so that loading replays only what
        # came after (None: no snapshots, for a log nobody appends producers' batches to).
        self.producer_state: Callable[[], list[ProducerSnapshotEntry]] | None = None
        self.snapshots = ProducerSnapshots(directory)
        self.offline_reason: str | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._pending_deletions: list[_PendingDeletion] = []

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- offsets -----------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log start, log end]; the replica manager owns the rules."""
        with self._lock:
            self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
            return self.high_watermark

    # -- aborted transactions (.txnindex) ------------------------------------------

    def index_aborted_txn(self, entry: AbortedTxn) -> None:
        """An ABORT marker was appended at ``entry.last_offset``: its segment's
        ``.txnindex`` gets the entry."""
        with self._lock:
            segment = self._segments[self._segment_index_for(entry.last_offset)]
            segment.txn_index.append(entry)

    def aborted_txns(self) -> list[AbortedTxn]:
        """Every segment's ``.txnindex`` entries, in log order."""
        with self._lock:
            segments = list(self._segments)
        return [entry for segment in segments for entry in segment.txn_index.entries()]

    def aborted_between(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound)
        reports: those whose range meets it. As Kafka's ``collectAbortedTransactions``,
        the search starts in the segment holding the fetch offset (an abort ending before
        it cannot matter) and ends at the first entry whose last stable offset reaches
        past the upper bound."""
        with self._lock:
            segments = self._segments[self._segment_index_for(fetch_offset) :]
        found = []
        for segment in segments:
            for entry in segment.txn_index.entries():
                if entry.last_offset < fetch_offset:
                    continue
                if entry.first_offset < upper_bound:
                    found.append(entry)
                if entry.last_stable_offset >= upper_bound:
                    return found
        return found

    def reconcile_txn_indexes(self, entries: list[AbortedTxn], from_offset: int = 0) -> int:
        """Make the ``.txnindex`` files hold exactly ``entries`` for the markers at or
        past ``from_offset`` (what replaying them found), each in the segment of its
        marker; how many files changed. A crash can leave a marker in the log and not in
        its index, and a compaction can remove an aborted transaction's every batch.
        Entries of markers before ``from_offset`` (not replayed) stay as they are."""
        with self._lock:
            wanted: dict[int, list[AbortedTxn]] = {}
            for entry in entries:
                wanted.setdefault(self._segment_index_for(entry.last_offset), []).append(entry)
            changed = 0
            for index, segment in enumerate(self._segments):
                if segment.next_offset <= from_offset and segment.base_offset < from_offset:
                    continue
                try:
                    current = segment.txn_index.entries()
                except TxnIndexCorruptError:
                    current = None
                kept = [e for e in current or [] if e.last_offset < from_offset]
                expected = kept + wanted.get(index, [])
                if current != expected:
                    segment.txn_index.replace(expected)
                    changed += 1
            return changed

    def txn_indexes_readable(self, below: int) -> bool:
        """Whether every ``.txnindex`` of the segments before ``below`` reads whole: a
        load that replays only from ``below`` does not rebuild them."""
        with self._lock:
            segments = [s for s in self._segments if s.base_offset < below]
        try:
            for segment in segments:
                segment.txn_index.entries()
        except TxnIndexCorruptError:
            return False
        return True

    def _check_online(self) -> None:
        if self.offline_reason is not None:
            raise KafkaStorageError(f"partition {self.name} is offline: {self.offline_reason}")

    # -- appends -----------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        from_coordinator: bool = False,
    ) -> AppendInfo:
        """Validate producer batches, give them offsets and the leader epoch, append them.
        ``from_coordinator``: the broker's own batches (a transaction coordinator's
        markers), to which the rules for clients' batches (no control batch) do not apply.

        Batches stay opaque bytes: each is written as a new 17-byte prefix (base offset,
        length, epoch, magic) followed by the client's own bytes from the CRC onwards. A
        single batch in a writable buffer (the broker's request frames) gets its prefix
        written in place instead, so the caller's buffer then holds the stored batch.
        """
        with self._lock:
            self._check_online()
            view = memoryview(records)
            single = self._single_batch_fast_path(view, leader_epoch)
            if single is not None:
                return single
            headers = self._validate(view, from_client=not from_coordinator)
            next_offset = self.log_end_offset
            log_append_time = -1
            if self.config.message_timestamp_type == "LogAppendTime":
                log_append_time = self.clock()
            buffers: list[bytes | memoryview] = []
            infos: list[BatchInfo] = []
            pack_prefix = _PREFIX.pack
            total = 0
            max_timestamp = -1
            for pos, header in headers:
                size = header.batch_length + LOG_OVERHEAD
                total += size
                buffers.append(
                    pack_prefix(next_offset, header.batch_length, leader_epoch, MAGIC_V2)
                )
                if log_append_time >= 0:
                    copy = bytearray(view[pos : pos + size])
                    stamp_log_append_time(copy, 0, size, log_append_time)
                    buffers.append(memoryview(copy)[_PREFIX_SIZE:])
                    max_ts = log_append_time
                else:
                    buffers.append(view[pos + _PREFIX_SIZE : pos + size])
                    max_ts = header.max_timestamp
                last = next_offset + header.last_offset_delta
                infos.append(BatchInfo(next_offset, last, max_ts, size, leader_epoch))
                max_timestamp = max(max_timestamp, max_ts)
                next_offset = last + 1
            return self._append(buffers, infos, total, max_timestamp, log_append_time)

    def _single_batch_fast_path(self, view: memoryview, leader_epoch: int) -> AppendInfo | None:
        """Most produce requests carry one batch per partition: take it without the
        general loop. Returns None (take the general path, which also produces the right
        error) for anything unusual."""
        if len(view) < HEADER_SIZE:
            return None
        (
            _,
            batch_length,
            _,
            magic,
            crc,
            attributes,
            last_delta,
            _,
            max_ts,
            producer_id,
            _,
            base_sequence,
            count,
        ) = HEADER_STRUCT.unpack_from(view, 0)
        size = batch_length + LOG_OVERHEAD
        if (
            size != len(view)
            or size > self._single_batch_limit
            or magic != MAGIC_V2
            or count <= 0
            or last_delta != count - 1
            or attributes & CONTROL_BIT
            or (producer_id >= 0 and base_sequence < 0)
            or crc32c.crc32c(view[ATTRIBUTES_POS:]) != crc
        ):
            return None
        offset = self.log_end_offset
        info = BatchInfo(offset, offset + last_delta, max_ts, size, leader_epoch)
        if view.readonly:
            prefix = _PREFIX.pack(offset, batch_length, leader_epoch, MAGIC_V2)
            return self._append([prefix, view[_PREFIX_SIZE:]], [info], size, max_ts, -1)
        # As Kafka assigns offsets in place: neither field is under the CRC, and one
        # write of one buffer is cheaper than a writev of a new prefix and the rest.
        _PREFIX.pack_into(view, 0, offset, batch_length, leader_epoch, MAGIC_V2)
        return self._append([view], [info], size, max_ts, -1)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches copied from the leader, keeping their offsets and epochs."""
        with self._lock:
            self._check_online()
            view = memoryview(records)
            headers = self._validate(view, from_client=False)
            if not headers:
                return self._empty_append()
            expected = self.log_end_offset
            infos: list[BatchInfo] = []
            max_timestamp = -1
            for _pos, header in headers:
                if header.base_offset < expected:
                    raise InvalidRecordError(
                        f"{self.name}: replicated batch at offset {header.base_offset} is below "
                        f"the log end offset {expected}"
                    )
                if header.last_offset < header.base_offset:
                    # The log end offset would move back: offsets must only grow.
                    raise InvalidRecordError(
                        f"{self.name}: replicated batch at offset {header.base_offset} ends "
                        f"before it starts (last offset {header.last_offset})"
                    )
                infos.append(
                    BatchInfo(
                        header.base_offset,
                        header.last_offset,
                        header.max_timestamp,
                        header.size,
                        header.partition_leader_epoch,
                    )
                )
                max_timestamp = max(max_timestamp, header.max_timestamp)
                expected = header.next_offset
            start, end = headers[0][0], headers[-1][0] + headers[-1][1].size
            return self._append([view[start:end]], infos, end - start, max_timestamp, -1)

    def _empty_append(self) -> AppendInfo:
        leo = self.log_end_offset
        return AppendInfo(leo, leo - 1, -1, -1, 0, 0, self.log_start_offset)

    def _validate(self, view: memoryview, *, from_client: bool) -> list[tuple[int, BatchHeader]]:
        headers: list[tuple[int, BatchHeader]] = []
        pos, end = 0, len(view)
        if from_client and end == 0:
            raise InvalidRecordError("produce request carries no record batch")
        max_message_bytes = self.config.max_message_bytes
        total = 0
        while pos < end:
            if not from_client and end - pos < HEADER_SIZE:
                break  # a fetch response may end in a partial batch; the rest comes next time
            header = read_header(view, pos)
            size = header.batch_length + LOG_OVERHEAD
            if size > max_message_bytes:
                raise MessageTooLargeError(
                    f"record batch of {size} bytes exceeds max.message.bytes="
                    f"{self.config.max_message_bytes} for {self.name}"
                )
            if pos + size > end:
                if from_client:
                    raise CorruptRecordError(
                        f"record batch is truncated: {end - pos} of {size} bytes present"
                    )
                break  # a fetch response may end in a partial batch; the rest comes next time
            if from_client:
                check_producer_batch(header)
            check_crc(view, pos, header)
            headers.append((pos, header))
            pos += size
            total += size
        if total > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"{total} bytes of batches cannot fit in a segment of {self.config.segment_bytes}"
            )
        if from_client and self.config.compact:
            self._require_keys(view, headers)
        return headers

    def _require_keys(self, view: memoryview, headers: list[tuple[int, BatchHeader]]) -> None:
        # Kafka refuses keyless records on compacted topics; this is the one append-path
        # check that looks inside a batch, and only compacted topics pay for it.
        for pos, header in headers:
            _, records = decode_records(view[pos : pos + header.size])
            if any(r.key is None for r in records):
                raise InvalidRecordError(
                    f"compacted topic {self.topic} needs a key on every record"
                )

    def _append(
        self,
        buffers: list[bytes | memoryview],
        infos: list[BatchInfo],
        total: int,
        max_timestamp: int,
        log_append_time: int,
    ) -> AppendInfo:
        """Write validated batches of ``total`` bytes whose newest timestamp is
        ``max_timestamp`` (the callers sum both as they validate)."""
        segment = self._maybe_roll(total, max_timestamp, infos)
        first, last = infos[0].base_offset, infos[-1].last_offset
        # A new leader epoch is checkpointed before the data is written, so that a
        # failure can never leave data behind that the caller was told did not land.
        new_epoch = (
            len(infos) > 1 or infos[0].leader_epoch > self.epochs.latest_epoch
        ) and self._assign_epochs(infos)
        if new_epoch:
            try:
                self.epochs.flush()
            except OSError as exc:
                self.epochs.truncate_from_end(first)
                raise KafkaStorageError(
                    f"{self.name}: cannot write leader-epoch checkpoint: {exc}"
                ) from exc
        try:
            segment.append(buffers, infos, total, self._reserve_window)
        except OSError as exc:
            self._after_write_failure(segment, exc)
            if new_epoch:
                self.epochs.truncate_from_end(first)
                with contextlib.suppress(OSError):
                    self.epochs.flush()
            raise KafkaStorageError(f"{self.name}: append failed: {exc}") from exc
        self._unflushed_messages += last - first + 1
        if self._unflushed_messages >= self.config.flush_messages:
            try:
                self.flush()
            except KafkaStorageError as exc:
                # The batch is in the file but its durability is unknown: stop serving
                # this partition rather than acknowledge or half-acknowledge it.
                self.offline_reason = f"flush after append failed: {exc}"
                log.error("partition offline", extra={"partition": self.name, "error": str(exc)})
                raise
        return AppendInfo(
            first, last, max_timestamp, log_append_time, len(infos), total, self.log_start_offset
        )

    def _assign_epochs(self, infos: list[BatchInfo]) -> bool:
        latest = self.epochs.latest_epoch
        assigned = False
        for info in infos:
            if info.leader_epoch > latest and self.epochs.assign(
                info.leader_epoch, info.base_offset
            ):
                latest = info.leader_epoch
                assigned = True
        return assigned

    def _after_write_failure(self, segment: LogSegment, exc: OSError) -> None:
        try:
            actual = segment.file_size()
        except OSError:
            actual = -1
        if actual != segment.size:
            self.offline_reason = f"a failed write left {segment.log_path.name} inconsistent: {exc}"
            log.error("partition offline", extra={"partition": self.name, "error": str(exc)})
        else:
            log.warning(
                "append failed and was rolled back",
                extra={"partition": self.name, "error": str(exc)},
            )

    def _flush_epochs(self) -> None:
        try:
            self.epochs.flush()
        except OSError as exc:
            raise KafkaStorageError(
                f"{self.name}: cannot write leader-epoch checkpoint: {exc}"
            ) from exc

    # -- rolling -----------------------------------------------------------------

    def _maybe_roll(self, incoming_bytes: int, max_ts: int, infos: list[BatchInfo]) -> LogSegment:
        """The segment the incoming batches go to: the active one, or a new one if they
        may not join it."""
        segment = self.active_segment
        if segment.size == 0:
            return segment
        config = self.config
        rolling_ts = segment.rolling_based_timestamp
        if rolling_ts is not None and rolling_ts >= 0:
            waited = max_ts - rolling_ts
        else:
            waited = self.clock() - segment.created_ms
        reason = None
        if segment.size > config.segment_bytes - incoming_bytes:
            reason = "segment.bytes"
        elif waited > config.segment_ms - config.segment_jitter_ms:
            reason = "segment.ms"
        elif segment.indexes_full:
            reason = "segment.index.bytes"
        elif infos[-1].last_offset - segment.base_offset > _MAX_RELATIVE_OFFSET:
            reason = "relative offset overflow"
        if reason is None:
            return segment
        return self._roll(infos[0].base_offset, reason)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (a no-op if it is empty)."""
        with self._lock:
            self._check_online()
            if self.active_segment.size == 0:
                return self.active_segment
            return self._roll(self.log_end_offset, "requested")

    def _roll(self, base_offset: int, reason: str, snapshot: bool = True) -> LogSegment:
        """Start a new active segment at ``base_offset``; ``snapshot``: write the
        producer snapshot there. Only a roll on the append path may: the partition's
        state is read on the event loop that owns it, and an append has just told it of
        every batch below the log end."""
        old = self.active_segment
        try:
            old.on_become_inactive()
            old.flush()
            segment = self._create_active_segment(base_offset)
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}: cannot roll a new segment: {exc}") from exc
        self.recovery_point = max(self.recovery_point, old.next_offset)
        self._segments.append(segment)
        self._base_offsets.append(base_offset)
        if snapshot:
            self._snapshot_producers(base_offset)
        log.debug(
            "rolled segment",
            extra={"partition": self.name, "base_offset": base_offset, "reason": reason},
        )
        return segment

    def _create_active_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.create(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_entries=max(1, self.config.segment_index_bytes // 8),
            created_ms=self.clock(),
        )

    # -- producer snapshots ------------------------------------------------------

    def _snapshot_producers(self, offset: int) -> None:
        """The producer state of every batch below ``offset``, which is the log end: a
        roll happens before the batches that caused it are written, and the partition
        has seen every batch before them. Written only where it spares a load work: not
        where one stands already (the state below an offset is fixed by the batches below
        it; a truncation or a restart of the log deletes what it outdates), nor for a log
        with no batches and no producers. Each costs an fsync, and a broker stopping with
        thousands of partitions would otherwise pay one per partition at every stop (as
        Kafka, which writes one only when the state moved since the last)."""
        if self.producer_state is None or offset in self.snapshots:
            return
        entries = self.producer_state()
        if not entries and offset == self._segments[0].base_offset:
            return
        # A load trusts the .txnindex files of the batches before the snapshot: each
        # must be on disk first (one a full disk refused is written again here).
        if not all([segment.txn_index.sync() for segment in self._segments]):
            log.warning(
                "producer snapshot skipped until every .txnindex is on disk",
                extra={"partition": self.name, "offset": offset},
            )
            return
        self.snapshots.write(offset, entries)

    def producer_snapshot(self) -> tuple[int, list[ProducerSnapshotEntry]] | None:
        """The newest snapshot a load can start from (offset, entries): at or below the
        log end and at or above the first segment's base offset (replay needs the
        batches after it). Files outside that range are deleted, as Kafka does with
        stray snapshots: past the end they describe batches a crash or a truncation
        removed."""
        with self._lock:
            self.snapshots.delete_above(self.log_end_offset)
            self.snapshots.delete_below(self._segments[0].base_offset)
            return self.snapshots.latest(self.log_end_offset)

    # -- reads -------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._base_offsets, offset) - 1)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FileRegion | None:
        """Bytes of whole batches from the one holding ``start_offset``, never reaching
        ``max_offset`` (the high watermark unless given). None when nothing is readable."""
        with self._lock:
            self._check_online()
            leo = self.log_end_offset
            if start_offset < self.log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is outside [{self.log_start_offset}, {leo}] "
                    f"of {self.name}"
                )
            upper = min(self.high_watermark if max_offset is None else max_offset, leo)
            if start_offset >= upper:
                return None
            try:
                for i in range(self._segment_index_for(start_offset), len(self._segments)):
                    segment = self._segments[i]
                    if segment.base_offset >= upper:
                        return None
                    region = segment.read(
                        start_offset,
                        max_bytes,
                        self._position_of(segment, i, upper),
                        min_one_batch=min_one_batch,
                    )
                    if region is not None:
                        return region
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: read failed: {exc}") from exc
            return None

    def _position_of(self, segment: LogSegment, index: int, upper: int) -> int:
        """File position in ``segment`` where offsets >= ``upper`` begin."""
        is_last = index == len(self._segments) - 1
        segment_end = segment.next_offset if is_last else self._base_offsets[index + 1]
        if upper >= segment_end:
            return segment.size
        found = segment.translate_offset(upper)
        return segment.size if found is None else found[1]

    def iter_headers(self, start_offset: int) -> Iterator[tuple[LogSegment, int, BatchHeader]]:
        """(segment, file position, header) of every whole batch holding an offset at or
        past ``start_offset``, read from the files (loading, not hot paths); the offset
        index finds where to start in the first segment."""
        with self._lock:
            segments = self._segments[self._segment_index_for(start_offset) :]
        for segment in segments:
            position = segment.offset_index.scan_start(start_offset)
            for pos, header in segment.iter_headers(position):
                if header.last_offset >= start_offset:
                    yield segment, pos, header

    def iter_batches(
        self, start_offset: int | None = None, max_offset: int | None = None
    ) -> Iterator[bytes]:
        """Every whole batch from ``start_offset``, as bytes (tools and tests, not hot paths)."""
        offset = self.log_start_offset if start_offset is None else start_offset
        upper = self.log_end_offset if max_offset is None else max_offset
        while offset < upper:
            region = self.read(offset, 1 << 20, max_offset=upper)
            if region is None:
                return
            data = region.read()
            pos = 0
            progressed = False
            while len(data) - pos >= HEADER_SIZE:
                header = read_header(data, pos)
                if pos + header.size > len(data):
                    break
                yield data[pos : pos + header.size]
                offset = header.next_offset
                pos += header.size
                progressed = True
            if not progressed:
                return

    # -- offset lookups ----------------------------------------------------------

    def offset_for_timestamp(
        self, timestamp: int, *, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= ``timestamp``."""
        with self._lock:
            self._check_online()
            upper = self.high_watermark if max_offset is None else max_offset
            try:
                return self._offset_for_timestamp(timestamp, upper)
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: timestamp lookup failed: {exc}") from exc

    def _offset_for_timestamp(self, timestamp: int, upper: int) -> tuple[int, int] | None:
        for segment in list(self._segments):
            if segment.largest_timestamp < timestamp and segment is not self.active_segment:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found if found[0] < upper else None
        return None

    def list_offset(self, timestamp: int) -> tuple[int, int]:
        """ListOffsets semantics: -2 (and -4) earliest, -1 latest (the HW), -3 max
        timestamp, -5 latest tiered (none), or a timestamp. Returns (offset, timestamp);
        (-1, -1) when no record qualifies."""
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return self.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        if timestamp == LATEST_TIMESTAMP:
            return self.high_watermark, -1
        if timestamp == MAX_TIMESTAMP:
            found = self.max_timestamp_offset()
        else:
            found = self.offset_for_timestamp(timestamp)
        return found if found is not None else (-1, -1)

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        with self._lock:
            self._check_online()
            try:
                return self._max_timestamp_offset()
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: timestamp lookup failed: {exc}") from exc

    def _max_timestamp_offset(self) -> tuple[int, int] | None:
        best: tuple[int, int, LogSegment] | None = None
        for segment in self._segments:
            ts, offset = _max_timestamp_of(segment)
            if ts >= 0 and (best is None or ts > best[0]):
                best = (ts, offset, segment)
        if best is None:
            return None
        ts, offset_hint, segment = best
        return segment.offset_of_timestamp_in_batch(offset_hint, ts), ts

    # -- removing data -----------------------------------------------------------

    def delete_records(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (DeleteRecords); -1 means the HW."""
        with self._lock:
            self._check_online()
            target = self.high_watermark if offset == -1 else offset
            if target < 0 or target > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self.name} up to {target}: the high watermark "
                    f"is {self.high_watermark}"
                )
            if target > self.log_start_offset:
                self._advance_log_start(target)
                self._delete_segments_while(
                    lambda _s, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                    "log start offset",
                )
            return self.log_start_offset

    def _advance_log_start(self, offset: int) -> None:
        self.log_start_offset = offset
        self.high_watermark = max(self.high_watermark, offset)
        self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))
        self.first_dirty_offset = max(self.first_dirty_offset, offset)
        self.epochs.truncate_from_start(offset)
        self._flush_epochs()

    def enforce_retention(self) -> int:
        """Delete whole segments past retention.ms or retention.bytes; return how many."""
        with self._lock:
            self._check_online()
            deleted = self._delete_segments_while(
                lambda _s, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                "log start offset",
            )
            if not self.config.delete:
                return deleted
            now = self.clock()
            if self.config.retention_ms >= 0:
                deleted += self._delete_segments_while(
                    lambda s, _n: now - s.largest_timestamp > self.config.retention_ms,
                    "retention.ms",
                )
            if self.config.retention_bytes >= 0:
                excess = self.size_bytes - self.config.retention_bytes

                def over_size(segment: LogSegment, _next: LogSegment | None) -> bool:
                    nonlocal excess
                    if excess - segment.size >= 0:
                        excess -= segment.size
                        return True
                    return False

                deleted += self._delete_segments_while(over_size, "retention.bytes")
            return deleted

    def _delete_segments_while(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], reason: str
    ) -> int:
        doomed: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = nxt.base_offset if nxt is not None else self.log_end_offset
            if nxt is None and segment.size == 0:
                break
            if upper > self.high_watermark or not predicate(segment, nxt):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            # Retention runs on the maintenance thread, beside appends whose batches the
            # partition may not have seen yet: no snapshot of its state from here (the
            # load replays the one new, empty segment instead).
            self._roll(self.log_end_offset, reason, snapshot=False)
        for segment in doomed:
            self._schedule_deletion(segment)
        del self._segments[: len(doomed)]
        del self._base_offsets[: len(doomed)]
        new_start = self._segments[0].base_offset
        if new_start > self.log_start_offset:
            self._advance_log_start(new_start)
        self.snapshots.delete_below(new_start)
        log.info(
            "deleted segments",
            extra={
                "partition": self.name,
                "count": len(doomed),
                "reason": reason,
                "log_start_offset": self.log_start_offset,
            },
        )
        return len(doomed)

    def _schedule_deletion(self, segment: LogSegment) -> None:
        # Renamed now, removed after file.delete.delay.ms, so a FileRegion already handed
        # to the network layer stays readable.
        try:
            segment.rename_for_deletion()
        except OSError as exc:
            raise KafkaStorageError(f"{self.name}: cannot delete segment: {exc}") from exc
        due = self.clock() + self.config.file_delete_delay_ms
        self._pending_deletions.append(_PendingDeletion(segment, due))
        if self.config.file_delete_delay_ms == 0:
            self.purge_deleted_segments()

    def purge_deleted_segments(self) -> int:
        now = self.clock()
        due = [p for p in self._pending_deletions if p.due_ms <= now]
        for pending in due:
            if pending.close_only:
                pending.segment.close_file()
            else:
                pending.segment.delete_files()
        self._pending_deletions = [p for p in self._pending_deletions if p.due_ms > now]
        return len(due)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after ``offset`` (a follower that diverged)."""
        with self._lock:
            self._check_online()
            if offset >= self.log_end_offset:
                # No batch goes, but an epoch that starts at our log end does: we took
                # leadership and wrote nothing in it before being replaced. Kept, it would
                # stay our last epoch, one the new leader never had, and every fetch would
                # be answered with the same DivergingEpoch (Kafka's truncateTo does this too).
                leo = self.log_end_offset
                if self.epochs.entries and self.epochs.entries[-1][1] >= leo:
                    self.epochs.truncate_from_end(leo)
                    self._flush_epochs()
                return 0
            if offset < self.log_start_offset or self._batch_start(offset) < self.log_start_offset:
                # Nothing at or after the log start would survive (whole batches go), so
                # start afresh at the target instead of ending below the log start.
                removed = self.size_bytes
                self.truncate_fully_and_start_at(offset)
                return removed
            removed = 0
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                segment = self._segments.pop()
                self._base_offsets.pop()
                removed += segment.size
                self._schedule_deletion(segment)
            try:
                removed += self.active_segment.truncate_to(offset)
            except OSError as exc:
                self.offline_reason = f"truncation failed: {exc}"
                raise KafkaStorageError(f"{self.name}: truncation failed: {exc}") from exc
            self._after_truncation()
            return removed

    def _batch_start(self, offset: int) -> int:
        """Base offset of the batch holding ``offset`` (or of the next one after a gap)."""
        for i in range(self._segment_index_for(offset), len(self._segments)):
            found = self._segments[i].translate_offset(offset)
            if found is not None:
                return found[0].base_offset
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            for segment in self._segments:
                self._schedule_deletion(segment)
            segment = self._create_active_segment(offset)
            self._segments = [segment]
            self._base_offsets = [offset]
            self.log_start_offset = offset
            self.first_dirty_offset = offset
            self.epochs.clear()
            self._flush_epochs()
            self._after_truncation(snapshots_kept_to=-1)  # none describes the new log

    def _after_truncation(self, snapshots_kept_to: int | None = None) -> None:
        leo = self.log_end_offset
        kept_to = leo if snapshots_kept_to is None else snapshots_kept_to
        try:
            self.snapshots.delete_above(kept_to)
        except OSError as exc:
            self.offline_reason = f"a producer snapshot past the truncation stays: {exc}"
            raise KafkaStorageError(f"{self.name}: {self.offline_reason}") from exc
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.first_dirty_offset = min(self.first_dirty_offset, leo)
        self.epochs.truncate_from_end(leo)
        self._flush_epochs()

    # -- durability --------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment with unwritten data; the recovery point becomes the LEO."""
        with self._lock:
            self._check_online()
            try:
                for segment in self._segments:
                    if segment.unflushed:
                        segment.flush()
            except OSError as exc:
                raise KafkaStorageError(f"{self.name}: flush failed: {exc}") from exc
            self.recovery_point = self.log_end_offset
            self._unflushed_messages = 0
            self._last_flush_ms = self.clock()

    def maybe_flush(self) -> bool:
        """Apply flush.ms; the broker calls this on a timer."""
        with self._lock:
            if self.offline_reason or not self._unflushed_messages:
                return False
            if self.clock() - self._last_flush_ms < self.config.flush_ms:
                return False
            self.flush()
            return True

    def close(self) -> None:
        """Close every file; raise KafkaStorageError at the end if any index write failed.
        A log that is online first snapshots its producers at the log end, so that the
        next load replays nothing."""
        with self._lock:
            if self.offline_reason is None:
                self._snapshot_producers(self.log_end_offset)
            errors: list[str] = []
            for segment in self._segments:
                try:
                    segment.close()
                except OSError as exc:
                    errors.append(f"{segment.log_path.name}: {exc}")
            for pending in self._pending_deletions:
                try:
                    if pending.close_only:
                        pending.segment.close_file()
                    else:
                        pending.segment.delete_files()
                except OSError as exc:
                    errors.append(f"{pending.segment.log_path.name}: {exc}")
            self._pending_deletions.clear()
            if errors:
                raise KafkaStorageError(f"{self.name}: close failed: " + "; ".join(errors))

    def _use_config(self, config: LogConfig) -> None:
        """Take ``config``, with what the append path derives from it, computed once."""
        self.config = config
        self._single_batch_limit = _single_batch_limit(config)
        self._reserve_window = min(RESERVE_WINDOW, config.segment_bytes)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._use_config(config)
            for segment in self._segments:
                segment.index_interval_bytes = config.index_interval_bytes

    def swap_segment(self, old: LogSegment, swap_path: Path) -> None:
        """Replace a closed segment's file by a compacted copy with the same base offset.

        The old file descriptor stays open for file.delete.delay.ms: a region already
        handed out keeps reading the old inode.
        """
        with self._lock:
            i = self._segments.index(old)
            os.replace(swap_path, old.log_path)
            new = LogSegment.open_existing(
                self.directory,
                old.base_offset,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_entries=max(1, self.config.segment_index_bytes // 8),
            )
            new.rebuild_indexes()
            new.txn_index = old.txn_index  # the same file, and what fetches read of it
            self._segments[i] = new
            due = self.clock() + self.config.file_delete_delay_ms
            self._pending_deletions.append(_PendingDeletion(old, due, close_only=True))
            self.purge_deleted_segments()


def _max_timestamp_of(segment: LogSegment) -> tuple[int, int]:
    if segment.max_timestamp_so_far >= 0:
        return segment.max_timestamp_so_far, segment.offset_of_max_timestamp
    last = segment.time_index.last_entry
    if last is None:
        return -1, -1
    return last
