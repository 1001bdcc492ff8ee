"""A read_committed reader drops exactly the batches of aborted transactions, with both
decoders (the consumer's and the Spark connector's column decoder)."""

from __future__ import annotations

from partita.client.fetched_records import read_batches
from partita.protocol.aborted_batches import AbortedTxn, aborted_filter
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


def values_read(
    aborted: list[AbortedTxn] | None, data: bytes = DATA, start: int = 0
) -> list[bytes | None]:
    return [r.value for r in read_batches(("t", 0), data, start, True, aborted)]


def dropped_offsets(aborted: list[AbortedTxn], data: bytes = DATA) -> list[int]:
    """The base offsets of the batches the filter drops, fed every batch in order."""
    dropping = aborted_filter(aborted)
    assert dropping is not None
    view = memoryview(data)
    return [h.base_offset for pos, h in whole_batches(view) if dropping.drops(view, pos, h)]


def test_only_aborted_transactions_batches_are_dropped() -> None:
    assert values_read(ABORTED) == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]
    assert dropped_offsets(ABORTED) == [0, 8]


def test_the_same_producer_commits_after_its_abort() -> None:
    # Producer 1's ABORT marker ends its aborted transaction: its next one is kept.
    assert b"p1-6" in values_read([(1, 0)])
    assert b"p1-0" not in values_read([(1, 0)])


def test_without_aborted_transactions_everything_is_read() -> None:
    assert aborted_filter(None) is None
    assert aborted_filter([]) is None
    assert len(values_read(None)) == 7
    assert len(values_read([])) == 7


def test_a_transaction_begun_before_the_fetch_is_dropped() -> None:
    # The fetch starts at producer 2's batch; producer 1's aborted transaction began
    # before it (first offset 0) and has no batch here but its marker.
    tail = b"".join(LOG[1:])
    assert values_read(ABORTED, tail, 2) == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]


def test_a_non_transactional_batch_of_an_aborted_producer_is_kept() -> None:
    # Only transactional batches belong to a transaction (Kafka's rule).
    plain = data_batch(1, range(0, 1), transactional=False)
    assert dropped_offsets([(1, 0)], plain) == []


def test_the_column_decoder_drops_the_same_batches() -> None:
    columns, next_offset = decode_columns(DATA, 0, 11, aborted=ABORTED)
    assert columns is not None
    assert columns.values.to_pylist() == [b"p2-2", b"p2-3", b"p1-6", b"p9-10"]
    assert columns.offsets.tolist() == [2, 3, 6, 10]
    assert next_offset == 11  # dropped and control batches are still read past


def test_a_fetch_ending_in_an_aborted_batch_is_still_read_past() -> None:
    # The column decoder's next offset must move past a dropped batch at the end of a
    # fetch (its marker in the next one), or a reader would ask for it forever.
    head = b"".join(LOG[:2])
    columns, next_offset = decode_columns(head, 0, 11, aborted=[(1, 0), (2, 2)])
    assert columns is None
    assert next_offset == 4
