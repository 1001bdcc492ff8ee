"""A fetch that the offset index can answer alone (``OffsetIndex.known_batch``) must give
the same region as the scan of batch headers that a reloaded log, whose index knows no
batch ends or base offsets, has to do: for every offset, including offsets that fall in a
gap between batches (a compacted leader's log has them, and followers copy it)."""

from __future__ import annotations

import os
from pathlib import Path

from partita.protocol.records import Record, build_batch
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager

_CONFIG = LogConfig(index_interval_bytes=1024)


def _open(data_dir: Path) -> tuple[LogManager, PartitionLog]:
    manager = LogManager(data_dir, lambda _topic: _CONFIG)
    manager.startup()
    return manager, manager.get_or_create("t", 0)


def _read_all(log: PartitionLog, leo: int) -> list[tuple[int, int, int]]:
    regions = []
    for offset in range(log.log_start_offset, leo):
        region = log.read(offset, 5000, max_offset=leo)
        assert region is not None
        regions.append((region.first_offset, region.position, region.length))
    return regions


def _batches() -> list[tuple[int, int]]:
    """(records, value size): big batches (each indexed) between runs of small ones (not
    all indexed)."""
    return [(3, 2000) if round_ % 2 else (1, 40) for round_ in range(6) for _ in range(4)]


def test_index_answered_reads_match_header_scans(tmp_path: Path) -> None:
    manager, log = _open(tmp_path)
    for records, size in _batches():
        batch = build_batch([Record(i, 1_000, None, os.urandom(size)) for i in range(records)])
        log.append_as_leader(batch, leader_epoch=0)
    leo = log.log_end_offset
    log.update_high_watermark(leo)
    live = _read_all(log, leo)
    index = log.active_segment.offset_index
    hits = sum(index.known_batch(offset) is not None for offset in range(leo))
    manager.shutdown()
    assert hits > leo // 3  # the index answered most big-batch offsets itself
    manager, reloaded = _open(tmp_path)
    index = reloaded.active_segment.offset_index
    assert not any(index.known_batch(offset) for offset in range(leo))  # loaded: no ends
    assert live == _read_all(reloaded, leo)
    # Reading learned each indexed batch's base and end from its header: the index
    # answers again, and what it answers is what the scans found.
    assert sum(index.known_batch(offset) is not None for offset in range(leo)) == hits
    assert live == _read_all(reloaded, leo)
    manager.shutdown()


def test_offsets_in_gaps_between_batches_read_the_next_batch(tmp_path: Path) -> None:
    manager, log = _open(tmp_path)
    base = 0
    gap_offsets: list[int] = []
    for records, size in _batches():
        batch = build_batch(
            [Record(base + i, 1_000, None, os.urandom(size)) for i in range(records)],
            base_offset=base,
            partition_leader_epoch=0,
        )
        log.append_as_follower(batch)
        gap_offsets += range(base + records, base + records + 5)
        base += records + 5  # five offsets that no batch holds
    leo = log.log_end_offset
    log.update_high_watermark(leo)
    live = _read_all(log, leo)
    manager.shutdown()
    manager, reloaded = _open(tmp_path)
    assert live == _read_all(reloaded, leo)
    manager.shutdown()
    # A gap offset reads from the batch after the gap.
    firsts = dict(zip(range(leo), (region[0] for region in live), strict=True))
    assert all(firsts[offset] > offset for offset in gap_offsets if offset < leo)
    assert len(gap_offsets) > 100
