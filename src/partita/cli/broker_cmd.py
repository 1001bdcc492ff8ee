"""``partita broker``: run one broker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from partita.errors import KafkaError
from partita.server.config import BrokerConfig, parse_assignments, read_properties
from partita.server.runtime import serve


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def run(
    data_dir: Path = typer.Option(
        ..., "--data-dir", help="Where partition logs and metadata live."
    ),
    listen: str = typer.Option(
        "127.0.0.1:9092", "--listen", help="HOST:PORT to accept Kafka clients on (port 0: any)."
    ),
    node_id: int | None = typer.Option(
        None, "--node-id", help="This broker's id (node.id, default 0)."
    ),
    config_file: Path | None = typer.Option(
        None, "--config", help="A Kafka server.properties file (key=value lines)."
    ),
    settings: list[str] = typer.Option(
        [], "--set", help="A Kafka broker setting, e.g. --set log.retention.hours=24 (repeatable)."
    ),
    ready_file: Path | None = typer.Option(
        None, "--ready-file", help="Write HOST:PORT here once clients can connect."
    ),
    metrics_listen: str | None = typer.Option(
        None,
        "--metrics-listen",
        help="HOST:PORT to serve Prometheus metrics on, at /metrics (port 0: any; the log "
        "says which). Off unless given.",
    ),
) -> None:
    """Run a Kafka-compatible broker on a local data directory.

    Clients connect with their usual settings (bootstrap.servers=HOST:PORT). Settings use
    Kafka's names and defaults; --set wins over --config. SIGTERM or Ctrl-C stops the
    broker cleanly: data flushed, files closed, exit code 0.

    Example: partita broker --data-dir ./data --listen 127.0.0.1:9092 --set num.partitions=6

    With --metrics-listen 127.0.0.1:9404, Prometheus scrapes http://127.0.0.1:9404/metrics:
    requests and their latency by API, records and bytes in and out by topic, refused
    produces by error, and each partition's size and offsets.
    """
    host, port = _parse_listen(listen)
    metrics = _parse_listen(metrics_listen) if metrics_listen is not None else None
    try:
        sources = []
        if config_file is not None:
            sources.append(read_properties(config_file))
        sources.append(parse_assignments(settings))
        if node_id is not None:
            sources.append({"node.id": str(node_id)})
        config = BrokerConfig.from_sources(*sources)
        code = asyncio.run(serve(config, data_dir, host, port, ready_file, metrics))
    except KafkaError as exc:
        raise _fail(exc.message) from None
    except OSError as exc:
        raise _fail(f"{exc.strerror or exc}: {listen}") from None
    raise typer.Exit(code)


def _fail(message: str) -> typer.Exit:
    """One line on stderr, never wrapped, whatever the width of the terminal (or none)."""
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(1)
