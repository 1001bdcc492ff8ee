"""A partition as the broker serves it: its log, its leadership, its producers, and the
fetchers waiting for new data.

Leadership lives here and only here: ``become`` takes the partition's state from the
metadata image (leader, leader epoch, ISR, replicas), and ``check_leader`` is the one
test every leader-only request (Produce, Fetch from consumers, ListOffsets, DeleteRecords,
OffsetForLeaderEpoch) passes, with Kafka's errors: NOT_LEADER_OR_FOLLOWER on a broker
that does not lead it, FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH when the client's
epoch is older / newer than ours (KIP-320).

Until followers replicate, the leader's high watermark follows its log end offset, as on
a single broker; replication will replace ``advance_high_watermark`` with the ISR rule
(min LEO over the ISR, never moving back).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from partita.cluster.model import PartitionState
from partita.coordinator.producer_state import ProducerStateTable
from partita.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from partita.protocol.record_batch import (
    BATCH_LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    PRODUCER_ID_POS,
    iter_headers,
)
from partita.storage.log import AppendInfo, PartitionLog

# Kafka's smallest legal batch length: enough to reach the magic byte.
MIN_BATCH_LENGTH = 14
_PRODUCER_ID = struct.Struct(">q")


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    node_id: int
    leader: int = -1
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    waiters: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    def become(self, state: PartitionState) -> None:
        """Take the partition's state from the metadata image. Leader epochs only grow:
        an older state (a stale image) is ignored."""
        if state.leader_epoch < self.leader_epoch:
            return
        was_leader, old_epoch = self.is_leader, self.leader_epoch
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = list(state.isr)
        self.replicas = list(state.replicas)
        if self.is_leader and (
            self.log.epochs.latest_epoch < self.leader_epoch or not self.log.epochs.entries
        ):
            # Recorded at election, as Kafka does, so the new epoch starts at our log end
            # and the first produce need not write the leader-epoch checkpoint.
            self.log.epochs.assign(self.leader_epoch, self.log.log_end_offset)
            self.log.epochs.flush()
        if was_leader != self.is_leader or old_epoch != self.leader_epoch:
            # Parked fetches and acks answer now, with the new leadership's errors.
            self.wake_fetchers()

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Refuse a leader-only request unless we lead this partition at the client's
        epoch (-1: the client does not say)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} does not lead {self.topic}-{self.index} "
                f"(leader {self.leader}, epoch {self.leader_epoch})"
            )
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )

    def rebuild_producer_state(self) -> None:
        """Replay idempotent batch headers from the log (no record decoding)."""
        table = ProducerStateTable()
        for segment in self.log.segments:
            for _pos, header in segment.iter_headers(0):
                if header.producer_id >= 0 and header.base_sequence >= 0:
                    last_seq = header.base_sequence + header.last_offset_delta
                    table.record(
                        header.producer_id,
                        header.producer_epoch,
                        header.base_sequence,
                        last_seq,
                        header.base_offset,
                        header.last_offset,
                    )
        self.producers = table

    def append(self, records: bytes | memoryview) -> AppendInfo:
        """Append a producer's batches, applying the idempotence rules first."""
        view = memoryview(records)
        _check_produce_records(view)
        # Only the producer id is needed here; the log validates the whole header once.
        (producer_id,) = _PRODUCER_ID.unpack_from(view, PRODUCER_ID_POS)
        if producer_id < 0:
            info = self.log.append_as_leader(view, self.leader_epoch)
        else:
            info = self._append_idempotent(view)
        self.advance_high_watermark()
        return info

    def _append_idempotent(self, view: memoryview) -> AppendInfo:
        headers = [h for _pos, h in iter_headers(view)]
        if len(headers) != 1:
            # Kafka's producers send one batch per partition; more is not idempotent-safe.
            raise InvalidRecordError("an idempotent produce must carry exactly one batch")
        h = headers[0]
        last_seq = h.base_sequence + h.last_offset_delta
        duplicate = self.producers.check(h.producer_id, h.producer_epoch, h.base_sequence, last_seq)
        if duplicate is not None:
            return AppendInfo(
                duplicate.first_offset,
                duplicate.last_offset,
                -1,
                -1,
                0,
                0,
                self.log.log_start_offset,
            )
        info = self.log.append_as_leader(view, self.leader_epoch)
        self.producers.record(
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            last_seq,
            info.first_offset,
            info.last_offset,
        )
        return info

    def advance_high_watermark(self) -> None:
        if self.log.high_watermark != self.log.log_end_offset:
            self.log.update_high_watermark(self.log.log_end_offset)
            self.wake_fetchers()

    def wake_fetchers(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


def _check_produce_records(view: memoryview) -> None:
    """Kafka's first checks on a produce request's records, with Kafka's error codes:
    INVALID_RECORD when there is no complete batch or the format is older than v2 (the
    producer must not retry), CORRUPT_MESSAGE when the header itself is damaged."""
    if len(view) < LOG_OVERHEAD:
        raise InvalidRecordError("produce request carries no record batch")
    (batch_length,) = struct.unpack_from(">i", view, BATCH_LENGTH_POS)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {batch_length} is below the minimum")
    if LOG_OVERHEAD + batch_length > len(view):
        raise InvalidRecordError("produce request carries no complete record batch")
    magic = view[MAGIC_POS]
    if magic > MAGIC_V2:
        raise CorruptRecordError(f"unknown record batch magic {magic}")
    if magic != MAGIC_V2:
        raise InvalidRecordError(
            f"message format v{magic} is not accepted: produce needs record batches (v2)"
        )
