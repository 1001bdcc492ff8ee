"""Log compaction: keep the latest record for each key (cleanup.policy=compact).

Kafka's rules, in brief:
- the active segment and anything at or above the high watermark are never cleaned, nor
  records younger than ``min.compaction.lag.ms``;
- a pass starts when the dirty part (after the cleaner's checkpoint) is at least
  ``min.cleanable.dirty.ratio`` of the cleanable log, or when ``max.compaction.lag.ms``
  has passed for dirty data;
- a record survives if no later record in the dirty part has its key; keyless records
  are dropped;
- a tombstone (null value) survives its first pass, which stamps a delete horizon of
  now + ``delete.retention.ms`` into its batch (KIP-534); a later pass after that horizon
  removes it;
- offsets never change: a rewritten batch keeps its base offset and offset range;
- transactional batches are kept whole and shadow nothing: whether one was committed or
  aborted is known only from its marker, and a record of an aborted transaction must not
  outlive the committed one before it (a group's offset in ``__consumer_offsets`` would
  be lost). Kafka's cleaner removes aborted records instead; partita keeps them, at the
  cost of space on compacted topics written in transactions.

Each segment is rewritten to ``<base>.log.cleaned``, renamed to ``.swap`` when complete,
then swapped in. A crash at any point leaves either the old or the new segment, never a
mix (see the loader).
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass

from partita.protocol.compression import Compression
from partita.protocol.record_batch import iter_headers
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.log import PartitionLog
from partita.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_rewritten: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    first_dirty_offset: int


def cleanable_end(partition_log: PartitionLog) -> int:
    """First offset the cleaner must not touch."""
    active = partition_log.active_segment
    end = min(active.base_offset, partition_log.high_watermark)
    lag = partition_log.config.min_compaction_lag_ms
    if lag > 0:
        now = partition_log.clock()
        for segment in partition_log.segments:
            if segment is not active and now - segment.largest_timestamp < lag:
                end = min(end, segment.base_offset)
                break
    return end


def _closed_segments_below(partition_log: PartitionLog, end: int) -> list[tuple[LogSegment, int]]:
    """(segment, its end offset) for whole segments that end at or before ``end``."""
    segments = partition_log.segments
    out: list[tuple[LogSegment, int]] = []
    for segment, nxt in itertools.pairwise(segments):
        if nxt.base_offset > end:
            break
        out.append((segment, nxt.base_offset))
    return out


def dirty_ratio(partition_log: PartitionLog, end: int) -> float:
    closed = _closed_segments_below(partition_log, end)
    total = sum(s.size for s, _ in closed)
    if total == 0:
        return 0.0
    dirty = sum(s.size for s, seg_end in closed if seg_end > partition_log.first_dirty_offset)
    return dirty / total


def clean_if_needed(partition_log: PartitionLog) -> CleanResult | None:
    end = cleanable_end(partition_log)
    if end <= partition_log.first_dirty_offset:
        return None
    config = partition_log.config
    overdue = False
    if config.max_compaction_lag_ms < 2**62:
        now = partition_log.clock()
        overdue = any(
            seg_end > partition_log.first_dirty_offset
            and now - s.largest_timestamp > config.max_compaction_lag_ms
            for s, seg_end in _closed_segments_below(partition_log, end)
        )
    if not overdue and dirty_ratio(partition_log, end) < config.min_cleanable_dirty_ratio:
        return None
    return clean(partition_log, end)


def clean(partition_log: PartitionLog, end: int | None = None) -> CleanResult:
    """One compaction pass over every closed segment below ``end``."""
    if end is None:
        end = cleanable_end(partition_log)
    closed = _closed_segments_below(partition_log, end)
    first_dirty = partition_log.first_dirty_offset
    latest: dict[bytes, int] = {}
    for segment, seg_end in closed:
        if seg_end <= first_dirty:
            continue
        for record in _records_of(segment):
            if record.key is not None and record.offset >= first_dirty:
                latest[record.key] = record.offset
    now = partition_log.clock()
    horizon = now + partition_log.config.delete_retention_ms
    rewritten = removed = before = after = 0
    for segment, _seg_end in closed:
        before += segment.size
        cleaned, dropped = _filter_segment(segment, latest, now, horizon)
        if cleaned is None:
            after += segment.size
            continue
        _swap_in(partition_log, segment, cleaned)
        after += len(cleaned)
        rewritten += 1
        removed += dropped
    if closed:
        partition_log.first_dirty_offset = max(first_dirty, closed[-1][1])
    log.info(
        "compacted",
        extra={
            "partition": partition_log.name,
            "segments": rewritten,
            "bytes_before": before,
            "bytes_after": after,
            "records_removed": removed,
        },
    )
    return CleanResult(rewritten, before, after, removed, partition_log.first_dirty_offset)


def _records_of(segment: LogSegment) -> list[Record]:
    out: list[Record] = []
    for pos, header in segment.iter_headers(0):
        if header.is_control or header.is_transactional:
            continue  # neither ends nor wins a key (see the module's rules)
        _, records = decode_records(segment.read_batch(pos, header.size))
        out.extend(records)
    return out


def _filter_segment(
    segment: LogSegment, latest: dict[bytes, int], now: int, horizon: int
) -> tuple[bytes | None, int]:
    """The segment's new contents, or None if nothing in it changes."""
    data = segment.read_batch(0, segment.size)
    out = bytearray()
    changed = False
    dropped = 0
    for pos, header in iter_headers(data):
        raw = data[pos : pos + header.size]
        if header.is_control or header.is_transactional:
            out += raw
            continue
        _, records = decode_records(raw)
        horizon_passed = header.has_delete_horizon and now >= header.base_timestamp
        kept = [
            r
            for r in records
            if r.key is not None
            and latest.get(r.key, -1) <= r.offset
            and not (r.value is None and horizon_passed)
        ]
        has_tombstone = any(r.value is None for r in kept)
        needs_horizon = has_tombstone and not header.has_delete_horizon
        if len(kept) == len(records) and not needs_horizon:
            out += raw
            continue
        changed = True
        dropped += len(records) - len(kept)
        if not kept:
            continue
        if has_tombstone:
            batch_horizon = header.base_timestamp if header.has_delete_horizon else horizon
        else:
            batch_horizon = None
        out += build_batch(
            kept,
            base_offset=header.base_offset,
            compression=Compression(header.compression),
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            log_append_time=header.is_log_append_time,
            transactional=header.is_transactional,
            delete_horizon_ms=batch_horizon,
            last_offset_delta=header.last_offset_delta,
        )
    return (bytes(out) if changed else None), dropped


def _swap_in(partition_log: PartitionLog, old: LogSegment, contents: bytes) -> None:
    cleaned_path = old.log_path.with_name(old.log_path.name + CLEANED_SUFFIX)
    swap_path = old.log_path.with_name(old.log_path.name + SWAP_SUFFIX)
    with open(cleaned_path, "wb") as f:
        f.write(contents)
        f.flush()
        os.fsync(f.fileno())
    os.replace(cleaned_path, swap_path)
    partition_log.swap_segment(old, swap_path)
