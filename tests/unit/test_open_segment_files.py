"""Segment files open on use and are closed beyond a bound (storage/open_files.py),
with real logs on real files."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager
from partita.storage.open_files import OPEN_SEGMENT_FILES, default_capacity


def open_files_under(directory: Path) -> list[str]:
    """Paths of this process's open descriptors that lie under ``directory``."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the descriptor listdir itself used
        if target.startswith(str(directory)):
            found.append(target)
    return found


@pytest.fixture
def capacity_of_four() -> Iterator[None]:
    before = OPEN_SEGMENT_FILES.capacity
    OPEN_SEGMENT_FILES.resize(4)
    yield
    OPEN_SEGMENT_FILES.resize(before)


def payload(tag: str) -> bytes:
    return tag.encode() * 500  # 1.5-2.5 KB: a 4 KiB segment holds one or two


def batch(tag: str) -> bytes:
    return build_batch([Record(0, 1_700_000_000_000, tag.encode(), payload(tag))])


def values(manager: LogManager, partition: int) -> list[bytes]:
    """Every value of a partition, read segment by segment."""
    plog = manager.get("t", partition)
    out: list[bytes] = []
    offset = 0
    while offset < plog.log_end_offset:
        region = plog.read(offset, 1 << 20, max_offset=plog.log_end_offset)
        assert region is not None
        records = decode_records(region.read())[1]
        out += [r.value or b"" for r in records]
        offset = records[-1].offset + 1
    return out


def test_descriptors_stay_within_the_bound(tmp_path: Path, capacity_of_four: None) -> None:
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir, lambda _t: LogConfig(segment_bytes=4096))
    manager.startup()
    for p in range(20):
        manager.get_or_create("t", p)
    assert open_files_under(data_dir) == []  # created partitions hold no descriptor

    for round_ in range(5):  # several segments each (4 KiB segments)
        for p in range(20):
            manager.get("t", p).append_as_leader(batch(f"{p}.{round_}"), 0)
            assert len(open_files_under(data_dir)) <= 4
    for p in range(20):
        assert len(manager.get("t", p).segments) > 1
        got = values(manager, p)
        assert got == [payload(f"{p}.{r}") for r in range(5)]
        assert len(open_files_under(data_dir)) <= 4

    manager.shutdown()  # every append's file is fsynced through a descriptor opened anew
    again = LogManager(data_dir, lambda _t: LogConfig(segment_bytes=4096))
    again.startup()
    assert again.loaded_cleanly
    assert open_files_under(data_dir) == []
    assert values(again, 7) == [payload(f"7.{r}") for r in range(5)]
    again.shutdown()


def test_a_region_keeps_its_file_open_after_eviction(
    tmp_path: Path, capacity_of_four: None
) -> None:
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir)
    manager.startup()
    for p in range(10):
        manager.get_or_create("t", p).append_as_leader(batch(f"p{p}"), 0)
    region = manager.get("t", 0).read(0, 1 << 20, max_offset=1)
    assert region is not None
    segment_path = str(manager.get("t", 0).segments[0].log_path)
    for p in range(1, 10):  # enough use of other files to evict partition 0's
        manager.get("t", p).read(0, 1 << 20, max_offset=1)

    # The descriptor the region names is still partition 0's file, not a reused number.
    assert os.readlink(f"/proc/self/fd/{region.fd}") == segment_path
    assert decode_records(region.read())[1][0].value == payload("p0")
    fd = region.fd
    del region
    gc.collect()
    try:
        still_open = os.readlink(f"/proc/self/fd/{fd}") == segment_path
    except FileNotFoundError:
        still_open = False
    assert not still_open
    manager.shutdown()


def test_idle_files_are_closed_by_maintenance(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    manager = LogManager(data_dir)
    manager.startup()
    for p in range(3):
        manager.get_or_create("t", p).append_as_leader(batch("x"), 0)
    assert len(open_files_under(data_dir)) == 3
    manager.run_maintenance()  # the files were used since the last pass: kept
    assert len(open_files_under(data_dir)) == 3
    manager.get("t", 0).append_as_leader(batch("y"), 0)
    manager.run_maintenance()  # unused since the last pass: closed, except partition 0's
    assert len(open_files_under(data_dir)) == 1
    manager.shutdown()
    assert open_files_under(data_dir) == []


def test_default_capacity_leaves_room_for_sockets() -> None:
    assert default_capacity(20_000) == 16_000
    assert default_capacity(1024) == 768
    assert default_capacity(256) == 128
