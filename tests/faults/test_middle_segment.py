"""A partition whose damage sits in a segment in the middle of its log.

Whether the damaged partition recovers (cut at the bad batch) or cannot be loaded at
all, the other partitions of the data directory must load and work, and a partition
that fails to load must not have its files changed by the attempt.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from partita.errors import KafkaStorageError
from partita.protocol.record_batch import HEADER_SIZE, iter_headers
from partita.storage.config import LogConfig
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER, RECOVERY_POINT_CHECKPOINT
from tests.faults.helpers import (
    TOPIC,
    check_contents,
    check_loaded_indexes,
    file_tree,
    fill,
    flip_byte,
    open_manager,
)

CONFIG = LogConfig(segment_bytes=16 * 1024)
PARTITIONS = (0, 1, 2)
DAMAGED = 1

pytestmark = pytest.mark.usefixtures("no_fsync")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[int]]]:
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    manager = open_manager(data_dir, CONFIG)
    rng = random.Random(31)
    acked = {}
    for partition in PARTITIONS:
        partition_log = manager.get_or_create(TOPIC, partition)
        acked[partition] = fill(partition_log, 50, rng, epoch=partition, max_bytes=5000)
        assert len(partition_log.segments) >= 3
    manager.shutdown()
    return data_dir, acked


@pytest.fixture
def data_dir(tmp_path: Path, pristine: tuple[Path, dict[int, list[int]]]) -> Path:
    target = tmp_path / "data"
    shutil.copytree(pristine[0], target)
    return target


def middle_segment(data_dir: Path) -> tuple[Path, list[Path]]:
    """The damaged partition's middle segment and the segments after it."""
    logs = sorted((data_dir / f"{TOPIC}-{DAMAGED}").glob("*.log"))
    middle = len(logs) // 2
    return logs[middle], logs[middle + 1 :]


def check_others(data_dir: Path, acked: dict[int, list[int]]) -> None:
    """The undamaged partitions load, read, append and survive a restart."""
    manager = open_manager(data_dir, CONFIG)
    try:
        for partition in PARTITIONS:
            if partition == DAMAGED:
                continue
            partition_log = manager.get(TOPIC, partition)
            check_contents(partition_log, acked[partition])
            check_loaded_indexes(partition_log)
            more = fill(partition_log, 2, random.Random(partition), epoch=9, max_bytes=3000)
            check_contents(partition_log, acked[partition] + more)
    finally:
        manager.shutdown()


def test_crc_damage_in_a_middle_segment_cuts_the_log_there(
    data_dir: Path, pristine: tuple[Path, dict[int, list[int]]]
) -> None:
    """No recovery point (a crash before the first checkpoint): every segment is
    checked, the log ends before the damaged batch and the rest is set aside."""
    acked = pristine[1]
    damaged_log, later = middle_segment(data_dir)
    batches = list(iter_headers(damaged_log.read_bytes()))
    position, header = batches[len(batches) // 2]
    flip_byte(damaged_log, position + HEADER_SIZE + header.size // 3)
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    (data_dir / RECOVERY_POINT_CHECKPOINT).unlink()

    manager = open_manager(data_dir, CONFIG)
    assert manager.offline == {}
    partition_log = manager.get(TOPIC, DAMAGED)
    assert partition_log.log_end_offset == header.base_offset
    kept = [o for o in acked[DAMAGED] if o < header.base_offset]
    check_contents(partition_log, kept)
    check_loaded_indexes(partition_log)
    assert damaged_log.stat().st_size == position
    partition_dir = damaged_log.parent
    expected_aside = {f"{damaged_log.name}.{position}.corrupt"} | {
        f"{p.name}.corrupt" for log in later for p in (log, log.with_suffix(".index"))
    }
    aside = {p.name for p in partition_dir.glob("*.corrupt")}
    assert expected_aside <= aside, f"missing set-aside files: {expected_aside - aside}"
    more = fill(partition_log, 3, random.Random(5), epoch=7, max_bytes=3000)
    assert more[0] >= header.base_offset
    check_contents(partition_log, kept + more)
    manager.shutdown()
    check_others(data_dir, acked)


def replace_with_directory(log_path: Path) -> None:
    log_path.rename(log_path.with_name(log_path.name + ".moved"))
    log_path.mkdir()


def replace_with_dangling_symlink(log_path: Path) -> None:
    log_path.unlink()
    log_path.symlink_to(log_path.parent / "gone" / log_path.name)


BREAKAGE = {
    "directory_in_place_of_segment": replace_with_directory,
    "dangling_symlink_segment": replace_with_dangling_symlink,
}


@pytest.mark.parametrize("clean", [True, False], ids=["clean_shutdown", "crash"])
@pytest.mark.parametrize("breakage", list(BREAKAGE))
def test_middle_segment_that_cannot_be_opened_takes_only_its_partition_offline(
    data_dir: Path, pristine: tuple[Path, dict[int, list[int]]], breakage: str, clean: bool
) -> None:
    acked = pristine[1]
    damaged_log, _later = middle_segment(data_dir)
    BREAKAGE[breakage](damaged_log)
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
        (data_dir / RECOVERY_POINT_CHECKPOINT).unlink()
    partition_dir = damaged_log.parent
    before = file_tree(partition_dir)

    manager = open_manager(data_dir, CONFIG)
    name = (TOPIC, DAMAGED)
    if name in manager.offline:
        with pytest.raises(KafkaStorageError):
            manager.get(TOPIC, DAMAGED)
        after = {k: v for k, v in file_tree(partition_dir).items() if not k.endswith("index")}
        assert after == {k: v for k, v in before.items() if not k.endswith("index")}, (
            "a partition that failed to load had its files changed"
        )
    else:
        # Loading lazily is fine too, as long as reaching the broken segment is a
        # storage error (not a crash) and the rest of the log stays readable.
        partition_log = manager.get(TOPIC, DAMAGED)
        with pytest.raises(KafkaStorageError):
            check_contents(partition_log)
        leo = partition_log.log_end_offset
        assert partition_log.read(leo - 1, 1, max_offset=leo) is not None
    assert sorted(manager.logs) == sorted(
        (TOPIC, p) for p in PARTITIONS if p != DAMAGED or name not in manager.offline
    )
    manager.shutdown()
    check_others(data_dir, acked)
    assert os.path.lexists(damaged_log)
