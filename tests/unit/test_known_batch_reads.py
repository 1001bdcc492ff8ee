"""A fetch that the offset index can answer alone (``OffsetIndex.known_batch``) must give
the same region as the scan of batch headers that a reloaded log, whose index knows no
batch ends or base offsets, has to do: for every offset, including gaps a compaction
leaves between batches."""

from __future__ import annotations

import os
from pathlib import Path

from partita.protocol.records import Record, build_batch
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager


def _regions(data_dir: Path, leo: int) -> list[tuple[int, int, int]]:
    manager = LogManager(data_dir, lambda _topic: LogConfig(index_interval_bytes=1024))
    manager.startup()
    log = manager.get_or_create("t", 0)
    regions = []
    for offset in range(log.log_start_offset, leo):
        region = log.read(offset, 5000, max_offset=leo)
        assert region is not None
        regions.append((region.first_offset, region.position, region.length))
    manager.shutdown()
    return regions


def test_index_answered_reads_match_header_scans(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, lambda _topic: LogConfig(index_interval_bytes=1024))
    manager.startup()
    log = manager.get_or_create("t", 0)
    # Big batches (indexed, each one) between runs of small ones (not all indexed).
    for round_ in range(6):
        records = 3 if round_ % 2 else 1
        size = 2000 if round_ % 2 else 40
        for _ in range(4):
            batch = build_batch([Record(i, 1_000, None, os.urandom(size)) for i in range(records)])
            log.append_as_leader(batch, leader_epoch=0)
    leo = log.log_end_offset
    log.update_high_watermark(leo)
    live = []
    for offset in range(leo):
        region = log.read(offset, 5000, max_offset=leo)
        assert region is not None
        live.append((region.first_offset, region.position, region.length))
    hits = sum(
        log.active_segment.offset_index.known_batch(offset) is not None for offset in range(leo)
    )
    manager.shutdown()
    assert hits > leo // 3  # the index answered most big-batch offsets itself
    assert live == _regions(tmp_path, leo)
