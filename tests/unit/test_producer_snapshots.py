"""Producer state snapshots (#29): Kafka's ``.snapshot`` layout, written when the log rolls
a segment and when it closes, loaded with only the batches after them replayed, and
removed with their segments, past a truncation, or when unreadable. Each load is checked
against a full replay of the same log."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import crc32c
import pytest

from partita.cluster.model import PartitionState
from partita.errors import OutOfOrderSequenceError
from partita.protocol.control_records import TxnMarker
from partita.protocol.records import Record, build_batch
from partita.server.partition import Partition
from partita.storage.log_manager import LogManager
from partita.storage.producer_snapshot import (
    ProducerSnapshotEntry,
    SnapshotCorruptError,
    decode,
    encode,
)

OpenManager = Callable[..., LogManager]
ME = 1


def _open(open_manager: OpenManager, data_dir: Path | None = None) -> Partition:
    log = open_manager(data_dir=data_dir).get_or_create("t", 0)
    partition = Partition("t", 0, log, ME)
    partition.become(PartitionState(replicas=[ME], leader=ME, leader_epoch=1, isr=[ME]))
    partition.rebuild_producer_state()  # as the replica manager does at load
    return partition


def _batch(producer: int, seq: int, n: int = 2, *, transactional: bool = False) -> bytes:
    now = int(time.time() * 1000)  # markers are stamped now: no roll for segment.ms
    records = [Record(i, now, b"k", b"%d:%d" % (producer, seq + i)) for i in range(n)]
    return build_batch(
        records, producer_id=producer, producer_epoch=0, base_sequence=seq,
        transactional=transactional,
    )  # fmt: skip


def _snapshots(partition: Partition) -> list[int]:
    return sorted(int(p.stem) for p in partition.log.directory.glob("*.snapshot"))


def _state(partition: Partition) -> tuple[object, ...]:
    """What a load must get right: each producer's epoch, last sequence, coordinator
    epoch and open transaction, the first unstable offset, the aborts."""
    return (
        partition.describe_producers(),
        partition.transactions.first_unstable_offset(),
        partition.log.aborted_txns(),
    )


def _full_replay(partition: Partition) -> tuple[object, ...]:
    """The same log's state without snapshots (moved aside, then put back)."""
    directory = partition.log.directory
    aside = {p: p.read_bytes() for p in directory.glob("*.snapshot")}
    for path in aside:
        path.unlink()
    partition.log.snapshots.__init__(directory)  # type: ignore[misc]
    partition.rebuild_producer_state()
    state = _state(partition)
    for path, data in aside.items():
        path.write_bytes(data)
    partition.log.snapshots.__init__(directory)  # type: ignore[misc]
    return state


def _busy_log(partition: Partition) -> None:
    """Three segments: idempotent and transactional producers, a commit, an abort, and
    a transaction still open across the last roll."""
    partition.append(_batch(7, 0))  # 0-1, idempotent
    partition.append(_batch(8, 0, transactional=True))  # 2-3
    partition.write_marker(TxnMarker(8, 0, True, 3))  # 4 COMMIT
    partition.log.roll()  # at 5
    partition.append(_batch(9, 0, transactional=True))  # 5-6
    partition.append(_batch(7, 2))  # 7-8
    partition.write_marker(TxnMarker(9, 0, False, 4))  # 9 ABORT
    partition.append(_batch(10, 0, transactional=True))  # 10-11, left open
    partition.log.roll()  # at 12
    partition.append(_batch(7, 4))  # 12-13


def _busy_and_closed(open_manager: OpenManager, data_dir: Path) -> tuple[Path, tuple[object, ...]]:
    """A busy log closed cleanly: its directory and the state a load must find."""
    partition = _open(open_manager, data_dir)
    _busy_log(partition)
    expected = _state(partition)
    partition.log.close()
    return partition.log.directory, expected


def test_the_file_is_kafkas_layout() -> None:
    entries = [
        ProducerSnapshotEntry(7, 0, 5, 13, 1, 5_005, -1, -1),
        ProducerSnapshotEntry(10, 2, 1, 11, 1, 5_001, 4, 10),
    ]
    data = encode(entries)
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 2 + 4 + 4 + 2 * 46)
    assert crc == crc32c.crc32c(data[6:])
    assert data[10:56] == struct.pack(">qhiqiqiq", 7, 0, 5, 13, 1, 5_005, -1, -1)
    assert decode(data) == entries
    assert decode(encode([])) == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-1],  # torn
        lambda d: d[:4],  # shorter than its header
        lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:],  # a flipped bit
        lambda d: b"\x00\x02" + d[2:],  # a version we do not know
    ],
)
def test_a_damaged_file_is_refused(damage: Callable[[bytes], bytes]) -> None:
    data = encode([ProducerSnapshotEntry(7, 0, 5, 13, 1, 5_005, -1, -1)])
    with pytest.raises(SnapshotCorruptError):
        decode(damage(data))


def test_rolls_and_a_clean_close_write_snapshots_a_load_replays_only_after_them(
    open_manager: OpenManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    partition = _open(open_manager, data_dir)
    _busy_log(partition)
    assert _snapshots(partition) == [5, 12]
    (entries_at_12,) = [
        decode((partition.log.directory / f"{12:020d}.snapshot").read_bytes()),
    ]
    assert [(e.producer_id, e.last_sequence, e.last_offset, e.current_txn_first_offset)
            for e in entries_at_12] == [(7, 3, 8, -1), (8, 1, 3, -1), (9, 1, 6, -1),
                                        (10, 1, 11, 10)]  # fmt: skip
    expected = _state(partition)
    partition.log.close()
    assert _snapshots(partition) == [5, 12, 14]  # the close's, at the log end

    replayed: list[int] = []
    observe = Partition._observe

    def counting(self: Partition, header: object, *args: object, **kwargs: object) -> None:
        replayed.append(header.base_offset)  # type: ignore[attr-defined]
        observe(self, header, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Partition, "_observe", counting)
    reloaded = _open(open_manager, data_dir)
    assert replayed == []  # the close's snapshot is the whole state
    assert _state(reloaded) == expected == _full_replay(reloaded)

    (data_dir / "t-0" / f"{14:020d}.snapshot").unlink()  # as if it crashed: no close
    replayed.clear()
    reloaded = _open(open_manager, data_dir)
    assert replayed == [12]  # from the roll's snapshot on
    assert _state(reloaded) == expected


def test_a_close_writes_a_snapshot_only_where_it_spares_a_load_work(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """Each snapshot costs an fsync: a stop with thousands of partitions must not pay one
    for a partition with nothing in it, nor again where the last stop left one."""
    data_dir = tmp_path / "data"
    empty = _open(open_manager, data_dir)
    empty.log.close()
    assert _snapshots(empty) == []  # nothing to replay: nothing to spare

    partition = _open(open_manager, data_dir)
    partition.append(_batch(7, 0))
    partition.log.close()
    assert _snapshots(partition) == [2]
    written = (partition.log.directory / f"{2:020d}.snapshot").stat().st_mtime_ns

    partition = _open(open_manager, data_dir)  # loaded from it; nothing appended
    partition.log.close()
    assert (partition.log.directory / f"{2:020d}.snapshot").stat().st_mtime_ns == written

    partition = _open(open_manager, data_dir)
    partition.append(_batch(7, 2))
    partition.log.close()
    assert _snapshots(partition) == [2, 4]


def test_after_a_load_the_last_batch_is_a_duplicate_and_older_ones_are_out_of_order(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """As in Kafka, whose snapshots keep one batch per producer."""
    data_dir = tmp_path / "data"
    partition = _open(open_manager, data_dir)
    first = partition.append(_batch(7, 0))
    last = partition.append(_batch(7, 2))
    partition.log.close()
    reloaded = _open(open_manager, data_dir)
    again = reloaded.append(_batch(7, 2))
    assert (again.first_offset, again.last_offset) == (last.first_offset, last.last_offset)
    assert reloaded.log.log_end_offset == 4  # not appended twice
    with pytest.raises(OutOfOrderSequenceError):
        reloaded.append(_batch(7, 0))
    assert first.first_offset == 0
    assert reloaded.append(_batch(7, 4)).first_offset == 4


def test_a_truncation_removes_the_snapshots_past_it(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    partition = _open(open_manager, tmp_path / "data")
    _busy_log(partition)
    partition.truncate_to(7)  # into the second segment: the roll at 12 is gone
    assert _snapshots(partition) == [5]
    assert _state(partition) == _full_replay(partition)
    assert partition.transactions.open == {9: 5}  # its ABORT was cut off
    partition.start_over_at(40)  # a follower behind its leader's log start
    assert _snapshots(partition) == []
    assert _state(partition) == ([], None, [])


def test_deleted_segments_take_their_snapshots_and_their_producers(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    partition = _open(open_manager, data_dir)
    _busy_log(partition)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    partition.log.delete_records(12)
    assert _snapshots(partition) == [12]
    before = _state(partition)
    partition.log.close()
    reloaded = _open(open_manager, data_dir)
    # Producers 8 and 9 wrote only below the new log start: forgotten, as Kafka does.
    # 10's transaction is still open (its marker is still to come), 7 wrote at 12.
    assert [p[0] for p in reloaded.describe_producers()] == [7, 10]
    assert _state(reloaded)[1:] == before[1:]


def test_an_unreadable_or_stray_snapshot_is_deleted_and_the_load_replays_further(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    directory, expected = _busy_and_closed(open_manager, data_dir)
    (directory / f"{14:020d}.snapshot").write_bytes(b"\x00\x01garbage")  # torn by a crash
    (directory / f"{99:020d}.snapshot").write_bytes(encode([]))  # past the log end
    reloaded = _open(open_manager, data_dir)
    assert _snapshots(reloaded) == [5, 12]
    assert _state(reloaded) == expected


def test_a_snapshot_waits_for_a_txnindex_the_disk_refused(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """A load trusts the .txnindex files before its snapshot: a roll after an abort
    whose index write failed must not snapshot until the file is written, or the next
    load would never learn of the abort and read_committed consumers would read it."""
    data_dir = tmp_path / "data"
    partition = _open(open_manager, data_dir)
    partition.append(_batch(9, 0, transactional=True))  # 0-1
    blocked = partition.log.active_segment.txn_index.path
    blocked.mkdir()  # cannot be written (as on a full disk)
    partition.write_marker(TxnMarker(9, 0, False, 0))  # 2 ABORT
    partition.log.roll()
    assert _snapshots(partition) == []  # skipped, logged
    blocked.rmdir()  # the disk has room again
    crashed = _open(open_manager, data_dir)  # a crash now: loaded without a close
    assert [(a.first_offset, a.last_offset) for a in crashed.log.aborted_txns()] == [(0, 2)]
    partition.append(_batch(7, 0))  # 3-4
    partition.log.roll()  # writes the index again, then the snapshot
    assert _snapshots(partition) == [5]
    assert blocked.is_file()
    partition.log.close()
    reloaded = _open(open_manager, data_dir)
    assert [(a.first_offset, a.last_offset) for a in reloaded.log.aborted_txns()] == [(0, 2)]
    assert reloaded.fetch(0, 1 << 20, min_one_batch=True, read_committed=True).aborted


def test_a_corrupt_txnindex_before_the_snapshot_makes_the_load_replay_everything(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    directory, expected = _busy_and_closed(open_manager, data_dir)
    (index,) = directory.glob("*.txnindex")  # the ABORT at 9's
    index.write_bytes(index.read_bytes()[:-3])  # not whole entries
    reloaded = _open(open_manager, data_dir)
    assert _state(reloaded) == expected  # rewritten from the log


def test_retention_rolling_on_the_maintenance_thread_reads_no_producer_state(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """Retention runs on a thread beside appends; when it deletes every segment it rolls
    a new one, and a snapshot there would read the partition's state off its event loop,
    possibly before an append just written was observed. It writes none."""
    partition = _open(open_manager, tmp_path / "data")
    _busy_log(partition)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    read: list[str] = []
    state = partition.log.producer_state
    assert state is not None
    partition.log.producer_state = lambda: read.append(threading.current_thread().name) or state()
    partition.log.update_config(replace(partition.log.config, retention_bytes=0))
    worker = threading.Thread(target=partition.log.enforce_retention, name="maintenance")
    worker.start()
    worker.join(10)
    assert len(partition.log.segments) == 1 and partition.log.active_segment.size == 0
    assert read == []
    assert _snapshots(partition) == []  # the old ones went with their segments


def test_an_abort_indexed_after_a_refused_one_does_not_make_the_file_whole(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """The disk refuses the first abort's entry, then has room for the second: appended,
    the file holds the second alone, and the snapshot at the next roll must wait until
    the file is rewritten whole, or a load from it would never learn of the first."""
    data_dir = tmp_path / "data"
    partition = _open(open_manager, data_dir)
    partition.append(_batch(9, 0, transactional=True))  # 0-1
    blocked = partition.log.active_segment.txn_index.path
    blocked.mkdir()
    partition.write_marker(TxnMarker(9, 0, False, 0))  # 2 ABORT: its entry refused
    blocked.rmdir()
    partition.append(_batch(8, 0, transactional=True))  # 3-4
    partition.write_marker(TxnMarker(8, 0, False, 0))  # 5 ABORT: appended alone
    partition.log.roll()  # rewrites the file whole before the snapshot at 6
    assert _snapshots(partition) == [6]
    crashed = _open(open_manager, data_dir)  # loaded as after a crash: from the snapshot
    assert [(a.first_offset, a.last_offset) for a in crashed.log.aborted_txns()] == [
        (0, 2),
        (3, 5),
    ]
