"""``partita produce`` and ``partita consume``, like kcat -P / -C."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import typer
from rich.progress import BarColumn, Progress, TransferSpeedColumn

from partita.cli.common import bootstrap_option, fail
from partita.client.producer import AsyncProducer


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--header expects key=value, got {item!r}")
        out.append((key, value.encode()))
    return out


def produce(
    topic: str = typer.Argument(..., help="Topic to write to."),
    file: Path | None = typer.Option(None, "-f", "--file", help="Read lines from this file."),
    key_sep: str | None = typer.Option(
        None, "--key-sep", help="Split each line into key and value at the first SEP."
    ),
    partition: int | None = typer.Option(None, "-p", "--partition", help="Explicit partition."),
    partitioner: str = typer.Option(
        "default",
        "--partitioner",
        help="default (murmur2 keys, sticky keyless), round_robin, sticky, or module:callable.",
    ),
    header: list[str] = typer.Option([], "-H", "--header", help="key=value, repeatable."),
    compression: str = typer.Option(
        "none", "-z", "--compression", help="none, gzip, snappy, lz4, zstd."
    ),
    acks: str = typer.Option("all", "--acks", help="0, 1 or all."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Write one record per input line (stdin or --file).

    Example: printf 'user1:hello\\n' | partita produce events --key-sep :
    """
    headers = _headers(header)
    source: TextIO = sys.stdin
    total_bytes = 0
    if file is not None:
        try:
            source = open(file, encoding="utf-8")  # noqa: SIM115 - closed below
            total_bytes = file.stat().st_size
        except OSError as exc:
            raise fail(f"cannot read {file}: {exc.strerror}") from None

    async def go() -> int:
        sent = 0
        async with AsyncProducer(
            bootstrap, acks=acks, compression_type=compression, partitioner=partitioner
        ) as producer:
            with Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                TransferSpeedColumn(),
                transient=True,
                disable=file is None,
            ) as progress:
                task = progress.add_task(f"producing to {topic}", total=total_bytes or None)
                futures = []
                for line in source:
                    text = line.rstrip("\n")
                    key: bytes | None = None
                    if key_sep is not None and key_sep in text:
                        raw_key, text = text.split(key_sep, 1)
                        key = raw_key.encode()
                    futures.append(
                        await producer.send(
                            topic, text.encode(), key, partition=partition, headers=headers
                        )
                    )
                    progress.advance(task, len(line.encode()))
                    sent += 1
                await producer.flush()
                failed = [f.exception() for f in futures if f.exception() is not None]
                if failed:
                    raise failed[0]  # type: ignore[misc]
        return sent

    try:
        count = asyncio.run(go())
    except ValueError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from None
    finally:
        if source is not sys.stdin:
            source.close()
    print(f"produced {count} records to {topic}", file=sys.stderr)


def _start_spec(offset: str) -> int | str:
    if offset in ("beginning", "earliest"):
        return "earliest"
    if offset in ("end", "latest"):
        return "latest"
    try:
        return int(offset)
    except ValueError:
        raise fail(f"--offset must be beginning, end or a number, not {offset!r}") from None


def _format(record: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": None if record.key is None else record.key.decode("utf-8", "replace"),
                "value": None if record.value is None else record.value.decode("utf-8", "replace"),
                "headers": {k: (v or b"").decode("utf-8", "replace") for k, v in record.headers},
            }
        )
    value = (record.value or b"").decode("utf-8", "replace")
    if fmt == "value":
        return value
    key = "" if record.key is None else record.key.decode("utf-8", "replace")
    return f"{record.partition}\t{record.offset}\t{record.timestamp}\t{key}\t{value}"


def consume(
    topic: str = typer.Argument(..., help="Topic to read."),
    offset: str = typer.Option(
        "beginning", "-o", "--offset", help="beginning, end, or an offset (per partition)."
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
    bootstrap: str = bootstrap_option(),
) -> None:
    """Print records. Example: partita consume events -o beginning -n 10 --format json"""
    if fmt not in ("text", "value", "json"):
        raise fail("--format must be text, value or json")
    start = _start_spec(offset)
    when: int | None = None
    if from_time is not None:
        try:
            when = int(datetime.fromisoformat(from_time).timestamp() * 1000)
        except ValueError:
            raise fail(f"--from-time {from_time!r} is not an ISO date-time") from None

    # Imported here: the consumer's decoder loads compiled code (numba, ~0.8 s) that
    # every other command, and --help, should not wait for.
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    async def go_group(group_id: str) -> int:
        reset = start if isinstance(start, str) else "earliest"
        async with AsyncConsumer(
            bootstrap,
            auto_offset_reset=reset,
            group_id=group_id,
            partition_assignment_strategy=["range"],
        ) as consumer:
            await consumer.cluster.topic(topic, auto_create=False)
            consumer.subscribe([topic])
            printed = 0
            while True:
                records = await consumer.getmany(500)
                for i, record in enumerate(records):
                    print(_format(record, fmt))
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
        reset = start if isinstance(start, str) else "earliest"
        async with AsyncConsumer(bootstrap, auto_offset_reset=reset) as consumer:
            info = await consumer.cluster.topic(topic, auto_create=False)
            partitions = partition or sorted(info.leaders)
            tps = [(topic, p) for p in partitions]
            consumer.assign(tps)
            if isinstance(start, int):
                for tp in tps:
                    consumer.seek(tp, start)
            if when is not None:
                found = await consumer.offsets_for_times(dict.fromkeys(tps, when))
                ends = await consumer.end_offsets(tps)
                for tp in tps:
                    hit = found[tp]
                    consumer.seek(tp, hit[0] if hit is not None else ends[tp])
            ends = await consumer.end_offsets(tps) if exit_at_end else {}
            printed = 0
            while True:
                for record in await consumer.getmany(500):
                    print(_format(record, fmt))
                    printed += 1
                    if count and printed >= count:
                        return printed
                if exit_at_end:
                    positions = [await consumer.position(tp) for tp in tps]
                    if all(pos >= ends[tp] for pos, tp in zip(positions, tps, strict=True)):
                        return printed

    started = time.monotonic()
    try:
        printed = asyncio.run(go())
    except KeyboardInterrupt:
        return
    except Exception as exc:
        raise fail(f"{type(exc).__name__}: {exc}") from None
    print(f"consumed {printed} records in {time.monotonic() - started:.1f}s", file=sys.stderr)
