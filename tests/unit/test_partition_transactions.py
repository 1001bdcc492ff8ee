"""Transactions on a real Partition and log, without sockets (#29): open transactions
hold the last stable offset back, markers end them, aborts are reported to read_committed
fetches, markers fence older epochs, and a reloaded leader or a follower copying the log
arrives at the same state."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from partita.cluster.model import PartitionState
from partita.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    TransactionCoordinatorFencedError,
)
from partita.protocol.control_records import TxnMarker
from partita.protocol.records import Record, build_batch, decode_records
from partita.server.partition import Partition
from partita.server.partition_transactions import AbortedTxn
from partita.storage.log import LATEST_TIMESTAMP
from partita.storage.log_manager import LogManager
from partita.storage.txn_index import read_entries

OpenManager = Callable[..., LogManager]
ME, OTHER = 1, 2


def _leader(
    open_manager: OpenManager, node: int = ME, leader: int = ME, manager: LogManager | None = None
) -> Partition:
    log = (manager or open_manager()).get_or_create("t", 0)
    partition = Partition("t", 0, log, node)
    partition.become(PartitionState(replicas=[ME, OTHER], leader=leader, leader_epoch=1, isr=[ME]))
    return partition


def _batch(producer: int, seq: int, n: int = 3, *, epoch: int = 0) -> bytes:
    records = [Record(i, 1_000 + i, b"k", f"{producer}:{seq + i}".encode()) for i in range(n)]
    if producer < 0:
        return build_batch(records)
    return build_batch(
        records, producer_id=producer, producer_epoch=epoch, base_sequence=seq,
        transactional=True,
    )  # fmt: skip


def _follower_copy(open_manager: OpenManager, tmp_path: Path, leader: Partition) -> Partition:
    """A follower that copied the leader's whole log, as its fetcher would."""
    follower_log = open_manager(data_dir=tmp_path / "follower").get_or_create("t", 0)
    follower = Partition("t", 0, follower_log, OTHER)
    follower.become(PartitionState(replicas=[ME, OTHER], leader=ME, leader_epoch=1, isr=[ME]))
    while follower.log.log_end_offset < leader.log.log_end_offset:  # a read is one segment's
        region = leader.log.read(
            follower.log.log_end_offset, 1 << 20, max_offset=leader.log.log_end_offset
        )
        assert region is not None
        follower.append_as_follower(region.read())
    return follower


def _values(partition: Partition, *, read_committed: bool) -> list[bytes]:
    read = partition.fetch(0, 1 << 20, min_one_batch=True, read_committed=read_committed)
    if read.records is None:
        return []
    data = read.records.read()
    values, pos = [], 0
    while pos < len(data):
        header, records = decode_records(data, pos)
        if not header.is_control:
            values += [r.value or b"" for r in records]
        pos += header.size
    return values


def test_open_transactions_hold_the_lso_and_markers_release_it(open_manager: OpenManager) -> None:
    p = _leader(open_manager)
    p.append(_batch(7, 0))  # 0-2, producer 7's transaction
    p.append(_batch(-1, 0))  # 3-5, no transaction
    assert (p.high_watermark, p.last_stable_offset) == (6, 0)
    assert _values(p, read_committed=True) == []
    assert len(_values(p, read_committed=False)) == 6
    assert p.offset_for(LATEST_TIMESTAMP, for_client=True, read_committed=True).offset == 0
    assert p.offset_for(LATEST_TIMESTAMP, for_client=True).offset == 6

    p.append(_batch(8, 0))  # 6-8, producer 8's
    p.write_marker(TxnMarker(7, 0, False, 0))  # abort at 9: 8's transaction is still open
    assert p.log.aborted_txns() == [AbortedTxn(7, 0, 9, 6)]
    assert p.last_stable_offset == 6
    p.write_marker(TxnMarker(8, 0, True, 0))  # commit at 10
    assert p.last_stable_offset == p.high_watermark == 11

    read = p.fetch(0, 1 << 20, min_one_batch=True, read_committed=True)
    assert read.aborted == [AbortedTxn(7, 0, 9, 6)]
    assert read.last_stable_offset == 11
    # The records are all returned (the consumer drops the aborted ones itself); the
    # markers are control batches no consumer shows.
    assert len(_values(p, read_committed=True)) == 9
    assert p.fetch(0, 1 << 20, min_one_batch=True).aborted is None  # read_uncommitted
    assert p.fetch(10, 1 << 20, min_one_batch=True, read_committed=True).aborted == []


def test_a_reloaded_partition_and_a_follower_rebuild_the_same_state(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    leader = _leader(open_manager)
    leader.append(_batch(7, 0))
    leader.append(_batch(8, 0))
    leader.write_marker(TxnMarker(7, 0, False, 0))
    leader.append(_batch(7, 3))
    leader.append(_batch(9, 0))
    leader.write_marker(TxnMarker(9, 0, True, 0))

    def state(p: Partition) -> tuple[dict[int, int], list[AbortedTxn], int]:
        return dict(p.transactions.open), p.log.aborted_txns(), p.last_stable_offset

    assert state(leader) == ({8: 3, 7: 7}, [AbortedTxn(7, 0, 6, 3)], 3)
    before = state(leader)

    leader.rebuild_producer_state()  # as at load, from the log alone
    assert state(leader) == before

    follower = _follower_copy(open_manager, tmp_path, leader)
    assert state(follower)[:2] == before[:2]


def test_a_marker_fences_older_epochs_and_refuses_to_go_back(open_manager: OpenManager) -> None:
    p = _leader(open_manager)
    p.append(_batch(7, 0, epoch=0))
    p.write_marker(TxnMarker(7, 1, False, 0))  # the coordinator fenced epoch 0
    with pytest.raises(InvalidProducerEpochError):
        p.append(_batch(7, 3, epoch=0))
    with pytest.raises(InvalidProducerEpochError):
        p.write_marker(TxnMarker(7, 0, True, 0))
    p.append(_batch(7, 0, epoch=2))  # the next instance starts again at sequence 0
    assert p.transactions.open == {7: p.log.log_end_offset - 3}


def test_a_marker_from_an_older_coordinator_is_fenced(open_manager: OpenManager) -> None:
    # The coordinator epoch is its __transaction_state partition's leader epoch: once a
    # newer coordinator wrote for the producer, the old one may end nothing here.
    p = _leader(open_manager)
    p.append(_batch(7, 0))
    p.write_marker(TxnMarker(7, 0, True, 5))
    p.append(_batch(7, 3))  # the next transaction, same producer epoch
    with pytest.raises(TransactionCoordinatorFencedError):
        p.write_marker(TxnMarker(7, 0, True, 4))
    assert p.transactions.open == {7: 4}  # still open: the stale COMMIT ended nothing


def test_a_producer_batch_behind_a_plain_one_is_refused(open_manager: OpenManager) -> None:
    # The sequence and transaction rules read the first batch's header: a transactional
    # batch second in line would be appended unchecked and never tracked.
    p = _leader(open_manager)
    with pytest.raises(InvalidRecordError, match="only batch of its partition"):
        p.append(_batch(-1, 0) + _batch(7, 0))
    assert p.log.log_end_offset == 0
    p.append(_batch(-1, 0) + _batch(-1, 0))  # plain batches together stay allowed
    assert p.log.log_end_offset == 6


def test_a_transactions_offsets_from_a_fenced_instance_are_refused(
    open_manager: OpenManager,
) -> None:
    # TxnOffsetCommit's batch (no sequence, written by the group coordinator) is held to
    # the producer's epoch like a marker is; the producer shows in DescribeProducers.
    p = _leader(open_manager)
    offsets = build_batch(
        [Record(0, 1_000, b"offset-key", b"offset-value")],
        producer_id=7, producer_epoch=0, transactional=True,
    )  # fmt: skip
    p.append_from_coordinator(offsets)
    assert p.describe_producers() == [(7, -1, -1, -1, 0)]  # an open transaction at 0
    p.write_marker(TxnMarker(7, 1, False, 0))  # aborted under a bumped epoch: fenced
    assert p.describe_producers() == [(7, 1, -1, 0, -1)]
    with pytest.raises(InvalidProducerEpochError):
        p.append_from_coordinator(offsets)
    assert p.transactions.open == {}


def _txnindex_files(p: Partition) -> dict[str, list[AbortedTxn]]:
    return {path.name: read_entries(path) for path in sorted(p.log.directory.glob("*.txnindex"))}


def _where(p: Partition, *entries: AbortedTxn) -> dict[str, list[AbortedTxn]]:
    """Each entry in the .txnindex of the segment that holds its marker."""
    files: dict[str, list[AbortedTxn]] = {}
    for entry in entries:
        base = max(s.base_offset for s in p.log.segments if s.base_offset <= entry.last_offset)
        files.setdefault(f"{base:020d}.txnindex", []).append(entry)
    return files


def test_each_abort_lands_in_its_markers_segments_txnindex(
    open_manager: OpenManager, tmp_path: Path
) -> None:
    """Kafka's layout: 34-byte entries beside the segment holding the ABORT marker; a
    follower writes the same entries; a file lost in a crash is rewritten from the log at
    load; a truncation takes the entries of the markers it cuts."""
    manager = open_manager()
    leader = _leader(open_manager, manager=manager)
    leader.append(_batch(7, 0))  # 0-2
    leader.write_marker(TxnMarker(7, 0, False, 0))  # abort at 3
    leader.write_marker(TxnMarker(7, 0, True, 0))  # nothing open: no entry
    leader.append(_batch(8, 0))  # 5-7
    leader.write_marker(TxnMarker(8, 0, False, 0))  # abort at 8
    first, second = AbortedTxn(7, 0, 3, 4), AbortedTxn(8, 5, 8, 9)
    assert _txnindex_files(leader) == _where(leader, first, second)
    (name,) = _where(leader, first)
    raw = (leader.log.directory / name).read_bytes()[:34]  # the first entry
    assert raw == bytes.fromhex("0000" + f"{7:016x}" + f"{0:016x}" + f"{3:016x}" + f"{4:016x}")

    follower = _follower_copy(open_manager, tmp_path, leader)
    assert _txnindex_files(follower) == _where(follower, first, second)

    (second_name,) = _where(leader, second)
    (leader.log.directory / second_name).unlink()  # lost in a crash
    manager.shutdown()
    for snapshot in leader.log.directory.glob("*.snapshot"):
        snapshot.unlink()  # a crash writes none at close: the load replays the whole log
    leader = _leader(open_manager)  # loaded again: replays the log
    leader.rebuild_producer_state()  # as the replica manager does at load
    assert _txnindex_files(leader) == _where(leader, first, second)
    assert leader.log.aborted_txns() == [first, second]

    leader.truncate_to(8)  # the second abort's marker goes, and its entry
    assert _txnindex_files(leader) == _where(leader, first)


def test_an_abort_its_txnindex_cannot_take_is_still_reported_and_written_at_load(
    open_manager: OpenManager,
) -> None:
    """Found by the chaos run of seed 12 (a full disk): the .txnindex write failed, the
    marker was in the log, and read_committed fetches stopped reporting the abort, so
    consumers read aborted records. A failed index write must cost only the file."""
    manager = open_manager()
    leader = _leader(open_manager, manager=manager)
    leader.append(_batch(7, 0))  # 0-2
    leader.log.roll()  # the marker's segment, and its .txnindex, are this one's
    early = leader.fetch(0, 1 << 20, min_one_batch=True, read_committed=True)
    assert early.aborted == []  # a reader, before the disk fills
    blocked = leader.log.active_segment.txn_index.path
    blocked.mkdir()  # the file cannot be written from now on (as on a full disk)
    leader.write_marker(TxnMarker(7, 0, False, 0))  # abort at 3: no error
    read = leader.fetch(0, 1 << 20, min_one_batch=True, read_committed=True)
    assert read.aborted == [AbortedTxn(7, 0, 3, 4)]
    assert _values(leader, read_committed=True) == [b"7:0", b"7:1", b"7:2"]  # dropped by clients
    manager.shutdown()
    blocked.rmdir()
    reloaded = _leader(open_manager)
    reloaded.rebuild_producer_state()
    assert read_entries(blocked) == [AbortedTxn(7, 0, 3, 4)]
    assert reloaded.log.aborted_txns() == [AbortedTxn(7, 0, 3, 4)]
