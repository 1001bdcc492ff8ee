"""Damaged checkpoint files: the data-directory offset checkpoints and the per-partition
``leader-epoch-checkpoint``.

A checkpoint that cannot be parsed must not stop the start-up: the recovery point falls
back to 0 (so an unclean start recovers every segment), the leader-epoch cache is rebuilt
from the batches, and all data stays readable.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from partita.storage.checkpoint import read_epochs, read_offsets
from partita.storage.config import LogConfig
from partita.storage.leader_epochs import LEADER_EPOCH_CHECKPOINT
from partita.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    CLEANER_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from partita.storage.segment import LogSegment, RecoveryResult
from tests.faults.helpers import TOPIC, check_contents, check_loaded_indexes, fill, open_manager

CONFIG = LogConfig(segment_bytes=32 * 1024)
PARTITIONS = (0, 1)

pytestmark = pytest.mark.usefixtures("no_fsync")

GARBAGE: dict[str, bytes] = {
    "binary": random.Random(0).randbytes(300),
    "text": b"this is not a checkpoint\n",
    "empty": b"",
    "version_only": b"0\n",
    "unknown_version": b"9\n0\n",
    "count_mismatch": b"0\n5\nfaults 0 10\n",
    "not_a_number": b"0\n2\nfaults 0 ten\nfaults 1 3\n",
    "missing_field": b"0\n1\nfaults 0\n",
}
EPOCH_GARBAGE: dict[str, bytes | None] = {
    "binary": random.Random(1).randbytes(200),
    "text": b"epochs?\n",
    "empty": b"",
    "version_only": b"0\n",
    "count_mismatch": b"0\n3\n0 0\n",
    "not_a_number": b"0\n1\nzero 0\n",
    "out_of_order": b"0\n2\n5 100\n2 200\n",
    "deleted": None,
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, list[int]]]:
    """Two partitions of several segments each, written under several leader epochs."""
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    manager = open_manager(data_dir, CONFIG)
    rng = random.Random(4)
    acked: dict[int, list[int]] = {}
    for partition in PARTITIONS:
        partition_log = manager.get_or_create(TOPIC, partition)
        acked[partition] = []
        for epoch in (0, 2, 5):
            acked[partition] += fill(partition_log, 20, rng, epoch=epoch, max_bytes=6000)
        partition_log.update_high_watermark(partition_log.log_end_offset)
        assert len(partition_log.segments) >= 3
    manager.shutdown()
    return data_dir, acked


@pytest.fixture
def data_dir(tmp_path: Path, pristine: tuple[Path, dict[int, list[int]]]) -> Path:
    target = tmp_path / "data"
    shutil.copytree(pristine[0], target)
    return target


@pytest.fixture
def recovered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Record (partition directory, base offset) of every segment recovery validates."""
    calls: list[tuple[str, int]] = []
    real = LogSegment.recover

    def spy(segment: LogSegment, first_expected_offset: int) -> RecoveryResult:
        calls.append((segment.directory.name, segment.base_offset))
        return real(segment, first_expected_offset)

    monkeypatch.setattr(LogSegment, "recover", spy)
    yield calls


def check_all(manager: LogManager, acked: dict[int, list[int]]) -> None:
    assert manager.offline == {}
    for partition in PARTITIONS:
        partition_log = manager.get(TOPIC, partition)
        contents = check_contents(partition_log, acked[partition])
        assert contents.log_end_offset == acked[partition][-1] + 1
        assert [e for e, _ in contents.epochs] == [0, 2, 5]
        assert partition_log.epochs.entries == contents.epochs
        check_loaded_indexes(partition_log)


def segment_bases(data_dir: Path, partition: int) -> list[int]:
    return sorted(int(p.stem) for p in (data_dir / f"{TOPIC}-{partition}").glob("*.log"))


def test_intact_recovery_point_limits_recovery_to_the_tail(
    data_dir: Path, pristine: tuple[Path, dict[int, list[int]]], recovered: list[tuple[str, int]]
) -> None:
    """The control case: with a readable recovery point only the last segment is checked,
    so the full recoveries asserted below are the checkpoint's doing."""
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    manager = open_manager(data_dir, CONFIG)
    assert sorted(recovered) == sorted(
        (f"{TOPIC}-{p}", segment_bases(data_dir, p)[-1]) for p in PARTITIONS
    )
    check_all(manager, pristine[1])
    manager.shutdown()


@pytest.mark.parametrize("garbage", list(GARBAGE))
def test_corrupt_recovery_point_checkpoint_means_full_recovery(
    data_dir: Path,
    pristine: tuple[Path, dict[int, list[int]]],
    recovered: list[tuple[str, int]],
    garbage: str,
) -> None:
    (data_dir / RECOVERY_POINT_CHECKPOINT).write_bytes(GARBAGE[garbage])
    (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    manager = open_manager(data_dir, CONFIG)
    assert not manager.loaded_cleanly
    assert sorted(recovered) == sorted(
        (f"{TOPIC}-{p}", base) for p in PARTITIONS for base in segment_bases(data_dir, p)
    ), "every segment must be recovered when the recovery point is unknown"
    check_all(manager, pristine[1])
    manager.shutdown()
    # The next checkpoint replaces the garbage with the real recovery points.
    points = read_offsets(data_dir / RECOVERY_POINT_CHECKPOINT)
    assert points == {(TOPIC, p): pristine[1][p][-1] + 1 for p in PARTITIONS}


@pytest.mark.parametrize("clean", [True, False], ids=["clean_shutdown", "crash"])
@pytest.mark.parametrize("garbage", list(EPOCH_GARBAGE))
def test_corrupt_leader_epoch_checkpoint_is_rebuilt(
    data_dir: Path, pristine: tuple[Path, dict[int, list[int]]], garbage: str, clean: bool
) -> None:
    for partition in PARTITIONS:
        path = data_dir / f"{TOPIC}-{partition}" / LEADER_EPOCH_CHECKPOINT
        content = EPOCH_GARBAGE[garbage]
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content)
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    manager = open_manager(data_dir, CONFIG)
    check_all(manager, pristine[1])
    for partition in PARTITIONS:
        path = data_dir / f"{TOPIC}-{partition}" / LEADER_EPOCH_CHECKPOINT
        assert read_epochs(path) == manager.get(TOPIC, partition).epochs.entries
    manager.shutdown()


@pytest.mark.parametrize("clean", [True, False], ids=["clean_shutdown", "crash"])
def test_every_checkpoint_corrupt_at_once(
    data_dir: Path,
    pristine: tuple[Path, dict[int, list[int]]],
    recovered: list[tuple[str, int]],
    clean: bool,
) -> None:
    rng = random.Random(8)
    for name in (
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_CHECKPOINT,
        HIGH_WATERMARK_CHECKPOINT,
        CLEANER_CHECKPOINT,
    ):
        (data_dir / name).write_bytes(rng.randbytes(64))
    for partition in PARTITIONS:
        (data_dir / f"{TOPIC}-{partition}" / LEADER_EPOCH_CHECKPOINT).write_bytes(b"\xff\xfe")
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    manager = open_manager(data_dir, CONFIG)
    check_all(manager, pristine[1])
    if not clean:
        assert len(recovered) == sum(len(segment_bases(data_dir, p)) for p in PARTITIONS)
    for partition in PARTITIONS:
        partition_log = manager.get(TOPIC, partition)
        assert partition_log.log_start_offset == 0
        fill(partition_log, 3, rng, epoch=7, max_bytes=2000)
    manager.shutdown()
    assert read_offsets(data_dir / RECOVERY_POINT_CHECKPOINT).keys() == {
        (TOPIC, p) for p in PARTITIONS
    }
