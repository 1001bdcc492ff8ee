from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from partita.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
)
from partita.protocol.compression import Compression
from partita.protocol.record_batch import check_crc, read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.checkpoint import read_epochs
from partita.storage.config import LogConfig
from partita.storage.log import PartitionLog
from partita.storage.log_manager import LogManager
from tests.conftest import BASE_TS, FakeClock, make_batch

OpenManager = Callable[..., LogManager]


def offsets_of(partition_log: PartitionLog, start: int | None = None) -> list[int]:
    return [
        r.offset
        for batch in partition_log.iter_batches(start, partition_log.log_end_offset)
        for r in decode_records(batch)[1]
    ]


def fill(partition_log: PartitionLog, batches: int, *, n: int = 3, ts_step: int = 10) -> None:
    for i in range(batches):
        partition_log.append_as_leader(make_batch(n, ts=BASE_TS + i * ts_step, tag=i), 0)
    partition_log.update_high_watermark(partition_log.log_end_offset)


def test_append_assigns_contiguous_offsets_and_stamps_epoch(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    first = log.append_as_leader(make_batch(3), leader_epoch=5)
    second = log.append_as_leader(make_batch(2) + make_batch(4), leader_epoch=5)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset, second.batches) == (3, 8, 2)
    assert log.log_end_offset == 9
    log.update_high_watermark(9)
    batches = list(log.iter_batches())
    assert [read_header(b).base_offset for b in batches] == [0, 3, 5]
    for b in batches:
        header = read_header(b)
        assert header.partition_leader_epoch == 5
        check_crc(b, 0, header)
    assert offsets_of(log) == list(range(9))
    assert log.epochs.entries == [(5, 0)]


def test_a_writable_batch_gets_its_offsets_in_place(open_manager: OpenManager) -> None:
    """The broker's request frames are writable: the log stamps base offset and epoch
    into them and writes that buffer, and what is stored is exactly the stamped batch."""
    log = open_manager().get_or_create("t", 0)
    sent = make_batch(3, value_size=100)
    frame = bytearray(sent)
    log.append_as_leader(make_batch(2), leader_epoch=4)  # read-only: a new prefix
    log.append_as_leader(frame, leader_epoch=4)
    assert read_header(frame).base_offset == 2 and read_header(frame).partition_leader_epoch == 4
    log.append_as_leader(frame, leader_epoch=4)  # the same buffer again: stamped anew
    assert read_header(frame).base_offset == 5
    log.update_high_watermark(log.log_end_offset)
    stored = list(log.iter_batches())
    assert [read_header(b).base_offset for b in stored] == [0, 2, 5]
    for batch in stored[1:]:
        assert batch[17:] == sent[17:]  # the client's bytes from the CRC on, untouched
        check_crc(batch, 0, read_header(batch))
        assert read_header(batch).partition_leader_epoch == 4
    assert offsets_of(log) == list(range(8))


@pytest.mark.parametrize("codec", list(Compression))
def test_compressed_batches_stay_opaque(open_manager: OpenManager, codec: Compression) -> None:
    log = open_manager().get_or_create("t", 0)
    batch = make_batch(5, compression=codec, value_size=200)
    log.append_as_leader(make_batch(2), 0)
    log.append_as_leader(batch, 0)
    log.update_high_watermark(log.log_end_offset)
    stored = list(log.iter_batches())[1]
    # Only the base offset and epoch differ from what the producer sent.
    assert stored[17:] == batch[17:]
    assert offsets_of(log) == list(range(7))


def test_bad_batches_are_refused_with_kafka_errors(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(max_message_bytes=500, segment_bytes=100_000)).get_or_create(
        "t", 0
    )
    corrupt = bytearray(make_batch(2))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(corrupt), 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(make_batch(2)[:-3], 0)
    with pytest.raises(MessageTooLargeError):
        log.append_as_leader(make_batch(2, value_size=600), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0
    small_segments = open_manager(
        LogConfig(segment_bytes=200), data_dir=log.directory.parent.parent / "other"
    ).get_or_create("t", 0)
    with pytest.raises(RecordBatchTooLargeError):
        small_segments.append_as_leader(make_batch(3, value_size=100), 0)


def test_compacted_topics_refuse_keyless_records(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(cleanup_policy=("compact",))).get_or_create("t", 0)
    with pytest.raises(InvalidRecordError, match="key"):
        log.append_as_leader(make_batch(2, key=None), 0)


def test_log_append_time(open_manager: OpenManager, clock: FakeClock) -> None:
    log = open_manager(LogConfig(message_timestamp_type="LogAppendTime")).get_or_create("t", 0)
    info = log.append_as_leader(make_batch(3, ts=5), 0)
    assert info.log_append_time == clock.now
    log.update_high_watermark(3)
    batch = next(log.iter_batches())
    check_crc(batch, 0, read_header(batch))
    assert {r.timestamp for r in decode_records(batch)[1]} == {clock.now}


def test_segments_roll_by_bytes_and_keep_reads_whole(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_bytes=1000, index_interval_bytes=100)).get_or_create(
        "t", 0
    )
    fill(log, 40)
    assert len(log.segments) > 5
    assert all(s.size <= 1000 for s in log.segments)
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    assert offsets_of(log) == list(range(120))
    for start in (0, 1, 50, 119):
        assert offsets_of(log, start)[0] <= start


def test_segments_roll_when_their_indexes_are_full(open_manager: OpenManager) -> None:
    # Five entries per index; every batch after a segment's first is indexed, and each
    # has a newer timestamp, so both indexes fill together: six batches per segment.
    config = LogConfig(segment_index_bytes=5 * 8, index_interval_bytes=1)
    log = open_manager(config).get_or_create("t", 0)
    fill(log, 20)
    assert [s.base_offset for s in log.segments] == [0, 18, 36, 54]
    for segment in log.segments:
        assert len(segment.offset_index) <= 5 and len(segment.time_index) <= 5
    # After a truncation the active segment's indexes have room again, and use all of it.
    log.truncate_to(60)
    fill(log, 6)
    assert [s.base_offset for s in log.segments] == [0, 18, 36, 54, 72]
    assert len(log.segments[3].offset_index) == 5
    assert offsets_of(log) == list(range(log.log_end_offset))


def test_segment_roll_by_time_uses_record_timestamps(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_ms=1000)).get_or_create("t", 0)
    log.append_as_leader(make_batch(1, ts=BASE_TS), 0)
    log.append_as_leader(make_batch(1, ts=BASE_TS + 500), 0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, ts=BASE_TS + 1500), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_reads_stop_below_the_high_watermark(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    for _ in range(3):
        log.append_as_leader(make_batch(2), 0)
    log.update_high_watermark(4)
    assert offsets_of(log, 0) == list(range(6))  # iter_batches reads to the LEO
    region = log.read(0, 1 << 20)
    assert region is not None
    data = region.read()
    assert [r.offset for r in decode_records(data, 0)[1]] == [0, 1]
    assert len(data) == 2 * len(make_batch(2))
    assert log.read(4, 1 << 20) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)


def test_byte_limit_and_min_one_batch(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    fill(log, 5, n=10)
    size = len(make_batch(10, tag=0))
    region = log.read(0, 10)
    assert region is not None and region.length == size  # one whole batch despite the limit
    region = log.read(0, 10, min_one_batch=False)
    assert region is not None and region.length == 10  # a partial batch, as Kafka sends
    region = log.read(15, size + 5)
    assert region is not None and region.first_offset == 10 and region.length == size + 5


def test_offset_for_timestamp_and_max_timestamp(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_bytes=600, index_interval_bytes=50)).get_or_create("t", 0)
    fill(log, 30, n=3, ts_step=10)  # record k of batch i has ts BASE + 10*i + k
    assert log.offset_for_timestamp(BASE_TS) == (0, BASE_TS)
    assert log.offset_for_timestamp(BASE_TS + 101) == (31, BASE_TS + 101)
    assert log.offset_for_timestamp(BASE_TS + 103) == (33, BASE_TS + 110)
    assert log.offset_for_timestamp(BASE_TS + 10_000) is None
    assert log.max_timestamp_offset() == (89, BASE_TS + 292)
    # A record with a smaller timestamp later in the log does not change the answer.
    log.append_as_leader(make_batch(1, ts=BASE_TS), 0)
    assert log.max_timestamp_offset() == (89, BASE_TS + 292)


def test_retention_by_time(open_manager: OpenManager, clock: FakeClock) -> None:
    config = LogConfig(segment_bytes=500, retention_ms=1000, file_delete_delay_ms=0)
    log = open_manager(config).get_or_create("t", 0)
    clock.now = BASE_TS
    fill(log, 20, ts_step=100)  # timestamps span 2 seconds
    segments_before = len(log.segments)
    clock.now = BASE_TS + 2000
    deleted = log.enforce_retention()
    assert deleted > 0 and len(log.segments) == segments_before - deleted
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert all(clock.now - s.largest_timestamp <= 1000 for s in log.segments[:-1])
    assert offsets_of(log) == list(range(log.log_start_offset, 60))
    assert not list(log.directory.glob("*.deleted"))


def test_retention_by_size_keeps_the_newest(open_manager: OpenManager) -> None:
    config = LogConfig(segment_bytes=500, retention_bytes=1200, file_delete_delay_ms=0)
    log = open_manager(config).get_or_create("t", 0)
    fill(log, 30)
    log.enforce_retention()
    assert log.size_bytes <= 1200 + 500
    assert log.log_end_offset == 90
    assert offsets_of(log)[-1] == 89


def test_retention_never_deletes_above_the_high_watermark(
    open_manager: OpenManager, clock: FakeClock
) -> None:
    log = open_manager(LogConfig(segment_bytes=300, retention_ms=1)).get_or_create("t", 0)
    for i in range(10):
        log.append_as_leader(make_batch(3, tag=i), 0)
    clock.advance(10_000_000)
    assert log.enforce_retention() == 0  # HW is still 0
    log.update_high_watermark(log.log_end_offset)
    assert log.enforce_retention() > 0
    assert log.log_start_offset == log.log_end_offset  # everything aged out; log empty
    assert log.read(log.log_end_offset, 100) is None
    info = log.append_as_leader(make_batch(1), 0)
    assert info.first_offset == 30


def test_deleted_segments_linger_for_file_delete_delay(
    open_manager: OpenManager, clock: FakeClock
) -> None:
    config = LogConfig(segment_bytes=300, file_delete_delay_ms=60_000)
    log = open_manager(config).get_or_create("t", 0)
    fill(log, 10)
    region = log.read(0, 1 << 20)
    log.delete_records(9)
    assert list(log.directory.glob("*.log.deleted"))
    assert region is not None and len(region.read()) == region.length  # still readable
    clock.advance(60_001)
    assert log.purge_deleted_segments() >= 1
    assert not list(log.directory.glob("*.deleted"))


def test_delete_records(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_bytes=300)).get_or_create("t", 0)
    fill(log, 10)
    assert log.delete_records(14) == 14
    assert log.segments[0].base_offset <= 14
    with pytest.raises(OffsetOutOfRangeError):
        log.read(13, 100)
    assert offsets_of(log, 14)[0] <= 14
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(31)
    assert log.delete_records(-1) == 30


def test_truncate_to(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(segment_bytes=300, index_interval_bytes=10)).get_or_create("t", 0)
    for i in range(10):
        log.append_as_leader(make_batch(3, tag=i), leader_epoch=i // 4)
    log.update_high_watermark(30)
    log.truncate_to(12)
    assert log.log_end_offset == 12 and log.high_watermark == 12
    assert offsets_of(log) == list(range(12))
    assert log.epochs.entries == [(0, 0)]
    assert log.append_as_leader(make_batch(2), 3).first_offset == 12
    assert log.epochs.entries == [(0, 0), (3, 12)]
    log.truncate_to(0)
    assert log.log_end_offset == 0 and log.epochs.entries == []


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing(
    open_manager: OpenManager,
) -> None:
    """A replaced leader that wrote nothing in its epoch forgets it when told to cut at its
    log end, on disk too; otherwise it would fetch with an epoch its leader never had."""
    manager = open_manager()
    log = manager.get_or_create("t", 0)
    log.append_as_leader(make_batch(3), leader_epoch=0)
    log.epochs.assign(1, log.log_end_offset)  # elected, then replaced before any append
    log.epochs.flush()
    assert log.truncate_to(3) == 0
    assert log.log_end_offset == 3 and log.epochs.entries == [(0, 0)]
    assert read_epochs(log.epochs.path) == [(0, 0)]
    log.truncate_to(3)
    assert log.epochs.entries == [(0, 0)]  # the epochs of what it holds stay


def test_follower_append_keeps_offsets(open_manager: OpenManager) -> None:
    manager = open_manager()
    leader = manager.get_or_create("t", 0)
    follower = manager.get_or_create("t", 1)
    for epoch in (0, 0, 2):
        leader.append_as_leader(make_batch(3), epoch)
    leader.update_high_watermark(leader.log_end_offset)
    region = leader.read(0, 1 << 20)
    assert region is not None
    data = region.read()
    follower.append_as_follower(data[:-5])  # a partial last batch is left for later
    assert follower.log_end_offset == 6
    follower.append_as_follower(data[2 * len(make_batch(3)) :])
    assert follower.log_end_offset == 9
    assert follower.epochs.entries == [(0, 0), (2, 6)]
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data)  # offsets below the LEO


def test_follower_refuses_a_batch_that_ends_before_it_starts(open_manager: OpenManager) -> None:
    follower = open_manager().get_or_create("t", 0)
    # Absolute record offsets below the base give a negative lastOffsetDelta (CRC intact).
    batch = build_batch([Record(0, 1_000, None, b"v")], base_offset=6)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(batch)
    assert follower.log_end_offset == 0


def test_flush_messages_moves_the_recovery_point(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(flush_messages=5)).get_or_create("t", 0)
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 6


def test_flush_ms(open_manager: OpenManager, clock: FakeClock) -> None:
    log = open_manager(LogConfig(flush_ms=1000)).get_or_create("t", 0)
    log.append_as_leader(make_batch(3), 0)
    assert not log.maybe_flush()
    clock.advance(1000)
    assert log.maybe_flush() and log.recovery_point == 3


def test_clean_restart_restores_everything(open_manager: OpenManager, tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    manager = open_manager(config)
    log = manager.get_or_create("t", 0)
    fill(log, 20)
    log.delete_records(7)
    manager.shutdown()
    reopened = open_manager(config).get("t", 0)
    assert reopened.log_end_offset == 60
    assert reopened.high_watermark == 60
    assert reopened.log_start_offset == 7
    assert offsets_of(reopened, 7)[0] <= 7
    assert reopened.offset_for_timestamp(BASE_TS + 101) == (31, BASE_TS + 101)
    assert reopened.append_as_leader(make_batch(1), 0).first_offset == 60


def test_index_entries_point_at_batches(open_manager: OpenManager) -> None:
    log = open_manager(LogConfig(index_interval_bytes=100)).get_or_create("t", 0)
    fill(log, 30)
    segment = log.active_segment
    entries = segment.offset_index.entries()
    assert len(entries) > 5
    headers = dict(segment.iter_headers(0))
    for offset, position in entries:
        assert headers[position].last_offset == offset


def test_timestamp_lookup_skips_records_below_log_start(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(build_batch([Record(i, BASE_TS + i, b"k", b"v") for i in range(10)]), 0)
    log.update_high_watermark(10)
    log.delete_records(4)
    assert log.offset_for_timestamp(BASE_TS) == (4, BASE_TS + 4)


def test_truncating_into_a_batch_that_straddles_the_log_start(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(make_batch(2), 0)
    log.append_as_leader(make_batch(6), 0)  # offsets 2..7
    log.update_high_watermark(8)
    log.delete_records(4)
    log.truncate_to(5)
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert log.append_as_leader(make_batch(1), 0).first_offset == 5


def test_list_offset_specials(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    assert log.list_offset(-2) == (0, -1)
    assert log.list_offset(-3) == (-1, -1)
    fill(log, 3, n=2, ts_step=100)
    log.delete_records(1)
    assert log.list_offset(-2) == (1, -1)
    assert log.list_offset(-1) == (6, -1)
    assert log.list_offset(-3) == (5, BASE_TS + 201)
    assert log.list_offset(BASE_TS + 150) == (4, BASE_TS + 200)
    assert log.list_offset(BASE_TS + 999) == (-1, -1)
