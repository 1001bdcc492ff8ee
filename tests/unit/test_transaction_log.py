"""The log side of transactions, without sockets: marker batches in Kafka's layout, and
a partition's open and aborted transactions and last stable offset."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partita.errors import CorruptRecordError
from partita.protocol.control_records import TxnMarker, marker_batch, read_marker
from partita.protocol.record_batch import read_header
from partita.protocol.records import Record, build_batch, decode_records
from partita.server.partition_transactions import AbortedTxn, PartitionTransactions
from partita.storage.log_manager import LogManager

OpenManager = Callable[..., LogManager]


def test_a_marker_batch_is_kafkas_control_batch() -> None:
    batch = marker_batch(TxnMarker(1000, 3, True, 7), timestamp_ms=1234, base_offset=42)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 3, -1)
    assert header.base_offset == 42 and header.records_count == 1
    _h, (record,) = decode_records(batch)
    assert record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7
    assert read_marker(batch) == TxnMarker(1000, 3, True, 7)
    assert not read_marker(marker_batch(TxnMarker(1, 0, False, 0), 0)).commit


def test_a_data_batch_or_a_strange_control_record_is_not_a_marker() -> None:
    data = build_batch([Record(0, 0, b"k", b"v")], producer_id=1, transactional=True)
    with pytest.raises(CorruptRecordError, match="not a transaction marker"):
        read_marker(data)
    odd = build_batch(
        [Record(0, 0, b"\x00\x00\x00\x05", b"\x00\x00\x00\x00\x00\x00")],
        producer_id=1, transactional=True, control=True,
    )  # fmt: skip
    with pytest.raises(CorruptRecordError, match="unknown control record"):
        read_marker(odd)


def test_the_lso_stops_at_the_earliest_open_transaction() -> None:
    txns = PartitionTransactions()
    assert txns.last_stable_offset(high_watermark=10) == 10
    txns.on_data(producer_id=1, base_offset=10, transactional=True)
    txns.on_data(producer_id=2, base_offset=12, transactional=True)
    txns.on_data(producer_id=1, base_offset=14, transactional=True)  # the same transaction
    txns.on_data(producer_id=3, base_offset=15, transactional=False)  # not a transaction
    assert txns.last_stable_offset(high_watermark=16) == 10
    assert txns.last_stable_offset(high_watermark=8) == 8  # never above the HW
    # Producer 1 commits at 16: no abort entry; producer 2's transaction holds it.
    assert txns.on_marker(TxnMarker(1, 0, True, 0), 16) is None
    assert txns.last_stable_offset(high_watermark=17) == 12
    # Producer 2 aborts at 17: its entry carries the LSO once it is closed (none open: 18).
    assert txns.on_marker(TxnMarker(2, 0, False, 0), 17) == AbortedTxn(2, 12, 17, 18)
    assert txns.last_stable_offset(high_watermark=18) == 18
    # A marker for a producer with nothing open here closes nothing and makes no entry.
    assert txns.on_marker(TxnMarker(9, 0, False, 0), 18) is None
    assert txns.open == {}


def test_an_abort_while_another_transaction_is_open_records_that_ones_start() -> None:
    txns = PartitionTransactions()
    txns.on_data(1, 5, True)
    txns.on_data(2, 3, True)
    assert txns.on_marker(TxnMarker(1, 0, False, 0), 9) == AbortedTxn(1, 5, 9, 3)


def test_a_fetch_collects_the_aborts_its_range_meets_and_stops_early(
    open_manager: OpenManager,
) -> None:
    """From the .txnindex files of the segments from the fetch offset's on."""
    log = open_manager().get_or_create("t", 0)
    aborts = [
        AbortedTxn(1, 0, 5, 6),
        AbortedTxn(2, 8, 12, 13),
        AbortedTxn(3, 20, 25, 26),
        AbortedTxn(4, 30, 35, 36),
        AbortedTxn(5, 40, 45, 46),
    ]
    for entry in aborts:  # each marker in a segment of its own, from offset 0
        while log.log_end_offset <= entry.last_offset:
            log.append_as_leader(build_batch([Record(0, 0, b"k", b"v")]), 0)
            if log.log_end_offset in (10, 30):
                log.roll()
        log.index_aborted_txn(entry)
    assert [s.base_offset for s in log.segments] == [0, 10, 30]
    # [10, 22): the abort at 8..12 and the one at 20..25; the search ends there, as that
    # entry's last stable offset is past 22 (the 30..35 one would also meet [10, 40)).
    assert log.aborted_between(10, 22) == [aborts[1], aborts[2]]
    assert log.aborted_between(0, 100) == aborts
    assert log.aborted_between(6, 8) == []
    assert log.aborted_between(13, 100) == aborts[2:]  # ended before 13: not reported
    assert log.aborted_between(31, 100) == aborts[3:]  # from offset 31's segment on
