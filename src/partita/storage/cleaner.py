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
- transactions: cleaning stops before the earliest open transaction (the first unstable
  offset), so every transactional batch it meets has a known outcome. An aborted
  transaction's batches (the segments' ``.txnindex`` entries say which) are removed and
  win no key; a committed transaction's records are compacted like any other;
- a transaction marker is removed once none of its transaction's batches is left: the
  first such pass stamps a delete horizon of now + ``delete.retention.ms`` into it, as for
  a tombstone, and a pass after that horizon removes it (and its ``.txnindex`` entry), so
  that a reader that saw the transaction's records has that long to see its end.

Each segment is rewritten to ``<base>.log.cleaned``, renamed to ``.swap`` when complete,
then swapped in. A crash at any point leaves either the old or the new segment, never a
mix (see the loader).
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, field

from partita.protocol.aborted_batches import AbortedFilter, aborted_filter
from partita.protocol.compression import Compression
from partita.protocol.record_batch import BatchHeader, iter_headers
from partita.protocol.records import Record, build_batch, decode_records, empty_batch
from partita.storage.log import PartitionLog
from partita.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment
from partita.storage.txn_index import AbortedTxn

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
    unstable = partition_log.first_unstable_offset()
    if unstable is not None:
        end = min(end, unstable)
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
    aborted = partition_log.aborted_txns()
    dirty = [segment for segment, seg_end in closed if seg_end > first_dirty]
    latest: dict[bytes, int] = {}
    if dirty:
        walk = _aborted_from(aborted, dirty[0].base_offset)
        for segment in dirty:
            for record in _records_of(segment, walk):
                if record.key is not None and record.offset >= first_dirty:
                    latest[record.key] = record.offset
    now = partition_log.clock()
    horizon = now + partition_log.config.delete_retention_ms
    rewritten = removed = before = after = 0
    pass_state = _Pass(
        latest,
        _aborted_from(aborted, closed[0][0].base_offset if closed else end),
        now,
        horizon,
        _last_batches(partition_log),
    )
    for segment, _seg_end in closed:
        before += segment.size
        cleaned, dropped = _filter_segment(segment, pass_state)
        if cleaned is None:
            after += segment.size
            continue
        entries = segment.txn_index.entries()
        _swap_in(partition_log, segment, cleaned)
        # A marker removed takes its abort's .txnindex entry with it.
        kept = [e for e in entries if e.last_offset not in pass_state.markers_removed]
        if kept != entries:
            segment.txn_index.replace(kept)  # the file beside the swapped-in segment
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


def _aborted_from(entries: list[AbortedTxn], start: int) -> AbortedFilter | None:
    """The aborted transactions a walk from ``start`` in offset order can meet, as the
    filter a read_committed reader uses (protocol/aborted_batches.py); None: none."""
    return aborted_filter(
        (e.producer_id, e.first_offset) for e in entries if e.last_offset >= start
    )


def _is_aborted(walk: AbortedFilter | None, batch: memoryview, header: BatchHeader) -> bool:
    """Fed every batch of the walk in order (markers too: an ABORT ends its transaction)."""
    return walk is not None and walk.drops(batch, 0, header)


def _records_of(segment: LogSegment, walk: AbortedFilter | None) -> list[Record]:
    """The records that can win a key: neither markers nor aborted transactions'."""
    out: list[Record] = []
    for pos, header in segment.iter_headers(0):
        batch = memoryview(segment.read_batch(pos, header.size))
        if _is_aborted(walk, batch, header) or header.is_control:
            continue
        _, records = decode_records(batch)
        out.extend(records)
    return out


def _last_batches(partition_log: PartitionLog) -> set[int]:
    """Base offsets of each producer's last data batch in the log (headers only)."""
    last: dict[int, int] = {}
    for segment in partition_log.segments:
        for _pos, header in segment.iter_headers(0):
            if header.producer_id >= 0 and not header.is_control:
                last[header.producer_id] = header.base_offset
    return set(last.values())


@dataclass
class _Pass:
    """What one pass knows as it walks the closed segments in order."""

    latest: dict[bytes, int]  # key -> offset of its latest record
    aborted: AbortedFilter | None  # walks every closed segment's batches in order
    now: int
    horizon: int  # a delete horizon stamped in this pass
    # Each producer's last data batch stays, as an empty batch when none of its records
    # does: replaying the log after a restart must find the producer's last sequence (as
    # Kafka's cleaner keeps the last batch of each active producer).
    last_batches: set[int]
    # Producer id -> whether its current transaction still has a batch (a marker ends it).
    transaction_kept: dict[int, bool] = field(default_factory=dict)
    markers_removed: set[int] = field(default_factory=set)


def _filter_segment(segment: LogSegment, state: _Pass) -> tuple[bytes | None, int]:
    """The segment's new contents, or None if nothing in it changes."""
    data = memoryview(segment.read_batch(0, segment.size))
    out = bytearray()
    changed = False
    dropped = 0
    for pos, header in iter_headers(data):
        raw = data[pos : pos + header.size]
        aborted = _is_aborted(state.aborted, raw, header)
        if header.is_control:
            kept_marker = _filter_marker(header, raw, state)
            if kept_marker is not raw:
                changed = True
                if kept_marker is None:
                    dropped += 1
                    state.markers_removed.add(header.base_offset)
                    continue
            out += kept_marker
            continue
        last = header.base_offset in state.last_batches
        if header.is_transactional:
            # Set below once a batch of the transaction stays: its marker must stay too.
            state.transaction_kept.setdefault(header.producer_id, False)
        if aborted:  # only a producer's last batch stays, emptied
            if last:
                state.transaction_kept[header.producer_id] = True
                out += empty_batch(header) if header.records_count else raw
            if header.records_count:
                changed = True
                dropped += header.records_count
            continue
        _, records = decode_records(raw)
        horizon_passed = header.has_delete_horizon and state.now >= header.base_timestamp
        kept = [
            r
            for r in records
            if r.key is not None
            and state.latest.get(r.key, -1) <= r.offset
            and not (r.value is None and horizon_passed)
        ]
        if header.is_transactional and (kept or last):
            state.transaction_kept[header.producer_id] = True
        has_tombstone = any(r.value is None for r in kept)
        needs_horizon = has_tombstone and not header.has_delete_horizon
        if len(kept) == len(records) and not needs_horizon:
            out += raw
            continue
        changed = True
        dropped += len(records) - len(kept)
        if not kept:
            if last:  # the producer's last batch: its header stays, or replay forgets it
                out += empty_batch(header)
            continue
        if has_tombstone:
            batch_horizon = header.base_timestamp if header.has_delete_horizon else state.horizon
        else:
            batch_horizon = None
        out += _rebuilt(header, kept, batch_horizon)
    return (bytes(out) if changed else None), dropped


def _filter_marker(header: BatchHeader, raw: memoryview, state: _Pass) -> memoryview | bytes | None:
    """A transaction marker as it stays (``raw`` itself when unchanged, a copy with a
    delete horizon stamped, or None: removed). It goes only when none of its
    transaction's batches is left and its delete horizon has passed."""
    if not header.is_transactional:
        return raw
    if state.transaction_kept.pop(header.producer_id, False):
        return raw  # records of its transaction remain: readers need its verdict
    if header.has_delete_horizon:
        return None if state.now >= header.base_timestamp else raw
    return _rebuilt(header, decode_records(raw)[1], state.horizon)


def _rebuilt(header: BatchHeader, records: list[Record], delete_horizon_ms: int | None) -> bytes:
    """``header``'s batch holding ``records`` only, its offsets and producer kept."""
    return build_batch(
        records,
        base_offset=header.base_offset,
        compression=Compression(header.compression),
        partition_leader_epoch=header.partition_leader_epoch,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        log_append_time=header.is_log_append_time,
        transactional=header.is_transactional,
        control=header.is_control,
        delete_horizon_ms=delete_horizon_ms,
        last_offset_delta=header.last_offset_delta,
    )


def _swap_in(partition_log: PartitionLog, old: LogSegment, contents: bytes) -> None:
    cleaned_path = old.log_path.with_name(old.log_path.name + CLEANED_SUFFIX)
    swap_path = old.log_path.with_name(old.log_path.name + SWAP_SUFFIX)
    with open(cleaned_path, "wb") as f:
        f.write(contents)
        f.flush()
        os.fsync(f.fileno())
    os.replace(cleaned_path, swap_path)
    partition_log.swap_segment(old, swap_path)
