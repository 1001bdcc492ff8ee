from __future__ import annotations

from collections.abc import Callable

from partita.protocol.control_records import TxnMarker, marker_batch
from partita.protocol.record_batch import read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.cleaner import clean, clean_if_needed, cleanable_end
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager
from partita.storage.txn_index import AbortedTxn
from tests.conftest import BASE_TS, FakeClock

OpenManager = Callable[..., LogManager]
COMPACT = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=400,
    delete_retention_ms=1000,
    file_delete_delay_ms=0,
    min_cleanable_dirty_ratio=0.5,
)


def put(log: PartitionLog, key: str, value: str | None, ts: int = BASE_TS) -> int:
    record = Record(0, ts, key.encode(), None if value is None else value.encode())
    info = log.append_as_leader(build_batch([record]), 0)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def contents(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.key, r.value) for batch in log.iter_batches() for r in decode_records(batch)[1]
    ]


def test_keeps_latest_value_per_key_and_offsets(open_manager: OpenManager) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    for i in range(30):
        put(log, f"k{i % 3}", f"v{i}")
    log.roll()
    result = clean(log)
    assert result.records_removed == 27
    survivors = contents(log)
    assert survivors == [(27, b"k0", b"v27"), (28, b"k1", b"v28"), (29, b"k2", b"v29")]
    assert log.log_end_offset == 30
    offsets = [o for o, _, _ in survivors]
    assert offsets == sorted(offsets)
    # New appends continue after the old end; compaction never reuses offsets.
    assert put(log, "k0", "new") == 30


def test_active_segment_and_unreplicated_data_are_never_cleaned(
    open_manager: OpenManager,
) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    for i in range(4):
        put(log, "k", f"v{i}")
    assert len(log.segments) == 1
    clean(log)
    assert len(contents(log)) == 4  # all in the active segment
    log.roll()
    log.append_as_leader(build_batch([Record(0, BASE_TS, b"k", b"v4")]), 0)
    log.update_high_watermark(2)  # pretend followers have only the first two records
    clean(log)
    assert len(contents(log)) == 5  # the closed segment reaches above the high watermark
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    assert contents(log) == [(3, b"k", b"v3"), (4, b"k", b"v4")]  # v4 is still active
    log.roll()
    clean(log)
    assert contents(log) == [(4, b"k", b"v4")]


def test_tombstones_survive_one_pass_then_expire(
    open_manager: OpenManager, clock: FakeClock
) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    for i in range(12):
        put(log, f"k{i % 2}", f"v{i}")
    put(log, "k0", None)
    log.roll()
    clean(log)
    assert (12, b"k0", None) in contents(log)
    tombstone_batch = next(b for b in log.iter_batches() if read_header(b).base_offset == 12)
    header = read_header(tombstone_batch)
    assert header.has_delete_horizon and header.base_timestamp == clock.now + 1000
    assert decode_records(tombstone_batch)[1][0].timestamp == BASE_TS  # record ts kept
    clock.advance(999)
    clean(log)
    assert (12, b"k0", None) in contents(log)
    clock.advance(2)
    clean(log)
    assert contents(log) == [(11, b"k1", b"v11")]


def test_dirty_ratio_gates_cleaning(open_manager: OpenManager) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    for i in range(20):
        put(log, f"k{i}", "x")
    log.roll()
    assert clean_if_needed(log) is not None  # all dirty the first time
    assert clean_if_needed(log) is None  # nothing new
    assert log.first_dirty_offset == 20


def test_cleaning_survives_restart(open_manager: OpenManager) -> None:
    manager = open_manager(COMPACT)
    log = manager.get_or_create("t", 0)
    for i in range(30):
        put(log, f"k{i % 4}", f"v{i}")
    log.roll()
    clean(log)
    before = contents(log)
    manager.shutdown()
    reopened = open_manager(COMPACT).get("t", 0)
    assert contents(reopened) == before
    assert reopened.first_dirty_offset == 30


def test_compact_delete_applies_both(open_manager: OpenManager, clock: FakeClock) -> None:
    config = LogConfig(
        cleanup_policy=("compact", "delete"),
        segment_bytes=400,
        retention_ms=1000,
        file_delete_delay_ms=0,
    )
    log = open_manager(config).get_or_create("t", 0)
    for i in range(20):
        put(log, f"k{i % 2}", f"v{i}", ts=clock.now)
    log.roll()
    clean(log)
    assert len(contents(log)) == 2
    clock.advance(5000)
    log.enforce_retention()
    assert contents(log) == []


def in_transaction(log: PartitionLog, producer_id: int, key: str, value: str) -> int:
    batch = build_batch(
        [Record(0, BASE_TS, key.encode(), value.encode())],
        producer_id=producer_id, producer_epoch=0, transactional=True,
    )  # fmt: skip
    return log.append_as_leader(batch, 0, from_coordinator=True).first_offset


def end_transaction(log: PartitionLog, producer_id: int, commit: bool, first: int) -> int:
    """The marker, and for an abort its .txnindex entry, as the partition writes them."""
    marker = marker_batch(TxnMarker(producer_id, 0, commit, 0), BASE_TS)
    offset = log.append_as_leader(marker, 0, from_coordinator=True).first_offset
    if not commit:
        log.index_aborted_txn(AbortedTxn(producer_id, first, offset, offset + 1))
    log.update_high_watermark(log.log_end_offset)
    return offset


def batch_at(log: PartitionLog, offset: int) -> bytes | None:
    return next((b for b in log.iter_batches() if read_header(b).base_offset == offset), None)


def test_an_aborted_transactions_records_shadow_nothing_and_go(
    open_manager: OpenManager, clock: FakeClock
) -> None:
    # A group's committed offset (key k), then the same key written in a transaction that
    # was aborted (TxnOffsetCommit, then an ABORT marker): the aborted record must not
    # win the key (replaying the log would find no offset for the group at all), and it
    # goes. Its marker goes delete.retention.ms after its transaction's last batch went.
    log = open_manager(COMPACT).get_or_create("t", 0)
    put(log, "k", "committed")
    aborted = in_transaction(log, 7, "k", "aborted")
    abort_marker = end_transaction(log, 7, False, aborted)
    later = in_transaction(log, 7, "j", "x")  # the producer's next transaction commits
    commit_marker = end_transaction(log, 7, True, later)
    log.roll()
    clean(log)
    found = contents(log)
    assert [(o, k, v) for o, k, v in found if o not in (abort_marker, commit_marker)] == [
        (0, b"k", b"committed"),
        (3, b"j", b"x"),
    ]
    stamped = batch_at(log, abort_marker)
    assert stamped is not None and read_header(stamped).has_delete_horizon
    assert log.aborted_txns() == [AbortedTxn(7, 1, 2, 3)]
    clock.advance(1001)
    clean(log)
    assert batch_at(log, abort_marker) is None
    assert log.aborted_txns() == []  # the entry went with its marker
    assert batch_at(log, commit_marker) is not None  # its transaction's record is there
    # A later plain record wins over the committed one.
    put(log, "k", "newer")
    log.roll()
    clean(log)
    assert [r for r in contents(log) if r[1] == b"k"] == [(5, b"k", b"newer")]


def test_a_committed_transactions_records_compact_and_the_last_batch_keeps_its_header(
    open_manager: OpenManager,
) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    first = in_transaction(log, 8, "k", "v1")
    end_transaction(log, 8, True, first)
    second = in_transaction(log, 8, "k", "v2")
    second_marker = end_transaction(log, 8, True, second)
    put(log, "k", "v3")
    log.roll()
    clean(log)
    assert [r for r in contents(log) if r[1] == b"k"] == [(4, b"k", b"v3")]
    assert batch_at(log, first) is None
    # Producer 8's last batch stays as an empty batch (its sequence for replay), so its
    # transaction's marker stays too: replay must see the transaction end.
    kept = batch_at(log, second)
    assert kept is not None
    header = read_header(kept)
    assert header.records_count == 0 and header.producer_id == 8 and header.is_transactional
    assert batch_at(log, second_marker) is not None


def test_cleaning_stops_before_the_first_open_transaction(open_manager: OpenManager) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    for i in range(12):
        put(log, "k", f"v{i}")
    log.roll()
    log.first_unstable_offset = lambda: 5  # a transaction still open from offset 5
    assert cleanable_end(log) == 5
    log.first_unstable_offset = lambda: None
    assert cleanable_end(log) == log.active_segment.base_offset


def test_an_aborted_last_batch_is_emptied_once(open_manager: OpenManager) -> None:
    log = open_manager(COMPACT).get_or_create("t", 0)
    aborted = in_transaction(log, 9, "k", "aborted")
    end_transaction(log, 9, False, aborted)
    put(log, "j", "plain")
    log.roll()
    assert clean(log).records_removed == 1
    emptied = batch_at(log, aborted)
    assert emptied is not None and read_header(emptied).records_count == 0
    # The producer's last batch, emptied, and its marker (a batch of its transaction is
    # left) stay as they are: a later pass has nothing to rewrite.
    assert clean(log).segments_rewritten == 0
    assert [r for r in contents(log) if r[1] == b"k"] == []
