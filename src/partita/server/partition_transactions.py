"""A partition's open transactions and its last stable offset (sans-IO).

A transaction is open on a partition from its producer's first transactional batch there
until the coordinator's marker for it. The last stable offset (LSO) is the first offset
of the earliest open transaction, else the high watermark: read_committed consumers read
below it, so they never see a transaction whose outcome is not yet known. An ABORT
marker becomes an entry of the segment's ``.txnindex`` (storage/txn_index.py), with the
partition's LSO as it stands once that transaction is closed.

The table is rebuilt by replaying batch headers (and the markers' records) from the
log when a partition is loaded or a replica becomes leader, as the producer state is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from partita.protocol.control_records import TxnMarker
from partita.storage.txn_index import AbortedTxn


@dataclass
class PartitionTransactions:
    # producer id -> offset of its open transaction's first batch here.
    open: dict[int, int] = field(default_factory=dict)

    def on_data(self, producer_id: int, base_offset: int, transactional: bool) -> None:
        """A data batch was appended at ``base_offset``."""
        if transactional:
            self.open.setdefault(producer_id, base_offset)

    def on_marker(self, marker: TxnMarker, offset: int) -> AbortedTxn | None:
        """A marker was appended at ``offset``: the producer's transaction here is over.
        An ABORT of a transaction that wrote here is returned for the ``.txnindex``; a
        marker for a producer with nothing open here (written before, or only to other
        partitions of the transaction) closes nothing and indexes nothing."""
        first = self.open.pop(marker.producer_id, None)
        if first is None or marker.commit:
            return None
        stable = self.first_unstable_offset()
        return AbortedTxn(
            marker.producer_id, first, offset, offset + 1 if stable is None else stable
        )

    def first_unstable_offset(self) -> int | None:
        return min(self.open.values()) if self.open else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def truncate_to(self, offset: int) -> None:
        """The log was cut at ``offset``: transactions that began at or past it are gone
        (what happened below it is replayed by whoever rebuilds the table)."""
        self.open = {pid: first for pid, first in self.open.items() if first < offset}
