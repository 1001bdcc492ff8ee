"""``partita produce``: one record per input line, like ``kcat -P``.

Input is read as bytes: keys and values are bytes in Kafka, and a line that is not UTF-8
(an image, a protobuf) is sent exactly as it came.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client

NEWLINE = b"\n"


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--header expects key=value, got {item!r}")
        out.append((key, value.encode()))
    return out


def split_line(line: bytes, key_sep: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line: its newline dropped, the key before the first
    ``key_sep`` when there is one (a line without it is a keyless record)."""
    if line.endswith(NEWLINE):
        line = line[:-1]
    if key_sep is not None and key_sep in line:
        key, value = line.split(key_sep, 1)
        return key, value
    return None, line


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

    Lines are bytes, sent as they are (without their newline): any encoding, or none.

    Example: printf 'user1:hello\\n' | partita produce events --key-sep :
    """
    headers = _headers(header)
    separator = None if key_sep is None else key_sep.encode()
    source: BinaryIO = sys.stdin.buffer
    total_bytes = 0
    if file is not None:
        try:
            source = open(file, "rb")  # noqa: SIM115 - closed below
            total_bytes = file.stat().st_size
        except OSError as exc:
            raise fail(f"cannot read {file}: {exc.strerror}") from None

    async def go() -> int:
        from rich.progress import BarColumn, Progress, TransferSpeedColumn  # noqa: PLC0415

        from partita.client.producer import AsyncProducer  # noqa: PLC0415

        sent = 0
        async with AsyncProducer(
            bootstrap,
            acks=acks,
            compression_type=compression,
            partitioner=partitioner,
            security=client_settings(),
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
                    key, value = split_line(line, separator)
                    futures.append(
                        await producer.send(topic, value, key, partition=partition, headers=headers)
                    )
                    progress.advance(task, len(line))
                    sent += 1
                await producer.flush()
                failed = [f.exception() for f in futures if f.exception() is not None]
                if failed:
                    raise failed[0]  # type: ignore[misc]
        return sent

    try:
        count = run_client(bootstrap, go())
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    print(f"produced {count} records to {topic}", file=sys.stderr)
