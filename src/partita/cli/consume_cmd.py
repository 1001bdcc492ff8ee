"""``partita consume``: print records, like ``kcat -C``.

``--offset`` follows kcat: ``beginning``, ``end``, an absolute offset (N >= 0), or a
negative N, counted back from the end of each partition (``-1``: its last record; never
before the log start).
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client
from partita.cli.record_output import ENCODINGS, FORMATS, record_formatter

if TYPE_CHECKING:
    from partita.client.consumer import AsyncConsumer

TopicPartition = tuple[str, int]
Start = int | str  # "earliest", "latest", an offset, or a negative count back from the end


def start_spec(offset: str) -> Start:
    if offset in ("beginning", "earliest"):
        return "earliest"
    if offset in ("end", "latest"):
        return "latest"
    try:
        return int(offset)
    except ValueError:
        raise fail(
            f"--offset must be beginning, end, an offset or -N (N back from the end), "
            f"not {offset!r}"
        ) from None


async def seek_to_start(
    consumer: AsyncConsumer, tps: list[TopicPartition], start: Start, when: int | None
) -> None:
    """Position every partition where the options say reading starts."""
    if when is not None:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, when))
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            hit = found[tp]
            consumer.seek(tp, hit[0] if hit is not None else ends[tp])
    elif isinstance(start, int) and start >= 0:
        for tp in tps:
            consumer.seek(tp, start)
    elif isinstance(start, int):  # kcat's -N: N records back from each partition's end
        ends = await consumer.end_offsets(tps)
        firsts = await consumer.beginning_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(firsts[tp], ends[tp] + start))
    # "earliest" / "latest": the consumer's auto_offset_reset, at the first fetch


def consume(
    topic: str = typer.Argument(..., help="Topic to read."),
    offset: str = typer.Option(
        "beginning",
        "-o",
        "--offset",
        help="Where to start in each partition: beginning, end, an offset, or -N for the "
        "last N records (as kcat). With --group: only beginning or end, for partitions the "
        "group has no offset for.",
    ),
    from_time: str | None = typer.Option(
        None, "--from-time", help="Start at the first record at or after this ISO time."
    ),
    partition: list[int] = typer.Option([], "-p", "--partition", help="Only these partitions."),
    count: int = typer.Option(0, "-n", "--count", help="Stop after N records (0: no limit)."),
    group: str | None = typer.Option(
        None,
        "-g",
        "--group",
        help="Consume as a member of this group: start from its committed offsets (else "
        "--offset) and commit what was read.",
    ),
    exit_at_end: bool = typer.Option(
        True, "--exit/--follow", help="Stop at the end of the log, or keep waiting."
    ),
    fmt: str = typer.Option(
        "text", "--format", help="text (partition, offset, timestamp, key, value), value, json."
    ),
    encoding: str = typer.Option(
        "text",
        "--encoding",
        help="How keys, values and header values are shown: text (UTF-8; bytes that are "
        "not become U+FFFD), hex or base64 (any bytes, exactly).",
    ),
    isolation_level: str = typer.Option(
        "read_uncommitted",
        "--isolation-level",
        help="read_committed: only committed transactions' records, up to the last stable "
        "offset (where the oldest open transaction begins); read_uncommitted: everything "
        "up to the high watermark, aborted records too.",
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Print records. Example: partita consume events -o -10 --format json --encoding base64"""
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise fail(
            f"--isolation-level must be read_uncommitted or read_committed, not {isolation_level!r}"
        )
    if fmt not in FORMATS:
        raise fail(f"--format must be {', '.join(FORMATS)}, not {fmt!r}")
    if encoding not in ENCODINGS:
        raise fail(f"--encoding must be {', '.join(ENCODINGS)}, not {encoding!r}")
    start = start_spec(offset)
    if group is not None and isinstance(start, int):
        raise fail(
            "with --group, --offset can only be beginning or end: the group's committed "
            "offsets say where each partition starts"
        )
    when: int | None = None
    if from_time is not None:
        try:
            when = int(datetime.fromisoformat(from_time).timestamp() * 1000)
        except ValueError:
            raise fail(f"--from-time {from_time!r} is not an ISO date-time") from None
    line_for = record_formatter(fmt, encoding)
    reset = start if isinstance(start, str) else "earliest"

    async def go_group(group_id: str) -> int:
        from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

        async with AsyncConsumer(
            bootstrap,
            auto_offset_reset=reset,
            group_id=group_id,
            partition_assignment_strategy=["range"],
            security=client_settings(),
            isolation_level=isolation_level,
        ) as consumer:
            await consumer.cluster.topic(topic, auto_create=False)
            consumer.subscribe([topic])
            printed = 0
            while True:
                records = await consumer.getmany(500)
                for i, record in enumerate(records):
                    print(line_for(record))
                    printed += 1
                    if count and printed >= count:
                        # Only printed records count as consumed: the rest of this batch
                        # is handed back, so the group resumes at the first unprinted one.
                        for rest in reversed(records[i + 1 :]):
                            consumer.seek((rest.topic, rest.partition), rest.offset)
                        return printed
                owned = sorted(consumer.assignment())
                if exit_at_end and not records and owned:
                    ends = await consumer.end_offsets(owned)
                    positions = [await consumer.position(tp) for tp in owned]
                    if all(pos >= ends[tp] for pos, tp in zip(positions, owned, strict=True)):
                        return printed

    async def go() -> int:
        if group is not None:
            return await go_group(group)
        from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

        async with AsyncConsumer(
            bootstrap,
            auto_offset_reset=reset,
            security=client_settings(),
            isolation_level=isolation_level,
        ) as consumer:
            info = await consumer.cluster.topic(topic, auto_create=False)
            tps = [(topic, p) for p in (partition or sorted(info.leaders))]
            consumer.assign(tps)
            await seek_to_start(consumer, tps, start, when)
            ends = await consumer.end_offsets(tps) if exit_at_end else {}
            printed = 0
            while True:
                for record in await consumer.getmany(500):
                    print(line_for(record))
                    printed += 1
                    if count and printed >= count:
                        return printed
                if exit_at_end:
                    positions = [await consumer.position(tp) for tp in tps]
                    if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                        return printed

    started = time.monotonic()
    try:
        printed = run_client(bootstrap, go())
    except KeyboardInterrupt:
        return
    print(f"consumed {printed} records in {time.monotonic() - started:.1f}s", file=sys.stderr)
