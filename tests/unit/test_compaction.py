from __future__ import annotations

from collections.abc import Callable

from partita.protocol.control_records import TxnMarker, marker_batch
from partita.protocol.record_batch import read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.cleaner import clean, clean_if_needed
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager
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


def test_a_transactions_records_shadow_nothing_and_stay(open_manager: OpenManager) -> None:
    # A group's committed offset (key k), then the same key written in a transaction that
    # was aborted (TxnOffsetCommit, then an ABORT marker): cleaning must keep the
    # committed record, or replaying the log would find no offset for the group at all.
    log = open_manager(COMPACT).get_or_create("t", 0)
    put(log, "k", "committed")
    in_transaction = build_batch(
        [Record(0, BASE_TS, b"k", b"aborted")],
        producer_id=7, producer_epoch=0, transactional=True,
    )  # fmt: skip
    log.append_as_leader(in_transaction, 0, from_coordinator=True)
    marker = marker_batch(TxnMarker(7, 0, False, 0), BASE_TS)
    log.append_as_leader(marker, 0, from_coordinator=True)
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    clean(log)
    assert contents(log) == [
        (0, b"k", b"committed"),
        (1, b"k", b"aborted"),
        (2, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00"),
    ]
    # A later plain record still wins over both.
    put(log, "k", "newer")
    log.roll()
    clean(log)
    assert [r for r in contents(log) if r[1] == b"k"][-1] == (3, b"k", b"newer")
    assert (0, b"k", b"committed") not in contents(log)
