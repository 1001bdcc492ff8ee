"""Blocks reserved past the active segment's end: held while it takes appends, given back
at roll and close, never visible in a file's size or contents. Writeback of each
finished window of the active segment starts as soon as it is written."""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from partita.protocol.record_batch import read_header
from partita.storage import linux_file_calls
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager
from partita.storage.segment import RESERVE_WINDOW, WRITEBACK_WINDOW
from partita.storage.writeback import WRITEBACK, WritebackStarter
from tests.conftest import make_batch

OpenManager = Callable[..., LogManager]
BLOCK = 4096


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


@pytest.fixture(autouse=True)
def reserving_file_system(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if linux_file_calls.reserve(fd, 0, BLOCK) is None:
            pytest.skip(f"the file system of {tmp_path} cannot reserve blocks")
    finally:
        os.close(fd)
        probe.unlink()


def test_an_active_segment_holds_a_window_past_its_end_and_its_size_stays_exact(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    batch = make_batch(20, value_size=1000)
    for _ in range(3):
        log.append_as_leader(batch, 0)
    path = log.active_segment.log_path
    assert os.stat(path).st_size == 3 * len(batch)
    # The first append reserved itself and a window after it; the next two fit in it.
    assert allocated(path) >= len(batch) + RESERVE_WINDOW - BLOCK
    log.update_high_watermark(log.log_end_offset)
    assert [read_header(b).base_offset for b in log.iter_batches()] == [0, 20, 40]


def test_a_roll_gives_the_old_segment_s_reservation_back_and_keeps_its_mtime(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(make_batch(5, value_size=1000), 0)
    old = log.active_segment.log_path
    os.utime(old, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    log.roll()
    assert allocated(old) < os.stat(old).st_size + BLOCK
    assert os.stat(old).st_mtime_ns == 1_000_000_000_000_000_000
    log.append_as_leader(make_batch(5, value_size=1000), 0)
    assert allocated(log.active_segment.log_path) >= RESERVE_WINDOW


def test_close_gives_the_reservation_back(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(make_batch(5, value_size=1000), 0)
    path = log.active_segment.log_path
    size = os.stat(path).st_size
    log.close()
    assert allocated(path) < size + BLOCK
    assert os.stat(path).st_size == size


def test_the_window_never_exceeds_segment_bytes(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_bytes=64 * 1024)).get_or_create("t", 0)
    log.append_as_leader(make_batch(5, value_size=1000), 0)
    allocation = allocated(log.active_segment.log_path)
    assert (
        64 * 1024
        <= allocation
        < 64 * 1024 + 2 * BLOCK + os.stat(log.active_segment.log_path).st_size
    )


def test_a_log_left_with_its_reservation_by_a_crash_recovers_exactly(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    log = open_manager(data_dir=data).get_or_create("t", 0)
    for _ in range(4):
        log.append_as_leader(make_batch(7, value_size=500), 0)
    path = log.active_segment.log_path
    size = os.stat(path).st_size
    assert allocated(path) > size + BLOCK  # nothing gave it back: as after kill -9
    reopened = open_manager(data_dir=data).get_or_create("t", 0)
    assert reopened.log_end_offset == 28
    reopened.update_high_watermark(28)
    assert [read_header(b).base_offset for b in reopened.iter_batches()] == [0, 7, 14, 21]
    assert os.stat(path).st_size == size


def test_a_truncation_forgets_blocks_it_freed_and_reserves_again(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    for _ in range(3):
        log.append_as_leader(make_batch(4, value_size=1000), 0)
    log.truncate_to(4)
    path = log.active_segment.log_path
    assert allocated(path) < os.stat(path).st_size + BLOCK
    log.append_as_leader(make_batch(4, value_size=1000), 0)
    assert allocated(path) >= os.stat(path).st_size + RESERVE_WINDOW - BLOCK


def test_a_descriptor_that_cannot_reserve_says_so() -> None:
    read_end, write_end = os.pipe()
    try:
        assert linux_file_calls.reserve(write_end, 0, BLOCK) is None
    finally:
        os.close(read_end)
        os.close(write_end)


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Cachestat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("cache", "dirty", "writeback", "evicted", "recently_evicted")
    ]


_SYS_CACHESTAT = 451  # x86_64 and arm64 alike


def dirty_pages(path: Path, start: int, length: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        stat = _Cachestat()
        span = _CachestatRange(start, length)
        if libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(span), ctypes.byref(stat), 0) != 0:
            pytest.skip(f"cachestat(2) unavailable: errno {ctypes.get_errno()}")
        return int(stat.dirty)
    finally:
        os.close(fd)


def test_each_finished_writeback_window_is_handed_to_the_disk_at_once(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    batch = make_batch(16, value_size=4000)
    while log.active_segment.size < WRITEBACK_WINDOW + 8 * len(batch):
        log.append_as_leader(batch, 0)
    path = log.active_segment.log_path
    WRITEBACK.wait_idle()
    handed_over = WRITEBACK_WINDOW - WRITEBACK_WINDOW % len(batch) + len(batch)
    # Starting writeback moves every dirty page of the range to writeback before it
    # returns; the kernel's own flusher would leave them dirty for 30 s.
    assert dirty_pages(path, 0, handed_over - BLOCK) == 0
    assert dirty_pages(path, handed_over + BLOCK, 4 * len(batch)) > 0


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_writeback_requests_leave_no_descriptor_behind(tmp_path: Path) -> None:
    starter = WritebackStarter()
    path = tmp_path / "data"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, os.urandom(1 << 20))
        before = open_descriptors()
        for _ in range(50):
            starter.request(fd, 0, 1 << 20)
        starter.wait_idle()
        assert open_descriptors() == before
        assert dirty_pages(path, 0, 1 << 20) == 0
    finally:
        os.close(fd)


def test_a_writeback_thread_that_is_behind_makes_appends_skip_not_wait(tmp_path: Path) -> None:
    starter = WritebackStarter(max_pending=2)
    starter._thread = threading.current_thread()  # as if started, and stuck: nothing drains
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        before = open_descriptors()
        for _ in range(5):
            starter.request(fd, 0, 4096)
        assert starter.skipped == 3
        assert open_descriptors() == before + 2  # the two queued; the skipped closed
    finally:
        while not starter._requests.empty():
            os.close(starter._requests.get_nowait()[0])
        os.close(fd)


def test_a_segment_that_takes_appends_again_after_a_truncation_reserves_again(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(make_batch(4, value_size=1000), 0)
    log.append_as_leader(make_batch(4, value_size=1000), 0)
    first = log.active_segment.log_path
    log.roll()
    log.append_as_leader(make_batch(4, value_size=1000), 0)
    log.truncate_to(4)  # the second segment goes; the first is active again
    assert log.active_segment.log_path == first
    log.append_as_leader(make_batch(4, value_size=1000), 0)
    assert allocated(first) >= os.stat(first).st_size + RESERVE_WINDOW - 2 * BLOCK
