"""``partita log``: look inside partition directories and segment files on disk."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from partita.errors import CorruptRecordError
from partita.protocol.compression import Compression
from partita.protocol.record_batch import HEADER_SIZE, check_crc, read_header
from partita.protocol.records import decode_records
from partita.storage.dir_lock import lock_holder
from partita.storage.inspection import summarize

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
    in_use = _in_use_note(path.resolve().parent.parent)
    if in_use:
        _note(f"{in_use}; the segment may be growing as it is read")
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
    """Show every partition's offsets, segments and size.

    Read-only: nothing in the directory is written or repaired, so it is safe on a
    directory a running broker uses (high watermarks are then the last checkpointed).
    """
    if not data_dir.is_dir():
        raise _fail(f"{data_dir} is not a directory")
    in_use = _in_use_note(data_dir)
    try:
        summaries = summarize(data_dir)
    except OSError as exc:
        raise _fail(f"cannot read {data_dir}: {exc.strerror or exc}") from None
    table = Table(title=f"partitions in {data_dir}")
    for column in ("partition", "log start", "high watermark", "log end", "segments", "bytes"):
        table.add_column(column, justify="right")
    for summary in summaries:
        table.add_row(
            f"{summary.topic}-{summary.partition}",
            str(summary.log_start_offset),
            str(summary.high_watermark),
            str(summary.log_end_offset),
            str(summary.segments),
            f"{summary.size_bytes:,}",
        )
    if in_use:
        _note(f"{in_use}; high watermarks shown may be stale")
    console.print(table)
    for summary in summaries:
        if summary.problem:
            # Below the table, whole: a table column would cut it to the terminal's width.
            where = f"{summary.topic}-{summary.partition}"
            console.print(f"{where}: {escape(summary.problem)}", soft_wrap=True)


def _in_use_note(data_dir: Path) -> str | None:
    """The words for a directory whose lock a broker holds; None when none does."""
    holder = lock_holder(data_dir)
    if holder is None:
        return None
    who = f"broker pid {holder.pid}" if holder.pid is not None else "a broker"
    return f"{data_dir} is in use by {who}"


def _note(message: str) -> None:
    Console(stderr=True, soft_wrap=True).print(f"[yellow]note:[/yellow] {escape(message)}")
