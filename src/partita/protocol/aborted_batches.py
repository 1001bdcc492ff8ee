"""Which fetched batches a read_committed reader drops: those of aborted transactions.

A read_committed fetch returns records up to the last stable offset and, beside them, the
aborted transactions that overlap the returned range as (producer id, first offset). The
broker does not remove anything: the reader does, as Java's consumer does. Walking the
batches in offset order, a producer's transaction becomes "aborted and ongoing" once a
batch reaches its first offset; its transactional data batches are dropped until its
ABORT marker, which ends it (the same producer may start a new transaction after). A
committed transaction is never in the list, so its batches are kept.

Every fetch answers with the aborted transactions for its own range, so nothing here is
kept from one fetch to the next.
"""

from __future__ import annotations

from collections.abc import Iterable

from partita.errors import CorruptRecordError
from partita.protocol.control_records import read_marker
from partita.protocol.fetched_batches import whole_batches

AbortedTxn = tuple[int, int]  # (producer id, first offset)


def aborted_batch_positions(
    data: bytes | memoryview, aborted: Iterable[AbortedTxn] | None
) -> frozenset[int]:
    """The byte positions, in ``data``, of the batches that belong to aborted transactions."""
    pending = sorted(aborted or (), key=lambda txn: txn[1])
    if not pending:
        return frozenset()
    view = memoryview(data)
    ongoing: set[int] = set()
    dropped: set[int] = set()
    next_txn = 0
    for pos, header in whole_batches(view):
        while next_txn < len(pending) and pending[next_txn][1] <= header.last_offset:
            ongoing.add(pending[next_txn][0])
            next_txn += 1
        if not header.is_transactional or header.producer_id not in ongoing:
            continue
        if header.is_control:
            if _is_abort(view, pos):
                ongoing.discard(header.producer_id)
        else:
            dropped.add(pos)
    return frozenset(dropped)


def _is_abort(view: memoryview, pos: int) -> bool:
    try:
        return not read_marker(view, pos).commit
    except CorruptRecordError:
        return False  # not a marker Kafka knows: it ends nothing
