"""A full disk, for real: the data directory lives on a 2 MiB tmpfs.

Appends that do not fit must fail with KafkaStorageError and leave the log exactly as it
was (no partial batch, same log end offset); everything written before stays readable,
other partitions keep serving reads, and appends work again once space is freed.
"""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from partita.errors import KafkaStorageError
from partita.protocol.records import build_batch
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from tests.faults.helpers import (
    TOPIC,
    check_contents,
    check_index_files,
    check_loaded_indexes,
    fill,
    make_batch,
    open_manager,
    records_for,
)

TMPFS_SIZE = "2m"
CONFIG = LogConfig(segment_bytes=512 * 1024)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill up (needs root): {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_disk(path: Path) -> None:
    """Write ``path`` until not even one more byte fits on its file system."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (64 * 1024, 4096, 512, 64, 8, 1):
            while True:
                try:
                    if os.write(fd, b"\xaa" * chunk) < chunk:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    assert os.statvfs(path.parent).f_bavail == 0


def assert_files_match_accounting(partition_log: PartitionLog) -> None:
    for segment in partition_log.segments:
        on_disk = segment.log_path.stat().st_size
        assert on_disk == segment.size, (
            f"{segment.log_path.name} holds {on_disk} bytes, the segment accounts for "
            f"{segment.size}: a failed append left bytes behind"
        )


def test_append_on_a_full_disk_fails_cleanly_and_recovers(tmpfs: Path) -> None:
    rng = random.Random(11)
    data_dir = tmpfs / "data"
    manager = open_manager(data_dir, CONFIG)
    try:
        other = manager.get_or_create(TOPIC, 1)
        other_acked = fill(other, 20, rng, max_bytes=8000)
        victim = manager.get_or_create(TOPIC, 0)
        filler = tmpfs / "filler"
        filler.write_bytes(os.urandom(600 * 1024))

        acked: list[int] = []
        failure: BaseException | None = None
        for _ in range(2000):
            leo_before = victim.log_end_offset
            batch = make_batch(leo_before, rng, min_bytes=1000)
            try:
                acked.append(victim.append_as_leader(batch, 0).last_offset)
            except Exception as exc:  # the type is what is being tested
                failure = exc
                break
        assert failure is not None, "the disk never filled up"
        assert isinstance(failure, KafkaStorageError), f"got {failure!r}"
        assert os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize < 128 * 1024
        assert victim.log_end_offset == leo_before
        assert victim.offline_reason is None, "a cleanly failed append must not take it offline"
        assert_files_match_accounting(victim)

        # Still full: another attempt fails the same way and changes nothing.
        with pytest.raises(KafkaStorageError):
            victim.append_as_leader(make_batch(leo_before, rng, min_bytes=32 * 1024), 0)
        assert victim.log_end_offset == leo_before
        assert_files_match_accounting(victim)

        # Everything acknowledged reads back; so does the other partition.
        check_contents(victim, acked)
        check_contents(other, other_acked)
        check_loaded_indexes(other)

        # Free space: appends work again, right after the last good offset.
        filler.unlink()
        more = fill(victim, 5, rng, max_bytes=8000)
        assert more[0] >= leo_before and victim.log_end_offset == more[-1] + 1
        other_more = fill(other, 3, rng, max_bytes=8000)
        check_contents(victim, acked + more)
        check_loaded_indexes(victim)
    finally:
        with contextlib.suppress(Exception):
            manager.shutdown()

    manager = open_manager(data_dir, CONFIG)
    assert manager.loaded_cleanly and manager.offline == {}
    check_contents(manager.get(TOPIC, 0), acked + more)
    check_contents(manager.get(TOPIC, 1), other_acked + other_more)
    manager.shutdown()
    check_index_files(data_dir / f"{TOPIC}-0")


def arrange_slack(partition_log: PartitionLog, rng: random.Random, wanted: int) -> list[int]:
    """Append until the last page of the active .log file has ``wanted`` free bytes: a
    small append then needs no new block, while any new file on the full disk does."""
    acked: list[int] = []
    while (-partition_log.active_segment.size) % 4096 < wanted:
        acked += fill(partition_log, 1, rng, min_bytes=900, max_bytes=1100)
    return acked


def small_batch(offset: int) -> bytes:
    return build_batch(records_for(offset, 1, 20), base_offset=offset)


@pytest.mark.parametrize("cause", ["new_leader_epoch", "flush_every_message"])
def test_append_that_reports_a_full_disk_leaves_no_data_behind(tmpfs: Path, cause: str) -> None:
    """An append that raises must not have appended anything (or the partition must go
    offline): a producer told "failed" retries, and a batch left in the log anyway is
    then duplicated. Here the batch itself fits in the slack of the .log file's last
    block, but what the append writes next does not: the leader-epoch checkpoint of a
    new epoch, or (flush.messages=1) the first entry of the segment's offset index."""
    rng = random.Random(12)
    data_dir = tmpfs / "data"
    flush_messages = 1 if cause == "flush_every_message" else CONFIG.flush_messages
    manager = open_manager(data_dir, replace(CONFIG, flush_messages=flush_messages))
    try:
        partition_log = manager.get_or_create(TOPIC, 0)
        acked = fill(partition_log, 5, rng, epoch=0, max_bytes=8000)
        if cause == "new_leader_epoch":
            epoch = 1
            acked += arrange_slack(partition_log, rng, wanted=600)
            fill_disk(tmpfs / "filler")
            # Control: the same epoch needs no new block, so this append succeeds.
            control = small_batch(partition_log.log_end_offset)
            acked.append(partition_log.append_as_leader(control, 0).last_offset)
        else:
            epoch = 0
            partition_log.roll()
            # A first batch over index.interval.bytes: the next append adds the first
            # entry to an index file that is still empty, so it needs a new block.
            leo = partition_log.log_end_offset
            big = build_batch(records_for(leo, 1, 5000), base_offset=leo)
            acked.append(partition_log.append_as_leader(big, 0).last_offset)
            assert partition_log.active_segment.index_path.stat().st_size == 0
            assert (-partition_log.active_segment.size) % 4096 > 1000
            fill_disk(tmpfs / "filler")

        leo = partition_log.log_end_offset
        size = partition_log.active_segment.size
        try:
            info = partition_log.append_as_leader(small_batch(leo), epoch)
        except KafkaStorageError as exc:
            assert partition_log.offline_reason is not None or (
                partition_log.log_end_offset == leo and partition_log.active_segment.size == size
            ), (
                f"the append failed ({exc}) yet the batch stayed in the log: LEO {leo} -> "
                f"{partition_log.log_end_offset}, and the partition is still online"
            )
        else:
            acked.append(info.last_offset)
        if partition_log.offline_reason is None:
            check_contents(partition_log, acked)
            assert partition_log.epochs.entries == check_contents(partition_log).epochs
    finally:
        (tmpfs / "filler").unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            manager.shutdown()


def test_shutdown_on_a_full_disk(tmpfs: Path) -> None:
    """Stopping with a full disk may fail to write checkpoints, but must not blow up with
    a raw OSError half-way (leaving partitions unclosed); the data must survive it."""
    rng = random.Random(13)
    data_dir = tmpfs / "data"
    manager = open_manager(data_dir, CONFIG)
    acked = {p: fill(manager.get_or_create(TOPIC, p), 10, rng, max_bytes=8000) for p in (0, 1)}
    fill_disk(tmpfs / "filler")
    try:
        manager.shutdown()
    except KafkaStorageError:
        pass  # a storage error is a fair answer; a bare OSError is not
    except OSError as exc:
        pytest.fail(f"LogManager.shutdown() leaked {exc!r} on a full disk")
    finally:
        (tmpfs / "filler").unlink()
        for partition_log in manager:
            partition_log.close()
    manager = open_manager(data_dir, CONFIG)
    assert manager.offline == {}
    for partition, offsets in acked.items():
        check_contents(manager.get(TOPIC, partition), offsets)
    manager.shutdown()
