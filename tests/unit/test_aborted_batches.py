"""A read_committed reader drops exactly the batches of aborted transactions, with both
decoders (the consumer's and the Spark connector's column decoder)."""

from __future__ import annotations

from partita.client.fetched_records import read_batches
from partita.protocol.aborted_batches import aborted_batch_positions
from partita.protocol.control_records import TxnMarker, marker_batch
from partita.protocol.fetched_batches import whole_batches
from partita.protocol.record_columns import decode_columns
from partita.protocol.records import Record, build_batch

TS = 1_700_000_000_000


def data_batch(producer: int, offsets: range, transactional: bool = True) -> bytes:
    records = [Record(o, TS, None, f"p{producer}-{o}".encode()) for o in offsets]
    return build_batch(
        records,
        base_offset=offsets[0],
        producer_id=producer,
        producer_epoch=0,
        base_sequence=0,
        transactional=transactional,
    )


def marker(producer: int, offset: int, commit: bool) -> bytes:
    return marker_batch(TxnMarker(producer, 0, commit, 0), TS, base_offset=offset)


# Producer 1 aborts (0-1), producer 2 commits interleaved (2-3), producer 1 then commits a
# second transaction (6), producer 3 aborts one (8) whose marker is past this fetch, and a
# plain batch (10) is no transaction's.
LOG = [
    data_batch(1, range(0, 2)),
    data_batch(2, range(2, 4)),
    marker(1, 4, commit=False),
    marker(2, 5, commit=True),
    data_batch(1, range(6, 7)),
    marker(1, 7, commit=True),
    data_batch(3, range(8, 9)),
    data_batch(9, range(10, 11), transactional=False),
]
DATA = b"".join(LOG)
ABORTED = [(1, 0), (3, 8)]


def values_read(skip: frozenset[int], start: int = 0) -> list[bytes | None]:
    return [r.value for r in read_batches(("t", 0), DATA, start, True, skip)]


def test_only_aborted_transactions_batches_are_dropped() -> None:
    skip = aborted_batch_positions(DATA, ABORTED)
    assert values_read(skip) == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]


def test_the_same_producer_commits_after_its_abort() -> None:
    # Producer 1's ABORT marker ends its aborted transaction: its next one is kept.
    skip = aborted_batch_positions(DATA, [(1, 0)])
    assert b"p1-6" in values_read(skip)
    assert b"p1-0" not in values_read(skip)


def test_without_aborted_transactions_everything_is_read() -> None:
    assert aborted_batch_positions(DATA, None) == frozenset()
    assert aborted_batch_positions(DATA, []) == frozenset()
    assert len(values_read(frozenset())) == 7


def test_a_transaction_begun_before_the_fetch_is_dropped() -> None:
    # The fetch starts at producer 2's batch; producer 1's aborted transaction began
    # before it (first offset 0) and has no batch here but its marker.
    tail = b"".join(LOG[1:])
    late = [(1, 0), (3, 8)]
    skip = aborted_batch_positions(tail, late)
    values = [r.value for r in read_batches(("t", 0), tail, 2, True, skip)]
    assert values == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]


def test_a_non_transactional_batch_of_an_aborted_producer_is_kept() -> None:
    # Only transactional batches belong to a transaction (Kafka's rule).
    plain = data_batch(1, range(0, 1), transactional=False)
    assert aborted_batch_positions(plain, [(1, 0)]) == frozenset()


def test_the_column_decoder_drops_the_same_batches() -> None:
    skip = aborted_batch_positions(DATA, ABORTED)
    columns, next_offset = decode_columns(DATA, 0, 11, skip=skip)
    assert columns is not None
    assert columns.values.to_pylist() == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]
    assert columns.offsets.tolist() == [2, 3, 6, 10]
    assert next_offset == 11  # dropped and control batches are still read past


def test_positions_are_batch_starts() -> None:
    starts = {pos for pos, _ in whole_batches(DATA)}
    assert aborted_batch_positions(DATA, ABORTED) <= starts
    assert len(aborted_batch_positions(DATA, ABORTED)) == 2
