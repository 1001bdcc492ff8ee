"""Did Spark read every produced flight exactly once? Checked from what the producer had
acknowledged (records per partition, the values' CRC-32 sum, how many distinct values)
against what the batch and streaming stages report having read (``JobResult``).

Within a partition a record's offset is its identity: the batch read must hold offsets
b .. b+n-1 of each partition exactly (b is 0, or where the partition ended before this run
when the job reuses a topic) (nothing missing, nothing beyond what was
acknowledged) and as many distinct values, with the same CRC-32 sum, as were produced (a
flight written twice by a retry would sit at two offsets with one value). The stream's
micro-batches must follow one another without a gap or an overlap, from offset b to the
end of every partition, their rows adding up to the records produced.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from partita.pipeline.spark_job import JobResult


@dataclass(frozen=True, slots=True)
class Produced:
    per_partition: dict[int, int]
    crc_sum: int
    distinct: int

    @property
    def total(self) -> int:
        return sum(self.per_partition.values())

    @staticmethod
    def of(values: list[bytes], per_partition: dict[int, int]) -> Produced:
        return Produced(dict(per_partition), sum(zlib.crc32(v) for v in values), len(set(values)))


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    summary: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def check(produced: Produced, result: JobResult, base: Mapping[int, int] | None = None) -> Verdict:
    """``base``: each partition's first offset of this run (default 0)."""
    base = base or {}
    verdict = Verdict()
    problems = verdict.problems
    # The batch read.
    for partition in sorted(set(produced.per_partition) | set(result.partition_rows)):
        want = produced.per_partition.get(partition, 0)
        rows = result.partition_rows.get(partition, 0)
        span = result.partition_offsets.get(partition)
        first = base.get(partition, 0)
        expected_span = (first, first + want - 1) if want else None
        if rows != want or span != expected_span:
            problems.append(
                f"batch, partition {partition}: read {rows:,} records at offsets {span}, "
                f"produced {want:,} (offsets {expected_span})"
            )
    if result.distinct_values != produced.distinct:
        problems.append(
            f"batch: {result.distinct_values:,} distinct flights read, {produced.distinct:,} "
            "produced"
        )
    if result.value_crc_sum != produced.crc_sum:
        problems.append("batch: the values read are not the values produced (CRC-32 sums differ)")
    # The stream.
    position = {p: base.get(p, 0) for p, n in produced.per_partition.items() if n}
    for number, (start, end, rows) in enumerate(result.stream_offsets):
        # The first batch may report no start.
        begin = start or {p: base.get(p, 0) for p in end}
        if any(begin.get(p, 0) != position.get(p, 0) for p in end):
            problems.append(
                f"stream, micro-batch {number}: starts at {begin}, the previous one ended at "
                f"{position}"
            )
        offsets = sum(o - begin.get(p, 0) for p, o in end.items())
        if offsets != rows:
            problems.append(f"stream, micro-batch {number}: {rows:,} rows over {offsets:,} offsets")
        position.update(end)
    ends = {p: o for p, o in position.items() if o > base.get(p, 0)}
    wanted_ends = {p: base.get(p, 0) + n for p, n in produced.per_partition.items() if n}
    if ends != wanted_ends:
        problems.append(f"stream: ended at offsets {ends}, the partitions end at {wanted_ends}")
    if result.stream_rows_in != produced.total:
        problems.append(f"stream: read {result.stream_rows_in:,} rows of {produced.total:,}")
    # The outputs, written in the sink's transactions.
    for topic in result.output_topics():
        written = result.written_to(topic)
        records, distinct = result.committed_out.get(topic, (0, 0))
        if records != written or distinct != records:
            problems.append(
                f"output '{topic}': {written:,} rows written, a read_committed reader finds "
                f"{records:,} records, {distinct:,} distinct"
            )
    if not problems:
        reused = any(base.values())
        verdict.summary = (
            f"exactly once: the batch read offsets {'b..b+n-1' if reused else '0..n-1'} of "
            f"every partition, once each, {result.distinct_values:,} distinct flights whose "
            f"CRC-32s add up to the produced ones'; the stream's {len(result.stream_offsets)} "
            f"micro-batches follow one another from offset {'b' if reused else '0'} to each "
            f"partition's end, {result.stream_rows_in:,} rows"
            + (" (b: where each partition ended before this run)" if reused else "")
            + _outputs_said(result)
        )
    return verdict


def _outputs_said(result: JobResult) -> str:
    held = [
        f"'{topic}' holds this run's {result.written_to(topic):,} rows once each"
        for topic in result.output_topics()
    ]
    if not held:
        return ""
    return "; " + ", ".join(held) + " (read_committed, from the sink's transactions)"
