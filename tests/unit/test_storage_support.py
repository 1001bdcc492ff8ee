from __future__ import annotations

from pathlib import Path

import pytest

from partita.errors import InvalidConfigurationError
from partita.storage.checkpoint import (
    CheckpointCorruptError,
    read_epochs,
    read_offsets,
    write_epochs,
    write_offsets,
)
from partita.storage.config import LogConfig
from partita.storage.indexes import IndexCorruptError, OffsetIndex, TimeIndex
from partita.storage.leader_epochs import LeaderEpochCache


def test_config_defaults_match_kafka() -> None:
    kafka = LogConfig().to_kafka()
    assert kafka["segment.bytes"] == "1073741824"
    assert kafka["retention.ms"] == "604800000"
    assert kafka["retention.bytes"] == "-1"
    assert kafka["max.message.bytes"] == "1048588"
    assert kafka["index.interval.bytes"] == "4096"
    assert kafka["cleanup.policy"] == "delete"
    assert kafka["delete.retention.ms"] == "86400000"
    assert kafka["min.insync.replicas"] == "1"


def test_config_overrides_are_validated() -> None:
    config = LogConfig().with_overrides(
        {"segment.bytes": "1024", "cleanup.policy": "delete,compact"}
    )
    assert config.segment_bytes == 1024 and config.compact and config.delete
    for bad in (
        {"segment.bytes": "abc"},
        {"segment.bytes": "1"},
        {"cleanup.policy": "shred"},
        {"no.such.setting": "1"},
        {"min.cleanable.dirty.ratio": "2"},
        {"message.timestamp.type": "Whenever"},
    ):
        with pytest.raises(InvalidConfigurationError):
            LogConfig().with_overrides(bad)


def test_offset_checkpoint_roundtrip_and_corruption(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offsets(path, {("a-b", 0): 5, ("c", 3): 9})
    assert path.read_text().splitlines()[:2] == ["0", "2"]
    assert read_offsets(path) == {("a-b", 0): 5, ("c", 3): 9}
    path.write_text("0\n3\na 0 1\n")
    with pytest.raises(CheckpointCorruptError):
        read_offsets(path)
    assert read_offsets(tmp_path / "missing") == {}


def test_epoch_checkpoint_roundtrip(tmp_path: Path) -> None:
    write_epochs(tmp_path / "e", [(0, 0), (3, 100)])
    assert read_epochs(tmp_path / "e") == [(0, 0), (3, 100)]


def test_leader_epoch_end_offsets(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "e")
    assert cache.end_offset_for(0, 10) == (-1, -1)
    for epoch, offset in [(1, 0), (3, 50), (6, 80)]:
        assert cache.assign(epoch, offset)
    assert not cache.assign(2, 90)  # older epochs never go back in
    assert cache.end_offset_for(6, 100) == (6, 100)
    assert cache.end_offset_for(3, 100) == (3, 80)
    assert cache.end_offset_for(4, 100) == (3, 80)
    assert cache.end_offset_for(0, 100) == (0, 0)
    assert cache.end_offset_for(7, 100) == (-1, -1)
    cache.truncate_from_end(60)
    assert cache.entries == [(1, 0), (3, 50)]
    cache.truncate_from_start(55)
    assert cache.entries == [(3, 55)]


def test_offset_index_lookup_and_truncate(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 100, 1000)
    for offset, position in [(104, 400), (110, 900), (120, 1500)]:
        index.append(offset, position)
    index.flush()
    assert index.lookup(99) == (100, 0)
    assert index.lookup(110) == (110, 900)
    assert index.lookup(115) == (110, 900)
    index.truncate_to(110)
    assert index.entries() == [(104, 400)]
    loaded = OffsetIndex.load(tmp_path / "0.index", 100, 1000, 10_000)
    assert loaded.entries() == [(104, 400)]
    (tmp_path / "0.index").write_bytes(b"\x00" * 7)
    with pytest.raises(IndexCorruptError):
        OffsetIndex.load(tmp_path / "0.index", 100, 1000, 10_000)


def test_index_files_get_each_entry_once_across_flushes_and_a_deleted_file(
    tmp_path: Path,
) -> None:
    offsets = OffsetIndex(tmp_path / "0.index", 100, 1000)
    times = TimeIndex(tmp_path / "0.timeindex", 100, 1000)
    offsets.append(104, 400)
    times.maybe_append(1_000, 104)
    for index in (offsets, times):
        index.flush()
    offsets.append(110, 900)
    times.maybe_append(2_000, 110)
    for index in (offsets, times):
        index.flush()
        index.flush()  # nothing new: writes nothing
    assert OffsetIndex.load(offsets.path, 100, 1000, 10_000).entries() == [(104, 400), (110, 900)]
    assert TimeIndex.load(times.path, 100, 1000).entries() == [(1_000, 104), (2_000, 110)]
    # A deleted file is written again in full from memory at the next flush.
    for index in (offsets, times):
        index.delete_file()
        assert not index.path.exists()
        index.flush()
    assert OffsetIndex.load(offsets.path, 100, 1000, 10_000).entries() == [(104, 400), (110, 900)]
    assert TimeIndex.load(times.path, 100, 1000).entries() == [(1_000, 104), (2_000, 110)]


def test_time_index_lookup(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, 1000)
    index.maybe_append(100, 4)
    index.maybe_append(90, 8)  # not newer: ignored
    index.maybe_append(200, 9)
    assert index.entries() == [(100, 4), (200, 9)]
    assert index.lookup_before(100) == 0
    assert index.lookup_before(101) == 5
    assert index.lookup_before(500) == 10
