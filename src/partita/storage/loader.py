"""Opening a partition directory: finishing interrupted file operations, recovering the
unflushed tail after a crash, and restoring the leader-epoch cache."""

from __future__ import annotations

import logging
from pathlib import Path

from partita.errors import CorruptRecordError
from partita.storage.config import LogConfig
from partita.storage.leader_epochs import LeaderEpochCache
from partita.storage.log import Clock, PartitionLog, wall_clock_ms
from partita.storage.segment import (
    CLEANED_SUFFIX,
    CORRUPT_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from partita.storage.txn_index import TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)


def _is_segment_name(stem: str) -> bool:
    return len(stem) == 20 and stem.isdigit()


def finish_interrupted_operations(directory: Path) -> None:
    """Kafka's rules for files left by a crash mid-operation.

    ``.deleted`` files were already removed from the log: finish deleting them.
    ``.cleaned`` files are a half-written compaction: discard them.
    ``.swap`` files are a finished compaction not yet swapped in: swap them in, and
    drop the old indexes so they are rebuilt for the new contents.
    """
    for path in directory.iterdir():
        name = path.name
        if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
            path.unlink(missing_ok=True)
    for path in directory.iterdir():
        if path.name.endswith(SWAP_SUFFIX):
            final = path.with_name(path.name[: -len(SWAP_SUFFIX)])
            path.replace(final)
            if final.suffix == LOG_SUFFIX:
                for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    final.with_suffix(suffix).unlink(missing_ok=True)
    for path in directory.iterdir():
        is_index = path.suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        if is_index and _is_segment_name(path.stem) and not path.with_suffix(LOG_SUFFIX).exists():
            path.unlink()


def open_partition_log(
    directory: Path,
    topic: str,
    partition: int,
    config: LogConfig,
    *,
    clean_shutdown: bool,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    high_watermark: int = 0,
    clock: Clock = wall_clock_ms,
) -> PartitionLog:
    directory.mkdir(parents=True, exist_ok=True)
    finish_interrupted_operations(directory)
    max_entries = max(1, config.segment_index_bytes // 8)
    base_offsets = sorted(
        int(p.stem) for p in directory.glob(f"*{LOG_SUFFIX}") if _is_segment_name(p.stem)
    )
    segments = [
        LogSegment.open_existing(
            directory,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_entries=max_entries,
        )
        for base in base_offsets
    ]
    if not segments:
        segments = [
            LogSegment.create(
                directory,
                log_start_offset,
                index_interval_bytes=config.index_interval_bytes,
                max_index_entries=max_entries,
                created_ms=clock(),
            )
        ]
        clean_shutdown = True
    epochs, epochs_trusted = LeaderEpochCache.load(directory)

    if clean_shutdown:
        try:
            segments[-1].load_tail_state()
        except CorruptRecordError as exc:
            log.warning(
                "active segment is damaged despite a clean shutdown; recovering it",
                extra={"partition": f"{topic}-{partition}", "error": str(exc)},
            )
            clean_shutdown = False
            recovery_point = min(recovery_point, segments[-1].base_offset)

    if not clean_shutdown:
        segments, recovered_epochs = _recover(directory, topic, partition, segments, recovery_point)
        if epochs_trusted:
            for epoch, offset in recovered_epochs:
                epochs.assign(epoch, offset)

    if not epochs_trusted:
        epochs.clear()
        for segment in segments:
            for _pos, header in segment.iter_headers(0):
                epochs.assign(header.partition_leader_epoch, header.base_offset)

    leo = segments[-1].next_offset
    start = max(log_start_offset, segments[0].base_offset)
    start = min(start, leo)
    epochs.truncate_from_end(leo)
    epochs.truncate_from_start(start)
    epochs.flush()
    for segment in segments:
        # Loading read them; nothing needs them open until a fetch or an append does.
        segment.close_file()
    return PartitionLog(
        directory,
        topic,
        partition,
        config,
        segments,
        epochs,
        log_start_offset=start,
        recovery_point=min(recovery_point, leo),
        high_watermark=high_watermark,
        clock=clock,
    )


def _recover(
    directory: Path, topic: str, partition: int, segments: list[LogSegment], recovery_point: int
) -> tuple[list[LogSegment], list[tuple[int, int]]]:
    """Validate every batch from the segment holding the recovery point to the end."""
    name = f"{topic}-{partition}"
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first = i
    expected = segments[first].base_offset
    epochs: list[tuple[int, int]] = []
    for i in range(first, len(segments)):
        segment = segments[i]
        result = segment.recover(expected)
        epochs.extend(result.epochs)
        expected = segment.next_offset
        if result.truncated_bytes:
            log.warning(
                "truncated an invalid log tail during recovery; the cut bytes are kept in a "
                ".corrupt file",
                extra={
                    "partition": name,
                    "segment": segment.log_path.name,
                    "valid_bytes": result.valid_bytes,
                    "truncated_bytes": result.truncated_bytes,
                    "reason": result.error,
                },
            )
            for later in segments[i + 1 :]:
                later.close()
                for path in later.all_paths():
                    if path.exists():
                        path.rename(path.with_name(path.name + CORRUPT_SUFFIX))
                log.warning(
                    "set aside a segment that follows the invalid tail",
                    extra={"partition": name, "segment": later.log_path.name},
                )
            segments = segments[: i + 1]
            break
    return segments, epochs
