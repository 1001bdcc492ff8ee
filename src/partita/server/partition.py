"""A partition as the broker serves it: its log, its leadership, its producers, and the
fetchers waiting for new data.

On a single broker every partition is led here with an ISR of one, so the high watermark
follows the log end offset. Replication will replace ``advance_high_watermark`` with the
ISR rule (min LEO over the ISR, never moving back).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field

from partita.coordinator.producer_state import ProducerStateTable
from partita.errors import CorruptRecordError, InvalidRecordError, KafkaError, UnknownServerError
from partita.protocol.record_batch import (
    BATCH_LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
)
from partita.server.append_plan import Answer, plan_appends
from partita.storage.log import AppendInfo, PartitionLog, ProducerBatches

log = logging.getLogger(__name__)

# Kafka's smallest legal batch length: enough to reach the magic byte.
MIN_BATCH_LENGTH = 14


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    # Produce requests of this event-loop turn, written together (group commit).
    pending: list[tuple[ProducerBatches, asyncio.Future[AppendInfo]]] = field(default_factory=list)

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
        """Append a producer's batches now, applying the idempotence rules first."""
        answer = self._commit([self._check(records)])[0]
        if isinstance(answer, KafkaError):
            raise answer
        return answer

    def submit(self, records: bytes | memoryview) -> asyncio.Future[AppendInfo]:
        """Queue a produce request's batches for this event-loop turn's group commit.

        A request that is bad in itself is refused here, at once; the others of the turn
        are written together by one call to the log when the turn's tasks have run, and
        each future resolves only after that write (or with its error).
        """
        checked = self._check(records)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendInfo] = loop.create_future()
        if not self.pending:
            loop.call_soon(self._commit_pending)
        self.pending.append((checked, future))
        return future

    def _check(self, records: bytes | memoryview) -> ProducerBatches:
        view = memoryview(records)
        _check_produce_records(view)
        return self.log.check_from_producer(view)

    def _commit_pending(self) -> None:
        pending, self.pending = self.pending, []
        try:
            answers = self._commit([checked for checked, _future in pending])
        except Exception as exc:  # a bug: answer every producer rather than hang them
            log.exception("group commit failed", extra={"partition": self.log.name})
            error = UnknownServerError(f"{type(exc).__name__}: {exc}")
            answers = [error] * len(pending)
        for (_checked, future), answer in zip(pending, answers, strict=True):
            if future.cancelled():
                continue
            if isinstance(answer, KafkaError):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    def _commit(self, requests: list[ProducerBatches]) -> list[Answer]:
        leo = self.log.log_end_offset
        plan = plan_appends(requests, self.producers, leo, self.log.log_start_offset)
        if not plan.accepted:
            return plan.settle([])
        accepted = [requests[i] for i in plan.accepted]
        try:
            written = self.log.append_checked(accepted, self.leader_epoch, offsets_from=leo)
        except KafkaError as exc:
            return plan.fail(exc)
        self.producers.adopt(plan.staged)
        self.advance_high_watermark()
        return plan.settle(written)

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
