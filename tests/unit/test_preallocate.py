"""Topic config ``preallocate``: appends copy into a shared map of space reserved ahead
(``storage/mapped_tail.py``). A preallocating log must hold exactly the bytes a plain
log holds, serve the same reads while it is open, give the reserved space back whenever
the segment stops being written (roll, truncation, config change, close), and come back
from a crash without mistaking the reserved zeros for data or for damage."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path

from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from partita.storage.mapped_tail import MIN_WINDOW
from tests.faults.helpers import check_contents, crash_close, make_batch, open_manager

PLAIN = LogConfig(
    segment_bytes=2 * 1024 * 1024, max_message_bytes=2 * 1024 * 1024, preallocate=False
)
PREALLOCATED = replace(PLAIN, preallocate=True)


def _batches(seed: int, count: int) -> list[bytes]:
    """Batches from 100 B to 1.5 MB (bigger than the first window), with offsets."""
    rng = random.Random(seed)
    out, offset = [], 0
    for i in range(count):
        if i % 17 == 16:
            batch = make_batch(offset, rng, min_bytes=1_100_000, max_bytes=1_500_000)
        else:
            batch = make_batch(offset, rng, min_bytes=100, max_bytes=60_000)
        out.append(batch)
        offset += int.from_bytes(batch[23:27], "big") + 1  # lastOffsetDelta + 1
    return out


def _append_all(log: PartitionLog, batches: list[bytes]) -> list[int]:
    return [log.append_as_leader(batch, 0).last_offset for batch in batches]


def _reads(log: PartitionLog) -> list[bytes]:
    """Every batch-aligned fetch of the log, as bytes."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1, max_offset=log.log_end_offset)
        assert region is not None
        data = region.read()
        out.append(data)
        offset = region.first_offset + int.from_bytes(data[23:27], "big") + 1
    return out


def _file_bytes(log_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log_dir.glob("*.log"))}


def _reserved_past_end(log: PartitionLog) -> bytes:
    segment = log.active_segment
    data = segment.log_path.read_bytes()
    return data[segment.size :]


def test_preallocated_log_holds_what_a_plain_log_holds(tmp_path: Path) -> None:
    plain_manager = open_manager(tmp_path / "plain", PLAIN)
    mapped_manager = open_manager(tmp_path / "mapped", PREALLOCATED)
    plain = plain_manager.get_or_create("t", 0)
    mapped = mapped_manager.get_or_create("t", 0)
    batches = _batches(1, 150)

    assert _append_all(plain, batches) == _append_all(mapped, batches)
    assert len(mapped.segments) > 2, "the test wants rolled segments"

    # While open, the active file is longer than the log: reserved space, all zeros.
    reserved = _reserved_past_end(mapped)
    assert len(reserved) > 0 and not reserved.strip(b"\0")
    assert plain.active_segment.log_path.stat().st_size == plain.active_segment.size
    # Rolled segments gave their reserved space back at the roll.
    for segment in mapped.segments[:-1]:
        assert segment.log_path.stat().st_size == segment.size
    for log in (plain, mapped):
        log.update_high_watermark(log.log_end_offset)
    assert _reads(mapped) == _reads(plain)

    plain_manager.shutdown()
    mapped_manager.shutdown()
    assert _file_bytes(tmp_path / "mapped" / "t-0") == _file_bytes(tmp_path / "plain" / "t-0")


def test_truncation_and_switching_preallocate_off_leave_no_gap(tmp_path: Path) -> None:
    plain_manager = open_manager(tmp_path / "plain", PLAIN)
    mapped_manager = open_manager(tmp_path / "mapped", PREALLOCATED)
    plain = plain_manager.get_or_create("t", 0)
    mapped = mapped_manager.get_or_create("t", 0)
    batches = _batches(2, 40)
    for log in (plain, mapped):
        _append_all(log, batches[:30])
        log.truncate_to(log.log_end_offset - 20)  # a follower cutting a diverged tail
    assert mapped.active_segment.log_path.stat().st_size == mapped.active_segment.size
    for log in (plain, mapped):
        leo = log.log_end_offset
        rng = random.Random(3)
        for _ in range(5):
            log.append_as_leader(make_batch(leo, rng, max_bytes=20_000), 0)
            leo = log.log_end_offset
    assert len(_reserved_past_end(mapped)) > 0

    # Off at runtime: the space goes back at once and plain writes follow the data
    # (the file is opened O_APPEND: a write after reserved zeros would leave a gap).
    mapped.update_config(PLAIN)
    assert _reserved_past_end(mapped) == b""
    for log in (plain, mapped):
        rng = random.Random(4)
        for _ in range(5):
            log.append_as_leader(make_batch(log.log_end_offset, rng, max_bytes=20_000), 0)
    for log in (plain, mapped):
        log.update_high_watermark(log.log_end_offset)
    assert _reads(mapped) == _reads(plain)
    plain_manager.shutdown()
    mapped_manager.shutdown()
    assert _file_bytes(tmp_path / "mapped" / "t-0") == _file_bytes(tmp_path / "plain" / "t-0")


def test_a_crash_leaves_reserved_zeros_that_recovery_cuts_without_quarantine(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    manager = open_manager(data_dir, PREALLOCATED)
    log = manager.get_or_create("t", 0)
    acked = _append_all(log, _batches(5, 30))
    reserved = len(_reserved_past_end(log))
    assert reserved >= MIN_WINDOW // 2
    # What a kill -9 leaves: the page cache holds everything appended, the files keep
    # their reserved length, no clean-shutdown marker.
    crash_close(manager)
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    crashed = tmp_path / "crashed"
    shutil.copytree(data_dir, crashed)

    manager = LogManager(crashed, lambda _topic: PREALLOCATED)
    manager.startup()
    assert not manager.loaded_cleanly and manager.offline == {}
    log = manager.get("t", 0)
    check_contents(log, acked)
    assert log.log_end_offset == acked[-1] + 1
    assert log.active_segment.log_path.stat().st_size == log.active_segment.size
    assert list((crashed / "t-0").glob("*.corrupt")) == []
    # And it carries on appending (and reserving) right after the last batch.
    rng = random.Random(6)
    more = [
        log.append_as_leader(make_batch(log.log_end_offset, rng), 0).last_offset for _ in range(3)
    ]
    assert len(_reserved_past_end(log)) > 0
    check_contents(log, acked + more)
    manager.shutdown()
