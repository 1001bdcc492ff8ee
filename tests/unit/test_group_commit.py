"""Group commit: one write for the produce requests of an event-loop turn, with the
idempotence rules applied as if each request had been appended on its own."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest

from partita.coordinator.producer_state import InvalidProducerEpochError, OutOfOrderSequenceError
from partita.errors import KafkaStorageError
from partita.protocol.record_batch import read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.server.partition import Partition
from partita.storage.config import LogConfig
from partita.storage.log import AppendInfo, PartitionLog
from partita.storage.log_manager import LogManager
from tests.conftest import BASE_TS, make_batch

OpenManager = Callable[..., LogManager]


def idempotent(producer_id: int, sequence: int, n: int, *, epoch: int = 0) -> bytes:
    records = [
        Record(i, BASE_TS + i, None, f"{producer_id}:{sequence + i}".encode()) for i in range(n)
    ]
    return build_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )


def values(log: PartitionLog) -> list[bytes]:
    log.update_high_watermark(log.log_end_offset)
    return [r.value or b"" for batch in log.iter_batches() for r in decode_records(batch)[1]]


def submit_in_one_turn(
    partition: Partition, requests: list[bytes]
) -> list[AppendInfo | BaseException]:
    async def turn() -> list[AppendInfo | BaseException]:
        futures = [partition.submit(r) for r in requests]
        return await asyncio.gather(*futures, return_exceptions=True)

    return asyncio.run(turn())


def test_requests_of_one_turn_share_one_write(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_manager().get_or_create("t", 0)
    writes: list[int] = []
    real_writev = os.writev

    def counting_writev(fd: int, buffers: list[bytes]) -> int:
        writes.append(len(buffers))
        return real_writev(fd, buffers)

    monkeypatch.setattr(os, "writev", counting_writev)
    partition = Partition("t", 0, log)
    answers = submit_in_one_turn(partition, [make_batch(3, tag=i) for i in range(5)])
    assert [(a.first_offset, a.last_offset) for a in answers if isinstance(a, AppendInfo)] == [
        (0, 2),
        (3, 5),
        (6, 8),
        (9, 11),
        (12, 14),
    ]
    assert len(writes) == 1 and writes[0] == 10  # a prefix and a body per batch
    assert log.high_watermark == 15
    assert [read_header(b).base_offset for b in log.iter_batches()] == [0, 3, 6, 9, 12]


def test_one_producers_consecutive_batches_in_one_turn_are_in_order(
    open_manager: OpenManager,
) -> None:
    partition = Partition("t", 0, open_manager().get_or_create("t", 0))
    answers = submit_in_one_turn(
        partition, [idempotent(7, 0, 4), idempotent(7, 4, 4), idempotent(7, 8, 2)]
    )
    assert [a.first_offset for a in answers if isinstance(a, AppendInfo)] == [0, 4, 8]
    assert partition.producers.producers[7].last_seq == 9


def test_a_retry_in_the_same_turn_gets_the_originals_offsets(open_manager: OpenManager) -> None:
    partition = Partition("t", 0, open_manager().get_or_create("t", 0))
    partition.append(make_batch(2))  # offsets 0-1, so the retry's original is not at 0
    answers = submit_in_one_turn(
        partition, [idempotent(7, 0, 3), idempotent(7, 0, 3), idempotent(7, 3, 1)]
    )
    offsets = [(a.first_offset, a.last_offset) for a in answers if isinstance(a, AppendInfo)]
    assert offsets == [(2, 4), (2, 4), (5, 5)]
    assert values(partition.log)[2:] == [b"7:0", b"7:1", b"7:2", b"7:3"]


def test_a_refused_request_does_not_hold_back_the_others(open_manager: OpenManager) -> None:
    partition = Partition("t", 0, open_manager().get_or_create("t", 0))
    partition.append(idempotent(9, 0, 1, epoch=3))
    answers = submit_in_one_turn(
        partition,
        [
            idempotent(7, 0, 2),
            idempotent(7, 5, 2),  # a gap: out of order
            idempotent(9, 1, 1, epoch=2),  # a fenced epoch
            make_batch(1),
        ],
    )
    assert isinstance(answers[0], AppendInfo) and answers[0].first_offset == 1
    assert isinstance(answers[1], OutOfOrderSequenceError)
    assert isinstance(answers[2], InvalidProducerEpochError)
    assert isinstance(answers[3], AppendInfo) and answers[3].first_offset == 3
    assert partition.log.log_end_offset == 4


def test_a_failed_write_records_no_sequence(open_manager: OpenManager) -> None:
    partition = Partition("t", 0, open_manager().get_or_create("t", 0))
    partition.log.offline_reason = "injected"
    answers = submit_in_one_turn(partition, [idempotent(7, 0, 2), idempotent(7, 2, 2)])
    assert all(isinstance(a, KafkaStorageError) for a in answers)
    assert 7 not in partition.producers.producers
    partition.log.offline_reason = None
    # Were the failed batches remembered, this retry would be acknowledged as a
    # duplicate at offsets that hold nothing: an acknowledged write lost.
    answers = submit_in_one_turn(partition, [idempotent(7, 0, 2)])
    assert isinstance(answers[0], AppendInfo) and answers[0].batches == 1
    assert values(partition.log) == [b"7:0", b"7:1"]


def test_a_group_larger_than_a_segment_is_split_between_segments(
    open_manager: OpenManager,
) -> None:
    config = LogConfig(segment_bytes=2000)
    log = open_manager(config).get_or_create("t", 0)
    requests = [log.check_from_producer(make_batch(5, value_size=100, tag=i)) for i in range(6)]
    assert 2000 < sum(r.size for r in requests) < 6000
    answers = log.append_checked(requests, 0, offsets_from=0)
    assert [a.first_offset for a in answers] == [0, 5, 10, 15, 20, 25]
    assert len(log.segments) > 1
    assert all(segment.size <= config.segment_bytes for segment in log.segments)
    assert len(values(log)) == 30


def test_appends_planned_on_a_stale_log_end_are_refused(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    checked = log.check_from_producer(make_batch(3))
    log.append_as_leader(make_batch(1), 0)
    with pytest.raises(KafkaStorageError, match="planned from offset 0"):
        log.append_checked([checked], 0, offsets_from=0)
    assert log.log_end_offset == 1
