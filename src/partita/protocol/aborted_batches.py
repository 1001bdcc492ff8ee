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
from partita.protocol.record_batch import BatchHeader

AbortedTxn = tuple[int, int]  # (producer id, first offset)


class AbortedFilter:
    """Fed every whole batch of one fetch in order (the decoder's own walk over the
    headers), says which to drop."""

    __slots__ = ("_next", "_ongoing", "_pending")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn[1])
        self._next = 0
        self._ongoing: set[int] = set()

    def drops(self, view: memoryview, pos: int, header: BatchHeader) -> bool:
        """Whether the batch at ``pos`` is an aborted transaction's data. Its control
        batches are not dropped here (decoders skip them anyway); its ABORT marker ends
        it."""
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= header.last_offset:
            self._ongoing.add(pending[self._next][0])
            self._next += 1
        if not header.is_transactional or header.producer_id not in self._ongoing:
            return False
        if not header.is_control:
            return True
        if _is_abort(view, pos):
            self._ongoing.discard(header.producer_id)
        return False


def aborted_filter(aborted: Iterable[AbortedTxn] | None) -> AbortedFilter | None:
    """A filter for a fetch's aborted transactions; None when there are none
    (read_uncommitted, or none in the range): nothing to ask per batch."""
    return AbortedFilter(aborted) if aborted else None


def _is_abort(view: memoryview, pos: int) -> bool:
    try:
        return not read_marker(view, pos).commit
    except CorruptRecordError:
        return False  # not a marker Kafka knows: it ends nothing
