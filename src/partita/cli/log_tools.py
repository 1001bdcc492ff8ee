"""``partita log``: look inside partition directories and segment files on disk."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression
from partita.protocol.record_batch import HEADER_SIZE, check_crc, read_header
from partita.protocol.records import decode_records
from partita.storage.log_manager import LogManager

app = typer.Typer(
    help="Inspect partition logs on disk (like kafka-dump-log.sh and kafka-log-dirs.sh).",
    no_args_is_help=True,
)
console = Console()


def _fail(message: str) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(1)


def _show(data: bytes | None, limit: int = 80) -> str:
    if data is None:
        return "null"
    text = data[:limit].decode("utf-8", "backslashreplace")
    return text + ("…" if len(data) > limit else "")


@app.command()
def dump(
    path: Path = typer.Argument(..., help="A segment file (…/orders-0/00000000000000000000.log)."),
    records: bool = typer.Option(False, "--records", help="Decode and print every record too."),
    limit: int = typer.Option(0, "--limit", help="Stop after this many batches (0: all)."),
) -> None:
    """Print every record batch of a segment file, with its CRC checked.

    Example: partita log dump data/orders-0/00000000000000000000.log --records
    """
    if not path.is_file():
        raise _fail(f"{path} is not a segment file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror}") from None
    table = Table(title=str(path), show_lines=False)
    for column in (
        "position",
        "base offset",
        "last offset",
        "count",
        "epoch",
        "bytes",
        "codec",
        "max timestamp",
        "crc",
    ):
        table.add_column(column, justify="right")
    record_table = Table(title="records")
    for column in ("offset", "timestamp", "key", "value", "headers"):
        record_table.add_column(column, overflow="fold")
    pos = batches = 0
    problem = None
    while pos + HEADER_SIZE <= len(data) and (not limit or batches < limit):
        try:
            header = read_header(data, pos)
            if pos + header.size > len(data):
                raise CorruptRecordError(f"batch truncated at position {pos}")
            try:
                check_crc(data, pos, header)
                crc = "ok"
            except CorruptRecordError:
                crc = "[red]BAD[/red]"
        except CorruptRecordError as exc:
            problem = str(exc)
            break
        table.add_row(
            str(pos),
            str(header.base_offset),
            str(header.last_offset),
            str(header.records_count),
            str(header.partition_leader_epoch),
            str(header.size),
            Compression(header.compression).name.lower(),
            str(header.max_timestamp),
            crc,
        )
        if records and crc == "ok":
            for record in decode_records(data[pos : pos + header.size])[1]:
                headers = ", ".join(f"{k}={_show(v)}" for k, v in record.headers)
                record_table.add_row(
                    str(record.offset),
                    str(record.timestamp),
                    _show(record.key),
                    _show(record.value),
                    headers,
                )
        pos += header.size
        batches += 1
    console.print(table)
    if records:
        console.print(record_table)
    console.print(f"{batches} batches, {pos} of {len(data)} bytes")
    if problem or (pos < len(data) and not limit):
        raise _fail(problem or f"{len(data) - pos} trailing bytes are not a whole batch")


@app.command()
def describe(
    data_dir: Path = typer.Argument(..., help="A broker data directory."),
) -> None:
    """Open a data directory (recovering it if it was not shut down cleanly) and show
    every partition's offsets, segments and size."""
    if not data_dir.is_dir():
        raise _fail(f"{data_dir} is not a directory")
    if not os.access(data_dir, os.W_OK):
        raise _fail(f"{data_dir} is not writable (recovery may need to write)")
    manager = LogManager(data_dir)
    manager.startup()
    table = Table(title=f"partitions in {data_dir}")
    for column in ("partition", "log start", "high watermark", "log end", "segments", "bytes"):
        table.add_column(column, justify="right")
    for (topic, partition), plog in sorted(manager.logs.items()):
        table.add_row(
            f"{topic}-{partition}",
            str(plog.log_start_offset),
            str(plog.high_watermark),
            str(plog.log_end_offset),
            str(len(plog.segments)),
            f"{plog.size_bytes:,}",
        )
    for (topic, partition), reason in sorted(manager.offline.items()):
        table.add_row(f"[red]{topic}-{partition}[/red]", "offline", "", "", "", reason)
    manager.shutdown()
    console.print(table)
