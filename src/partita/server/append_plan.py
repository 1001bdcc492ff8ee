"""Group commit planning (sans-IO): which of a partition's queued produce requests are
written, at which offsets, and what the others are answered.

The broker appends every produce request that reaches a partition in one event-loop
turn with a single write (see ``Partition.submit``): a write system call per 16 KB
batch costs about as much as copying the batch, and the per-call bookkeeping in Python
more than that, so one write per request caps appends far below the disk's speed.

Requests are planned in arrival order, and the idempotence rules see each earlier
request of the group as already appended: a producer's batches 0-9 and 10-19 may land
in one group, and the second must not be refused as out of order. The planned
producer state is kept apart (``staged``) and adopted only once the write succeeded, so
a failed write leaves no sequence behind that a retry would be answered with as a
duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from partita.coordinator.producer_state import ProducerStateTable
from partita.errors import InvalidRecordError, KafkaError
from partita.storage.log import AppendInfo, ProducerBatches

Answer = AppendInfo | KafkaError


@dataclass(slots=True)
class AppendPlan:
    answers: list[Answer | None]  # per request; None until the write's outcome is known
    accepted: list[int] = field(default_factory=list)  # requests to write, in order
    # An in-group retry (same producer, same sequences) is answered like its original.
    same_as: dict[int, int] = field(default_factory=dict)
    staged: ProducerStateTable = field(default_factory=ProducerStateTable)

    def settle(self, written: Sequence[AppendInfo]) -> list[Answer]:
        """Every request's answer, given the infos of the accepted requests' write."""
        for i, info in zip(self.accepted, written, strict=True):
            self.answers[i] = info
        for i, original in self.same_as.items():
            self.answers[i] = self.answers[original]
        return self._complete()

    def fail(self, error: KafkaError) -> list[Answer]:
        """Every request's answer when the write failed: the planned ones share its error."""
        return self._complete(error)

    def _complete(self, default: Answer | None = None) -> list[Answer]:
        answers: list[Answer] = []
        for planned in self.answers:
            answer = planned if planned is not None else default
            assert answer is not None, "a planned request was left unanswered"
            answers.append(answer)
        return answers


def plan_appends(
    requests: Sequence[ProducerBatches],
    producers: ProducerStateTable,
    log_end_offset: int,
    log_start_offset: int,
) -> AppendPlan:
    plan = AppendPlan(answers=[None] * len(requests))
    touched = {r.first.producer_id for r in requests if r.first.producer_id >= 0}
    plan.staged = producers.copy_of(touched)
    planned_at: dict[int, int] = {}  # first offset -> accepted request (for in-group retries)
    next_offset = log_end_offset
    for i, request in enumerate(requests):
        first = request.first
        count = _record_offsets(request)
        if first.producer_id >= 0:
            if len(request.headers) != 1:
                # Kafka's producers send one batch per partition; more is not idempotent-safe.
                plan.answers[i] = InvalidRecordError("an idempotent produce must carry one batch")
                continue
            last_seq = first.base_sequence + first.last_offset_delta
            try:
                duplicate = plan.staged.check(
                    first.producer_id, first.producer_epoch, first.base_sequence, last_seq
                )
            except KafkaError as exc:
                plan.answers[i] = exc
                continue
            if duplicate is not None:
                if duplicate.first_offset >= log_end_offset:
                    plan.same_as[i] = planned_at[duplicate.first_offset]
                else:
                    first_offset, last_offset = duplicate.first_offset, duplicate.last_offset
                    plan.answers[i] = AppendInfo(
                        first_offset, last_offset, -1, -1, 0, 0, log_start_offset
                    )
                continue
            plan.staged.record(
                first.producer_id,
                first.producer_epoch,
                first.base_sequence,
                last_seq,
                next_offset,
                next_offset + count - 1,
            )
        planned_at[next_offset] = i
        plan.accepted.append(i)
        next_offset += count
    return plan


def _record_offsets(request: ProducerBatches) -> int:
    return sum(header.last_offset_delta + 1 for _pos, header in request.headers)
