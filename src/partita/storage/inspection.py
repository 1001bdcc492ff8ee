"""A read-only look at a data directory, for inspection tools (``partita log describe``).

Opening the directory with a LogManager would recover it and write checkpoints and the
clean-shutdown marker: wrong for a tool, and harmful under a live broker. Here every
file is opened read-only, nothing is repaired, and what the broker would repair is
reported instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from partita.errors import CorruptRecordError
from partita.protocol.record_batch import HEADER_SIZE, read_header
from partita.storage.checkpoint import CheckpointCorruptError, read_offsets
from partita.storage.log_manager import (
    DELETE_DIR_SUFFIX,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_CHECKPOINT,
    parse_partition_dir,
)
from partita.storage.segment import LOG_SUFFIX

_WINDOW = 64 * 1024


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int  # as last checkpointed, so behind a live broker's
    log_end_offset: int
    segments: int
    size_bytes: int
    problem: str | None  # what a broker would have to recover, or could not read


@dataclass(frozen=True, slots=True)
class _Tail:
    next_offset: int | None  # None: no complete batch in the segment
    problem: str | None


def summarize(data_dir: Path) -> list[PartitionSummary]:
    """One summary per partition directory, sorted by topic and partition."""
    starts = _read_checkpoint(data_dir / LOG_START_CHECKPOINT)
    high_watermarks = _read_checkpoint(data_dir / HIGH_WATERMARK_CHECKPOINT)
    summaries = []
    for path in sorted(data_dir.iterdir()):
        tp = parse_partition_dir(path.name)
        if tp is None or not path.is_dir() or path.name.endswith(DELETE_DIR_SUFFIX):
            continue
        summaries.append(_summarize_partition(path, tp, starts, high_watermarks))
    return sorted(summaries, key=lambda s: (s.topic, s.partition))


def _summarize_partition(
    directory: Path,
    tp: tuple[str, int],
    starts: dict[tuple[str, int], int],
    high_watermarks: dict[tuple[str, int], int],
) -> PartitionSummary:
    topic, partition = tp
    try:
        segments = sorted(
            (int(p.stem), p.stat().st_size)
            for p in directory.glob(f"*{LOG_SUFFIX}")
            if len(p.stem) == 20 and p.stem.isdigit()
        )
    except OSError as exc:
        return PartitionSummary(topic, partition, 0, 0, 0, 0, 0, f"cannot list: {exc}")
    if not segments:
        return PartitionSummary(topic, partition, 0, 0, 0, 0, 0, "no segment files")
    size = sum(s for _base, s in segments)
    last_base, last_size = segments[-1]
    last_path = directory / f"{last_base:020d}{LOG_SUFFIX}"
    try:
        tail = _scan_tail(last_path, last_size)
    except OSError as exc:
        tail = _Tail(None, f"cannot read {last_path.name}: {exc.strerror or exc}")
    log_end = tail.next_offset if tail.next_offset is not None else last_base
    log_start = min(max(starts.get(tp, 0), segments[0][0]), log_end)
    high_watermark = min(high_watermarks.get(tp, 0), log_end)
    return PartitionSummary(
        topic, partition, log_start, high_watermark, log_end, len(segments), size, tail.problem
    )


def _scan_tail(path: Path, size: int) -> _Tail:
    """Walk the batch headers of a segment, a window at a time, to its last complete
    batch. A live broker may be appending: a batch cut by the end of the file is then
    one being written, and reported as bytes after the last complete batch."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        pos = 0
        next_offset: int | None = None
        window, window_start = b"", 0
        while pos + HEADER_SIZE <= size:
            if pos + HEADER_SIZE > window_start + len(window):
                # After a batch bigger than the window the next is likely big too: read
                # its header only, not a window of data to skip.
                want = HEADER_SIZE if pos - window_start > _WINDOW else _WINDOW
                window, window_start = os.pread(fd, min(want, size - pos), pos), pos
                if len(window) < HEADER_SIZE:
                    break
            try:
                header = read_header(window, pos - window_start)
            except CorruptRecordError as exc:
                return _Tail(next_offset, f"invalid batch at byte {pos}: {exc}")
            if pos + header.size > size:
                break
            next_offset = header.next_offset
            pos += header.size
    finally:
        os.close(fd)
    problem = None
    if pos < size:
        problem = f"{size - pos} bytes after the last complete batch in {path.name}"
    return _Tail(next_offset, problem)


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return read_offsets(path)
    except (CheckpointCorruptError, OSError):
        return {}
