"""Idempotent producer state for one partition (sans-IO).

For each producer id the partition remembers its epoch and the last five batches it
appended (sequence range and offsets), like Kafka's ProducerStateManager:

- a batch that repeats one of those five is a retry: acknowledge it again with its
  original offsets, do not append it twice;
- a batch whose first sequence is not last sequence + 1 is OUT_OF_ORDER_SEQUENCE_NUMBER;
- an epoch older than the producer's is INVALID_PRODUCER_EPOCH; a newer epoch must
  start again at sequence 0.

The state survives restarts: the log keeps it in Kafka's ``.snapshot`` files
(storage/producer_snapshot.py) at each segment roll and at a clean close, and loading a
partition starts from the newest one and replays the batch headers after it. As in
Kafka, a snapshot keeps each producer's last batch only, so after a load a retry of
one of the four before it is refused as out of order instead of answered again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from partita.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from partita.storage.producer_snapshot import ProducerSnapshotEntry

MAX_SEQUENCE = 2**31 - 1
BATCHES_REMEMBERED = 5


@dataclass(frozen=True, slots=True)
class BatchSequence:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchSequence] = field(default_factory=lambda: deque(maxlen=BATCHES_REMEMBERED))
    # The epoch of the transaction coordinator that last wrote a marker for the producer
    # here (the leader epoch of its __transaction_state partition): older ones are fenced.
    coordinator_epoch: int = -1
    last_timestamp: int = -1  # the max timestamp of its last batch or marker here

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def snapshot_entry(self, producer_id: int, txn_first_offset: int) -> ProducerSnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return ProducerSnapshotEntry(
            producer_id,
            self.epoch,
            last.last_seq if last else -1,
            last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            self.last_timestamp,
            self.coordinator_epoch,
            txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, entry: ProducerSnapshotEntry) -> ProducerEntry:
        loaded = cls(
            entry.epoch,
            coordinator_epoch=entry.coordinator_epoch,
            last_timestamp=entry.timestamp,
        )
        if entry.last_offset >= 0:
            loaded.batches.append(
                BatchSequence(
                    entry.last_sequence - entry.offset_delta,
                    entry.last_sequence,
                    entry.last_offset - entry.offset_delta,
                    entry.last_offset,
                )
            )
        return loaded


def next_sequence(seq: int) -> int:
    return 0 if seq == MAX_SEQUENCE else seq + 1


class ProducerStateTable:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(
        self, producer_id: int, epoch: int, first_seq: int, last_seq: int
    ) -> BatchSequence | None:
        """Validate a batch before appending; return the original if it is a duplicate."""
        entry = self.producers.get(producer_id)
        if entry is None:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} is unknown here and sent sequence {first_seq}, not 0"
                )
            return None
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} started epoch {epoch} at sequence {first_seq}, not 0"
                )
            return None
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        if first_seq != next_sequence(entry.last_seq):
            raise OutOfOrderSequenceError(
                f"producer {producer_id} sent sequence {first_seq}, expected "
                f"{next_sequence(entry.last_seq)}"
            )
        return None

    def record(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int = -1,
    ) -> None:
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(epoch)
            self.producers[producer_id] = entry
        entry.batches.append(BatchSequence(first_seq, last_seq, first_offset, last_offset))
        entry.last_timestamp = timestamp

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        """A batch the broker writes for a producer (a transaction's offsets, a marker)
        may not carry an epoch older than the producer's: that instance was fenced."""
        entry = self.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id} epoch {epoch} is older than the current {entry.epoch}"
            )

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker may carry neither an epoch older than the producer's nor
        a coordinator epoch older than the last marker's: a coordinator that lost its
        partition must not end the next transaction of the same producer."""
        self.check_epoch(producer_id, epoch)
        entry = self.producers.get(producer_id)
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}"
            )

    def on_marker(
        self, producer_id: int, epoch: int, coordinator_epoch: int, timestamp: int = -1
    ) -> None:
        """A transaction marker was written: a newer epoch (the coordinator fenced the
        producer) refuses older ones from now on and starts again at sequence 0."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(
                epoch, coordinator_epoch=entry.coordinator_epoch if entry else -1
            )
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.last_timestamp = timestamp
