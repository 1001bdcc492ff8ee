"""What every client-side command shares: the bootstrap option and error reporting."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

console = Console()
error_console = Console(stderr=True)


def bootstrap_option() -> Any:
    return typer.Option(
        os.environ.get("PARTITA_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        "-b",
        "--bootstrap-server",
        help="HOST:PORT[,HOST:PORT…] of any broker (env PARTITA_BOOTSTRAP).",
    )


def fail(message: str) -> typer.Exit:
    """Print one clear line on stderr; the caller raises the returned Exit(1)."""
    error_console.print(f"[red]error:[/red] {message}")
    return typer.Exit(1)


def quiet_client_logs() -> None:
    """The Kafka client library narrates every connection at INFO; commands report
    failures themselves in one line."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL)


@contextmanager
def broker_errors(bootstrap: str) -> Iterator[None]:
    """Turn client library failures into one line and exit code 1."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        name = type(exc).__name__
        if (
            "NoBrokersAvailable" in name
            or "KafkaConnection" in name
            or "Unable to bootstrap" in str(exc)
        ):
            raise fail(f"cannot reach a broker at {bootstrap}") from None
        raise fail(f"{name}: {exc}") from None
