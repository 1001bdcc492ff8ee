"""What every client-side command shares: the bootstrap option, one-line errors, and the
console tables are printed on.

This module is imported by every command, so it imports nothing heavy at the top: Rich
is loaded when a table is printed, the client when an error is described.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from partita.client.bootstrap import parse_bootstrap

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "PARTITA_BOOTSTRAP"
# The name of the global option's parameter on the root command (cli.main).
GLOBAL_BOOTSTRAP = "bootstrap_server"
# Piped output is read by programs and people with wide editors: no line is cut.
PIPE_WIDTH = 100_000

T = TypeVar("T")


def bootstrap_option() -> Any:
    """``-b HOST:PORT[,…]`` of a client command. Given after the command it wins; else the
    one given before it (``partita -b X topic list``), else $PARTITA_BOOTSTRAP, else
    127.0.0.1:9092. The value is checked here, before anything connects."""
    return typer.Option(
        None,
        "-b",
        "--bootstrap-server",
        metavar="HOST:PORT[,…]",
        help=f"Any broker of the cluster. Default: the -b given before the command, else "
        f"${BOOTSTRAP_ENV}, else {DEFAULT_BOOTSTRAP}.",
        callback=_resolve_bootstrap,
        show_default=False,
    )


def _resolve_bootstrap(ctx: typer.Context, value: str | None) -> str:
    chosen = (
        value
        or ctx.find_root().params.get(GLOBAL_BOOTSTRAP)
        or os.environ.get(BOOTSTRAP_ENV)
        or DEFAULT_BOOTSTRAP
    )
    if not ctx.resilient_parsing:  # shell completion parses without running
        check_bootstrap(chosen)
    return chosen


CLIENT_CONFIG_ENV = "PARTITA_CLIENT_CONFIG"


def read_client_settings(path: str | None, settings: list[str]) -> dict[str, str]:
    """``--command-config FILE`` (Kafka's properties syntax, as the broker's
    server.properties), then each ``-X``."""
    from partita.errors import InvalidConfigurationError  # noqa: PLC0415
    from partita.server.config import parse_assignments, read_properties  # noqa: PLC0415

    try:
        out = read_properties(Path(path)) if path else {}
        return {**out, **parse_assignments(settings, "-X")}
    except InvalidConfigurationError as exc:
        raise fail(exc.message) from None


# The root command's --command-config and -X, checked, for the clients a command makes
# (one process runs one command: set once, by cli.main).
_client_settings: dict[str, str] = {}


def check_client_settings(path: str | None, settings: list[str]) -> None:
    """Refuse bad security settings before anything connects (one line), and keep them
    for ``client_settings``."""
    from partita.client.security import ClientSecurity  # noqa: PLC0415
    from partita.errors import KafkaError  # noqa: PLC0415

    chosen = read_client_settings(path, settings)
    try:
        ClientSecurity.from_config(chosen)
    except KafkaError as exc:
        raise fail(exc.message) from None
    _client_settings.clear()
    _client_settings.update(chosen)


def client_settings() -> dict[str, str]:
    """The security settings given to the root command, for a command's clients."""
    return dict(_client_settings)


def check_bootstrap(servers: str) -> None:
    try:
        parse_bootstrap(servers)
    except ValueError as exc:
        raise fail(f"-b: {exc}") from None


def fail(message: str) -> typer.Exit:
    """Print one line on stderr, ``error: <message>``; the caller raises the returned
    Exit(1). Plain text, never wrapped: scripts grep it, and a message may hold brackets
    that a markup renderer would eat."""
    label = "\x1b[31merror:\x1b[0m" if sys.stderr.isatty() else "error:"
    print(f"{label} {' '.join(message.split())}", file=sys.stderr)
    return typer.Exit(1)


def error_message(exc: BaseException, bootstrap: str) -> str:
    """What went wrong, in words, for an exception out of the client."""
    from partita.client.cluster import NoBrokersAvailableError  # noqa: PLC0415
    from partita.client.connection import ConnectionLostError  # noqa: PLC0415
    from partita.errors import KafkaError  # noqa: PLC0415

    if isinstance(exc, NoBrokersAvailableError):
        return f"cannot reach a broker at {bootstrap}"
    if isinstance(exc, ConnectionLostError):
        return f"lost the connection to the broker: {exc.message}"
    if isinstance(exc, KafkaError):
        return exc.message
    if isinstance(exc, ValueError):  # the client refused an argument, and says which
        return str(exc)
    if isinstance(exc, OSError):  # a broker named by the metadata, not a bootstrap one
        return f"cannot reach a broker of {bootstrap}'s cluster: {exc.strerror or exc}"
    # Not a failure partita expects: say so, with enough to report it.
    return f"internal error, please report it: {type(exc).__name__}: {exc}"


def run_client(bootstrap: str, work: Coroutine[Any, Any, T]) -> T:
    """Run a command's client work; any failure becomes one line and exit code 1."""
    try:
        return asyncio.run(work)
    except typer.Exit:
        raise
    except Exception as exc:
        raise fail(error_message(exc, bootstrap)) from None


def stdout_console() -> Console:
    """Where tables go. On a terminal, Rich fits them to its width; piped or redirected,
    nothing is wrapped, folded or cut with an ellipsis: each row is one line as long as
    its values."""
    from rich.console import Console  # noqa: PLC0415

    if sys.stdout.isatty():
        return Console()
    return Console(width=PIPE_WIDTH, soft_wrap=True)
