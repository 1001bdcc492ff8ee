"""Damaged ``.index`` and ``.timeindex`` files, of closed and active segments.

Index files are only a cache of the log: whatever state they are found in (gone, cut to
an odd length, overwritten with garbage or zeros, or zero-padded as a preallocated
index is after a crash), reads and timestamp lookups must give the right answers, and
the indexes in use must be consistent with the log (rebuilt when untrustworthy).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from partita.storage.config import LogConfig
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER
from tests.faults.helpers import (
    TOPIC,
    Contents,
    check_contents,
    check_index_files,
    check_loaded_indexes,
    check_offset_reads,
    check_timestamp_lookups,
    fill,
    open_manager,
)

CONFIG = LogConfig(segment_bytes=32 * 1024)

pytestmark = pytest.mark.usefixtures("no_fsync")


def _odd_length(path: Path, _rng: random.Random) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: (len(data) // 2) | 1])


DAMAGE: dict[str, Callable[[Path, random.Random], None]] = {
    "deleted": lambda path, _rng: path.unlink(),
    "odd_length": _odd_length,
    "random_garbage": lambda path, rng: path.write_bytes(rng.randbytes(path.stat().st_size)),
    "zero_filled": lambda path, _rng: path.write_bytes(bytes(path.stat().st_size)),
    "zero_padded": lambda path, _rng: path.write_bytes(path.read_bytes() + bytes(4800)),
}
SUFFIXES = {"index": [".index"], "timeindex": [".timeindex"], "both": [".index", ".timeindex"]}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int], Contents]:
    """A cleanly shut down log of several segments, each with several index entries."""
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    manager = open_manager(data_dir, CONFIG)
    partition_log = manager.get_or_create(TOPIC, 0)
    acked = fill(partition_log, 90, random.Random(3), max_bytes=6000)
    contents = check_contents(partition_log, acked)
    manager.shutdown()
    logs = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    assert len(logs) >= 3
    for log_path in logs:
        assert log_path.with_suffix(".index").stat().st_size >= 16
        assert log_path.with_suffix(".timeindex").stat().st_size >= 24
    return data_dir, acked, contents


def check_everything(data_dir: Path, acked: list[int], expected: Contents) -> None:
    manager = open_manager(data_dir, CONFIG)
    assert manager.offline == {}
    partition_log = manager.get(TOPIC, 0)
    # Timestamp lookups first: a fresh broker may get ListOffsets before any fetch, so
    # before anything else has loaded the indexes of closed segments.
    check_timestamp_lookups(partition_log, expected, samples=15)
    contents = check_contents(partition_log, acked)
    assert contents.log_end_offset == expected.log_end_offset
    check_offset_reads(partition_log, contents)
    check_timestamp_lookups(partition_log, contents, samples=15)
    check_loaded_indexes(partition_log)
    more = fill(partition_log, 8, random.Random(9), max_bytes=6000)
    manager.shutdown()
    check_index_files(data_dir / f"{TOPIC}-0")

    manager = open_manager(data_dir, CONFIG)
    assert manager.loaded_cleanly
    partition_log = manager.get(TOPIC, 0)
    contents = check_contents(partition_log, acked + more)
    check_timestamp_lookups(partition_log, contents, samples=15)
    check_offset_reads(partition_log, contents)
    manager.shutdown()


@pytest.mark.parametrize("clean", [True, False], ids=["clean_shutdown", "crash"])
@pytest.mark.parametrize("files", list(SUFFIXES))
@pytest.mark.parametrize("segments", ["closed", "active"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_index_files_are_rebuilt(
    tmp_path: Path,
    pristine: tuple[Path, list[int], Contents],
    damage: str,
    segments: str,
    files: str,
    clean: bool,
) -> None:
    source, acked, expected = pristine
    data_dir = tmp_path / "data"
    shutil.copytree(source, data_dir)
    logs = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    targets = logs[:-1] if segments == "closed" else logs[-1:]
    rng = random.Random(f"{damage}-{segments}-{files}")
    for log_path in targets:
        for suffix in SUFFIXES[files]:
            DAMAGE[damage](log_path.with_suffix(suffix), rng)
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    check_everything(data_dir, acked, expected)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_time_index_does_not_make_retention_delete_live_data(
    tmp_path: Path, pristine: tuple[Path, list[int], Contents], damage: str
) -> None:
    """Retention by time judges closed segments by their newest timestamp: a damaged
    time index must not make a segment of recent records look ancient."""
    source, acked, expected = pristine
    data_dir = tmp_path / "data"
    shutil.copytree(source, data_dir)
    logs = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    rng = random.Random(damage)
    for log_path in logs[:-1]:
        DAMAGE[damage](log_path.with_suffix(".timeindex"), rng)
    # Every record is younger than this retention (the payload timestamps are from 2020).
    config = replace(CONFIG, retention_ms=20 * 365 * 24 * 3600 * 1000)
    assert max(r.timestamp for r in expected.records) > time.time() * 1000 - config.retention_ms
    manager = open_manager(data_dir, config)
    partition_log = manager.get(TOPIC, 0)
    partition_log.update_high_watermark(partition_log.log_end_offset)
    deleted = partition_log.enforce_retention()
    assert deleted == 0, f"retention.ms deleted {deleted} segments of live records"
    assert partition_log.log_start_offset == 0
    check_contents(partition_log, acked)
    manager.shutdown()
