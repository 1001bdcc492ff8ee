"""The pipeline's exactly-once check (pipeline/exactly_once.py) on made-up read results:
it passes what a correct read reports and names each way a read can go wrong."""

from __future__ import annotations

import zlib

from partita.pipeline.exactly_once import Produced, check
from partita.pipeline.spark_job import JobResult

VALUES = [f"flight {i}".encode() for i in range(10)]
# Partition 0 got 6 records, partition 1 none, partition 2 got 4.
PRODUCED = Produced.of(VALUES, {0: 6, 2: 4})


def _read(**changes: object) -> JobResult:
    result = JobResult(
        rows_read=10,
        partition_rows={0: 6, 2: 4},
        partition_offsets={0: (0, 5), 2: (0, 3)},
        distinct_values=10,
        value_crc_sum=sum(zlib.crc32(v) for v in VALUES),
        stream_rows_in=10,
        stream_offsets=[({}, {0: 4, 2: 2}, 6), ({0: 4, 2: 2}, {0: 6, 2: 4}, 4)],
    )
    for name, value in changes.items():
        setattr(result, name, value)
    return result


def test_a_correct_read_passes() -> None:
    verdict = check(PRODUCED, _read())
    assert verdict.ok, verdict.problems
    assert "2 micro-batches" in verdict.summary and "10 distinct flights" in verdict.summary


def test_a_missing_record_fails() -> None:
    verdict = check(PRODUCED, _read(partition_rows={0: 5, 2: 4}, partition_offsets={0: (0, 4)}))
    assert not verdict.ok
    assert any("partition 0: read 5 records" in p for p in verdict.problems)


def test_a_record_written_twice_fails() -> None:
    # The same value at two offsets: the counts add up to one more, the distinct ones not.
    produced = Produced.of(VALUES, {0: 6, 2: 4})
    doubled = _read(
        partition_rows={0: 7, 2: 4}, partition_offsets={0: (0, 6), 2: (0, 3)}, rows_read=11
    )
    problems = check(produced, doubled).problems
    assert any("partition 0: read 7 records" in p for p in problems)


def test_foreign_values_fail() -> None:
    verdict = check(PRODUCED, _read(value_crc_sum=1))
    assert verdict.problems == [
        "batch: the values read are not the values produced (CRC-32 sums differ)"
    ]


def test_a_stream_that_skips_or_repeats_offsets_fails() -> None:
    skipped = [({}, {0: 4, 2: 2}, 6), ({0: 5, 2: 2}, {0: 6, 2: 4}, 3)]
    problems = check(PRODUCED, _read(stream_offsets=skipped, stream_rows_in=9)).problems
    assert any("micro-batch 1: starts at" in p for p in problems)
    assert any("read 9 rows of 10" in p for p in problems)
    repeated = [({}, {0: 4, 2: 2}, 6), ({0: 3, 2: 2}, {0: 6, 2: 4}, 5)]
    problems = check(PRODUCED, _read(stream_offsets=repeated, stream_rows_in=11)).problems
    assert any("micro-batch 1: starts at" in p for p in problems)


def test_a_stream_that_stops_short_fails() -> None:
    short = [({}, {0: 4, 2: 2}, 6)]
    problems = check(PRODUCED, _read(stream_offsets=short, stream_rows_in=6)).problems
    assert any("stream: ended at offsets {0: 4, 2: 2}" in p for p in problems)


def test_a_run_on_reused_topics_is_checked_from_where_each_partition_ended() -> None:
    # An earlier run left 100 records in partition 0 and 7 in partition 2: this run's
    # records sit at 100..105 and 7..10, and so must its reads.
    base = {0: 100, 1: 0, 2: 7}
    moved = _read(
        partition_offsets={0: (100, 105), 2: (7, 10)},
        stream_offsets=[({}, {0: 104, 2: 9}, 6), ({0: 104, 2: 9}, {0: 106, 2: 11}, 4)],
    )
    verdict = check(PRODUCED, moved, base)
    assert verdict.ok, verdict.problems
    assert "offsets b..b+n-1" in verdict.summary
    # The same reads judged as if the topics were new: every span is off.
    assert not check(PRODUCED, moved).ok
    # A read that took in the earlier run's records too fails.
    assert not check(PRODUCED, _read(), base).ok


def _with_outputs(report: tuple[int, int], hourly: tuple[int, int]) -> JobResult:
    # 3 carriers and 5 routes go to flights-report, 7 hourly windows to flights-hourly.
    return _read(
        rows_out={"carrier_on_time": 3, "route_on_time": 5, "hourly_departures": 7},
        committed_out={"flights-report": report, "flights-hourly": hourly},
    )


def test_outputs_read_back_once_each_pass() -> None:
    verdict = check(PRODUCED, _with_outputs((8, 8), (7, 7)))
    assert verdict.ok, verdict.problems
    assert "'flights-report' holds this run's 8 rows once each" in verdict.summary


def test_an_output_row_written_twice_or_lost_fails() -> None:
    twice = check(PRODUCED, _with_outputs((9, 8), (7, 7))).problems
    assert twice == [
        "output 'flights-report': 8 rows written, a read_committed reader finds 9 records, "
        "8 distinct"
    ]
    lost = check(PRODUCED, _with_outputs((8, 8), (6, 6))).problems
    assert lost == [
        "output 'flights-hourly': 7 rows written, a read_committed reader finds 6 records, "
        "6 distinct"
    ]


def test_an_output_written_and_never_read_back_fails() -> None:
    result = _with_outputs((8, 8), (7, 7))
    del result.committed_out["flights-hourly"]
    assert check(PRODUCED, result).problems == [
        "output 'flights-hourly': 7 rows written, a read_committed reader finds 0 records, "
        "0 distinct"
    ]
