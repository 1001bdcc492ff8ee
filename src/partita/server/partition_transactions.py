"""A partition's open transactions (sans-IO), which hold the last stable offset back, and
the rule that makes an abort's entry, which read_committed fetches report.

A transaction is open on a partition from its producer's first transactional batch there
until the coordinator's marker for it. The last stable offset (LSO) is the first offset
of the earliest open transaction, else the high watermark: read_committed consumers read
below it, so they never see a transaction whose outcome is not yet known. An ABORT of a
transaction that wrote here is remembered as Kafka's ``.txnindex`` entry would be:
producer id, first offset, the marker's offset, and the partition's LSO once that
transaction was closed.

The open transactions are rebuilt by replaying the log's batch headers (and the markers'
one record) when a partition is loaded, truncated, or copied by a follower. The aborts
are the log's: each entry goes to its marker's segment's ``.txnindex``
(storage/txn_index.py), which fetches and the cleaner read, and which a replay puts right
after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from partita.protocol.control_records import TxnMarker
from partita.storage.txn_index import AbortedTxn

__all__ = ["AbortedTxn", "PartitionTransactions"]


@dataclass
class PartitionTransactions:
    # producer id -> offset of its open transaction's first batch here.
    open: dict[int, int] = field(default_factory=dict)

    def on_data(self, producer_id: int, base_offset: int, transactional: bool) -> None:
        """A data batch was appended at ``base_offset``."""
        if transactional:
            self.open.setdefault(producer_id, base_offset)

    def on_marker(self, marker: TxnMarker, offset: int) -> AbortedTxn | None:
        """A marker was appended at ``offset``: the producer's transaction here is over;
        the abort's entry if it aborted one. A marker for a producer with nothing open
        here (written again by a coordinator that retried, or for a partition the
        transaction never wrote, or whose batches compaction removed) ends nothing."""
        first = self.open.pop(marker.producer_id, None)
        if first is None or marker.commit:
            return None
        # Kafka's rule: the LSO once this transaction is closed, the next open one's
        # start, else just past the marker.
        stable = self.first_unstable_offset()
        return AbortedTxn(
            marker.producer_id, first, offset, offset + 1 if stable is None else stable
        )

    def first_unstable_offset(self) -> int | None:
        return min(self.open.values()) if self.open else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)
