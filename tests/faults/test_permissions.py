"""Files the broker may not read, for real: a child process drops to uid 65534 (root,
whom the tests run as, ignores permissions) and opens a data directory in which some
partition directory or segment belongs to root with mode 700/600.

The unreadable partition must go offline alone, with lm.get() raising
KafkaStorageError, while the others load, read and append; reads of an unreadable
segment must fail with KafkaStorageError, not a bare PermissionError.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partita.storage.config import LogConfig
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER
from tests.faults.helpers import REPO_ROOT, TOPIC, check_contents, fill, open_manager

NOBODY = 65534
CONFIG = LogConfig(segment_bytes=32 * 1024)  # the child uses the same
PARTITIONS = (0, 1, 2)
LOCKED = 1

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges")


@pytest.fixture
def base_dir() -> Iterator[Path]:
    """A directory uid 65534 can reach (pytest's tmp_path sits under a 0700 directory)."""
    base = Path(tempfile.mkdtemp(prefix="partita-perms-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def chown_tree(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, uid)


def build(data_dir: Path) -> tuple[dict[int, list[int]], int, int]:
    """Three partitions of several segments; the LOCKED one has a log start offset
    moved by DeleteRecords and a high watermark. Returns (acked, its LSO, its HW)."""
    manager = open_manager(data_dir, CONFIG)
    rng = random.Random(21)
    acked = {}
    for partition in PARTITIONS:
        partition_log = manager.get_or_create(TOPIC, partition)
        acked[partition] = fill(partition_log, 40, rng, max_bytes=6000)
        partition_log.update_high_watermark(partition_log.log_end_offset)
        assert len(partition_log.segments) >= 2
    locked = manager.get(TOPIC, LOCKED)
    log_start = locked.delete_records(acked[LOCKED][3] + 1)
    assert locked.segments[0].base_offset < log_start, "the LSO must sit inside a segment"
    high_watermark = locked.high_watermark
    manager.shutdown()
    acked[LOCKED] = [o for o in acked[LOCKED] if o >= log_start]
    return acked, log_start, high_watermark


def open_as_nobody(data_dir: Path) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.open_as_nobody", str(data_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["uid"] == NOBODY
    return report


def lock_partition(data_dir: Path) -> Path:
    chown_tree(data_dir, NOBODY)
    locked_dir = data_dir / f"{TOPIC}-{LOCKED}"
    chown_tree(locked_dir, 0)
    locked_dir.chmod(0o700)
    return locked_dir


def unlock(data_dir: Path, locked_dir: Path) -> None:
    chown_tree(data_dir, 0)
    locked_dir.chmod(0o755)


@pytest.mark.parametrize("clean", [True, False], ids=["clean_shutdown", "crash"])
def test_unreadable_partition_goes_offline_alone(base_dir: Path, clean: bool) -> None:
    data_dir = base_dir / "data"
    acked, _log_start, _hw = build(data_dir)
    if not clean:
        (data_dir / CLEAN_SHUTDOWN_MARKER).unlink()
    locked_dir = lock_partition(data_dir)

    report = open_as_nobody(data_dir)
    locked_name = locked_dir.name
    assert report["startup"] == "ok None"
    assert list(report["offline"]) == [locked_name]
    assert "Permission" in report["offline"][locked_name]
    assert report["online"] == [f"{TOPIC}-{p}" for p in PARTITIONS if p != LOCKED]
    assert report["partitions"][locked_name]["get"].startswith("KafkaStorageError")
    for partition in PARTITIONS:
        if partition == LOCKED:
            continue
        found = report["partitions"][f"{TOPIC}-{partition}"]
        leo = acked[partition][-1] + 1
        assert found["get"] == f"ok {TOPIC}-{partition}"
        assert found["contents"] == f"ok {leo}", found
        assert found["read_first"].startswith("ok FileRegion"), found
        assert found["offset_for_timestamp"].startswith("ok (0, "), found
        assert found["append"] == f"ok {leo}", found
    assert report["shutdown"] == "ok None"

    # Readable again, the partition that was offline comes back whole.
    unlock(data_dir, locked_dir)
    manager = open_manager(data_dir, CONFIG)
    assert manager.offline == {}
    for partition in PARTITIONS:
        contents = check_contents(manager.get(TOPIC, partition), acked[partition])
        extra = 0 if partition == LOCKED else 1  # the child appended one batch
        assert len([b for b in contents.batches if b[0].base_offset > acked[partition][-1]]) == (
            extra
        )
    manager.shutdown()


def test_offline_partition_keeps_its_checkpointed_offsets(base_dir: Path) -> None:
    """While a partition is offline the broker keeps writing the data-directory
    checkpoints for the others. The offline partition's entries must survive that:
    dropping its log start offset resurrects records removed by DeleteRecords, and
    dropping its high watermark hides committed records once it is back."""
    data_dir = base_dir / "data"
    acked, log_start, high_watermark = build(data_dir)
    locked_dir = lock_partition(data_dir)
    report = open_as_nobody(data_dir)
    assert list(report["offline"]) == [locked_dir.name]
    assert report["shutdown"] == "ok None"

    unlock(data_dir, locked_dir)
    manager = open_manager(data_dir, CONFIG)
    partition_log = manager.get(TOPIC, LOCKED)
    check_contents(partition_log, acked[LOCKED])
    assert (partition_log.log_start_offset, partition_log.high_watermark) == (
        log_start,
        high_watermark,
    ), "the checkpoints written while the partition was offline lost its offsets"
    manager.shutdown()


def test_unreadable_segment_fails_reads_with_storage_errors(base_dir: Path) -> None:
    """A closed segment the broker may not read (its partition loads: closed segments
    open lazily). Every read path that reaches it must raise KafkaStorageError."""
    data_dir = base_dir / "data"
    acked, _log_start, _hw = build(data_dir)
    chown_tree(data_dir, NOBODY)
    victim_dir = data_dir / f"{TOPIC}-0"
    first = sorted(victim_dir.glob("*.log"))[0]
    for path in (first, first.with_suffix(".index"), first.with_suffix(".timeindex")):
        os.chown(path, 0, 0)
        path.chmod(0o600)

    report = open_as_nobody(data_dir)
    found = report["partitions"][victim_dir.name]
    assert report["offline"] == {}
    assert found["get"] == f"ok {victim_dir.name}"
    leo = acked[0][-1] + 1
    assert found["read_last"].startswith("ok FileRegion"), found
    assert found["append"] == f"ok {leo}", found
    problems = {
        probe: outcome
        for probe in ("read_first", "offset_for_timestamp", "max_timestamp_offset")
        if not (outcome := found[probe]).startswith("KafkaStorageError")
    }
    assert not problems, f"reads of an unreadable segment must raise KafkaStorageError: {problems}"
    chown_tree(data_dir, 0)
