"""partition.metadata: a partition directory names the topic id it belongs to, and one
left by an earlier topic of the same name is never taken for the new topic's replica."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from partita.storage.log_manager import LogManager
from partita.storage.partition_metadata import (
    PARTITION_METADATA,
    kafka_uuid_text,
    read_topic_id,
)
from tests.conftest import make_batch

OpenManager = Callable[..., LogManager]


def test_kafkas_text_form_of_a_topic_id() -> None:
    # Kafka's Uuid.toString: URL-safe base64 without padding (22 characters).
    value = uuid.UUID("f8c9c5c6-8f0e-4a6b-9d2e-3b1b7a1e0f4d")
    assert kafka_uuid_text(value) == "-MnFxo8OSmudLjsbeh4PTQ"


def test_a_new_partition_records_its_topic_id(open_manager: OpenManager) -> None:
    topic_id = uuid.uuid4()
    log = open_manager().get_or_create("t", 0, topic_id)
    text = (log.directory / PARTITION_METADATA).read_text()
    assert text == f"version: 0\ntopic_id: {kafka_uuid_text(topic_id)}\n"
    assert read_topic_id(log.directory) == topic_id


def test_a_directory_from_before_ids_is_adopted(tmp_path: Path, open_manager: OpenManager) -> None:
    data = tmp_path / "data"
    old = open_manager(data_dir=data).get_or_create("t", 0)  # no id, as older brokers wrote
    old.append_as_leader(make_batch(3), leader_epoch=0)
    assert read_topic_id(old.directory) is None
    topic_id = uuid.uuid4()
    reopened = open_manager(data_dir=data).get_or_create("t", 0, topic_id)
    assert reopened.log_end_offset == 3 and read_topic_id(reopened.directory) == topic_id


def test_a_directory_of_an_earlier_topic_is_stray(
    tmp_path: Path, open_manager: OpenManager
) -> None:
    data = tmp_path / "data"
    first = uuid.uuid4()
    old = open_manager(data_dir=data).get_or_create("t", 0, first)
    old.append_as_leader(make_batch(5), leader_epoch=0)
    manager = open_manager(data_dir=data)
    assert manager.get("t", 0).log_end_offset == 5  # loaded at start-up, by name
    second = uuid.uuid4()
    fresh = manager.get_or_create("t", 0, second)
    assert fresh.log_end_offset == 0 and fresh.epochs.entries == []
    assert read_topic_id(fresh.directory) == second
    assert sorted(p.name for p in data.iterdir() if p.is_dir()) == ["t-0"]  # the old one is gone
    assert manager.get_or_create("t", 0, second) is fresh


class _Fsyncs(list[str]):
    """The paths fsynced, in order, once ``watch`` is called."""

    def watch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_fsync = os.fsync

        def counting_fsync(fd: int) -> None:
            self.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", counting_fsync)


def test_a_new_partitions_id_is_made_durable_at_the_next_checkpoint(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Creating thousands of partitions must not cost two fsyncs each on the event loop;
    # Kafka flushes partition.metadata asynchronously too. The checkpoint (in the
    # maintenance thread) syncs the file and its directory.
    synced = _Fsyncs()
    synced.watch(monkeypatch)
    manager = open_manager()
    logs = [manager.get_or_create("t", index, uuid.uuid4()) for index in range(3)]
    assert synced == []
    manager.checkpoint()
    for log in logs:
        assert str(log.directory / PARTITION_METADATA) in synced
        assert str(log.directory) in synced
    synced.clear()
    manager.checkpoint()
    assert not [path for path in synced if path.endswith(PARTITION_METADATA)]  # once only


def test_a_topic_id_lost_in_a_crash_reads_as_none_and_the_directory_is_adopted(
    tmp_path: Path, open_manager: OpenManager
) -> None:
    # A crash before the checkpoint may leave the renamed file empty (its data never
    # written back): the directory is then one with no id yet, adopted and given it.
    data = tmp_path / "data"
    topic_id = uuid.uuid4()
    log = open_manager(data_dir=data).get_or_create("t", 0, topic_id)
    log.append_as_leader(make_batch(2), leader_epoch=0)
    (log.directory / PARTITION_METADATA).write_bytes(b"")
    assert read_topic_id(log.directory) is None
    reopened = open_manager(data_dir=data).get_or_create("t", 0, topic_id)
    assert reopened.log_end_offset == 2 and read_topic_id(reopened.directory) == topic_id


def test_a_new_leaders_epoch_checkpoint_is_synced_before_its_recovery_point_is_recorded(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A leader elected records its epoch at once (as Kafka does), but without an fsync
    # on the event loop: at 10,000 new partitions those were a fifth of a broker's
    # work. The checkpoint syncs the file before it writes any recovery point.
    synced = _Fsyncs()
    manager = open_manager()
    log = manager.get_or_create("t", 0, uuid.uuid4())
    manager.checkpoint()
    synced.watch(monkeypatch)
    log.epochs.assign(3, 0)
    log.epochs.flush()
    log.append_as_leader(make_batch(2), leader_epoch=3)
    log.flush()
    assert not [p for p in synced if p.endswith("leader-epoch-checkpoint")]
    synced.clear()
    manager.checkpoint()
    epoch_file = str(log.directory / "leader-epoch-checkpoint")
    recovery = str(manager.data_dir / "recovery-point-offset-checkpoint.tmp")
    assert epoch_file in synced and recovery in synced
    assert synced.index(epoch_file) < synced.index(recovery)
