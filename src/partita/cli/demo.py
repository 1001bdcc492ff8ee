"""``partita demo``: the main job until the broker and Spark pipeline land.

It exercises the storage engine end to end on a local data directory: keyed events are
partitioned with Java's murmur2, batched and compressed like a producer would, appended
to partition logs, the process "crashes" (no clean shutdown), recovery runs, and every
record is read back and checked for order and content.
"""

from __future__ import annotations

import itertools
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from partita.client.murmur2 import partition_for_key
from partita.protocol.compression import Compression
from partita.protocol.records import Record, build_batch, decode_records
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager

console = Console()


def run(
    data_dir: Path = typer.Option(Path("var/demo"), help="Where the partition logs go (wiped)."),
    records: int = typer.Option(300_000, help="How many events to write."),
    partitions: int = typer.Option(6, help="Partitions of the 'events' topic."),
    batch_records: int = typer.Option(500, help="Records per batch (a producer's batch.size)."),
    compression: str = typer.Option("lz4", help="none, gzip, snappy, lz4 or zstd."),
    seed: int = typer.Option(13, help="Random seed for the generated events."),
) -> None:
    """Write keyed events to partition logs, crash, recover, read everything back."""
    codec = Compression.from_name(compression)
    if data_dir.exists():
        shutil.rmtree(data_dir)
    config = LogConfig(segment_bytes=4 * 1024 * 1024)
    rng = random.Random(seed)
    # A few heavy users and a long tail, so partitions end up unevenly loaded.
    users = [f"user-{i}" for i in range(2000)]
    cumulative = list(itertools.accumulate(1.0 / (i + 1) ** 0.8 for i in range(len(users))))

    started = time.perf_counter()
    manager = LogManager(data_dir, lambda _t: config)
    manager.startup()
    logs = [manager.get_or_create("events", p) for p in range(partitions)]
    pending: dict[int, list[Record]] = defaultdict(list)
    written_per_key: dict[bytes, int] = defaultdict(int)
    appended_bytes = 0

    def send(partition: int) -> None:
        nonlocal appended_bytes
        batch = build_batch(pending[partition], compression=codec)
        logs[partition].append_as_leader(batch, leader_epoch=0)
        appended_bytes += len(batch)
        pending[partition].clear()

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("producing events", total=records)
        now = int(time.time() * 1000)
        for i in range(records):
            key = rng.choices(users, cum_weights=cumulative)[0].encode()
            value = f'{{"seq":{written_per_key[key]},"amount":{rng.randint(1, 500)}}}'.encode()
            written_per_key[key] += 1
            partition = partition_for_key(key, partitions)
            pending[partition].append(Record(len(pending[partition]), now + i, key, value))
            if len(pending[partition]) >= batch_records:
                send(partition)
            if i % 5000 == 0:
                progress.update(task, completed=i)
        for partition in list(pending):
            if pending[partition]:
                send(partition)
        progress.update(task, completed=records)
    write_secs = time.perf_counter() - started
    for plog in logs:
        plog.update_high_watermark(plog.log_end_offset)
    manager.checkpoint()
    for plog in logs:
        plog.close()  # no clean-shutdown marker: the next start must recover

    started = time.perf_counter()
    recovered = LogManager(data_dir, lambda _t: config)
    recovered.startup()
    recover_secs = time.perf_counter() - started

    started = time.perf_counter()
    table = Table(title=f"topic 'events' ({records:,} records, {codec.name.lower()})")
    for column in ("partition", "records", "segments", "bytes", "share", "log end"):
        table.add_column(column, justify="right")
    seen_per_key: dict[bytes, int] = defaultdict(int)
    total = 0
    counts = []
    for p in range(partitions):
        plog = recovered.get("events", p)
        count = 0
        for batch in plog.iter_batches():
            for record in decode_records(batch)[1]:
                assert record.key is not None and record.value is not None
                expected = f'"seq":{seen_per_key[record.key]},'.encode()
                if expected not in record.value:
                    raise typer.Exit(_report_failure(record.key, record.value, expected))
                seen_per_key[record.key] += 1
                count += 1
        counts.append(count)
        total += count
        table.add_row(
            str(p),
            f"{count:,}",
            str(len(plog.segments)),
            f"{plog.size_bytes:,}",
            f"{count / records:.1%}",
            str(plog.log_end_offset),
        )
    read_secs = time.perf_counter() - started
    recovered.shutdown()
    console.print(table)
    mean = total / partitions
    console.print(
        f"skew: the largest partition holds {max(counts) / mean:.2f}x the mean "
        f"(keys hash with murmur2 like the Java client; hot keys make hot partitions)"
    )
    console.print(
        f"write {write_secs:.1f}s ({records / write_secs:,.0f} records/s, "
        f"{appended_bytes / write_secs / 1e6:.1f} MB/s), recovery after the crash "
        f"{recover_secs:.2f}s, read back and verify {read_secs:.1f}s"
    )
    if total != records or dict(seen_per_key) != dict(written_per_key):
        console.print(f"[red]FAILED[/red]: read {total:,} of {records:,} records")
        raise typer.Exit(1)
    console.print(f"[green]OK[/green]: all {total:,} records back, in order per key")


def _report_failure(key: bytes, value: bytes, expected: bytes) -> int:
    console.print(f"[red]FAILED[/red]: key {key!r} out of order: {value!r} lacks {expected!r}")
    return 1
