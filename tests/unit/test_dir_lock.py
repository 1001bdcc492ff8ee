"""The data directory's lock (storage/dir_lock.py), on real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from partita.storage.dir_lock import (
    LOCK_FILE,
    DataDirLock,
    DataDirLockedError,
    LockHolder,
    lock_holder,
)


def test_lock_excludes_a_second_open_even_in_the_same_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    held = DataDirLock.acquire(data_dir)
    assert (data_dir / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirLockedError) as refused:
        DataDirLock.acquire(data_dir)
    assert refused.value.pid == os.getpid()
    assert str(data_dir) in refused.value.message
    held.release()
    DataDirLock.acquire(data_dir).release()


def test_holder_is_asked_without_taking_the_lock(tmp_path: Path) -> None:
    assert lock_holder(tmp_path) is None  # no lock file at all
    held = DataDirLock.acquire(tmp_path)
    assert lock_holder(tmp_path) == LockHolder(os.getpid())
    assert lock_holder(tmp_path) == LockHolder(os.getpid())  # asking twice changes nothing
    assert held.held
    held.release()
    assert lock_holder(tmp_path) is None  # the file stays, unlocked
    assert (tmp_path / LOCK_FILE).exists()
