"""``partita``: the command line, in the style of rpk and Kafka's own tools.

A command's module is imported only when that command runs or shows its help, so each
command pays for what it uses: ``partita --help`` loads no client, no broker and no
compiled code, ``partita consume`` no broker. The commands, with the one-line help the
top-level ``--help`` lists, are in ``COMMANDS`` below.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command

from partita import __version__
from partita.cli.common import (
    BOOTSTRAP_ENV,
    CLIENT_CONFIG_ENV,
    check_bootstrap,
    check_client_settings,
)


@dataclass(frozen=True, slots=True)
class LazyCommand:
    module: str
    attribute: str  # a Typer app (a command group) or a command function
    summary: str  # what `partita --help` lists; the command's first help line


COMMANDS = {
    "broker": LazyCommand(
        "partita.cli.broker_cmd", "run", "Run a Kafka-compatible broker on a local data directory."
    ),
    "topic": LazyCommand(
        "partita.cli.topic_cmd",
        "app",
        "Topics: create, list, describe, alter, delete; add partitions.",
    ),
    "produce": LazyCommand(
        "partita.cli.produce_cmd", "produce", "Write one record per input line (stdin or --file)."
    ),
    "consume": LazyCommand(
        "partita.cli.consume_cmd",
        "consume",
        "Print records. Example: partita consume events -o -10 --format json --encoding base64",
    ),
    "group": LazyCommand(
        "partita.cli.group_cmd",
        "app",
        "Consumer groups: members, committed offsets, lag; reset or delete offsets.",
    ),
    "txn": LazyCommand(
        "partita.cli.txn_cmd",
        "app",
        "Transactions: list and describe them, see a partition's producers, abort a hanging one.",
    ),
    "cluster": LazyCommand(
        "partita.cli.cluster_cmd",
        "app",
        "A cluster of brokers: start one locally, or see who leads what.",
    ),
    "leaders": LazyCommand(
        "partita.cli.leaders_cmd",
        "app",
        "Partition leadership: move it back to preferred leaders, or elect uncleanly.",
    ),
    "reassign": LazyCommand(
        "partita.cli.reassign_cmd",
        "app",
        "Move partition replicas between brokers: plan, execute, verify, cancel.",
    ),
    "log": LazyCommand(
        "partita.cli.log_tools",
        "app",
        "Inspect partition logs on disk (like kafka-dump-log.sh and kafka-log-dirs.sh).",
    ),
    "acl": LazyCommand(
        "partita.cli.acl_cmd",
        "app",
        "ACLs: who may do what to which topics, groups, transactional ids, the cluster.",
    ),
    "user": LazyCommand("partita.cli.user_cmd", "app", "SCRAM users: add, list, remove."),
    "quota": LazyCommand(
        "partita.cli.quota_cmd",
        "app",
        "Client quotas: byte rates and request time per user or client id.",
    ),
    "console": LazyCommand(
        "partita.cli.console_cmd",
        "console",
        "Serve a web console for a cluster (partita or Apache Kafka).",
    ),
    "pipeline": LazyCommand(
        "partita.cli.pipeline_cmd",
        "run",
        "Run the main job: NYC flights 2013 through partita into a PySpark pipeline.",
    ),
    "demo": LazyCommand(
        "partita.cli.demo",
        "run",
        "Write keyed events to partition logs, crash, recover, read everything back.",
    ),
}


def reflow(text: str | None) -> str | None:
    """Help text with each paragraph on one line, for the help renderer to wrap at the
    terminal's width. Docstrings are wrapped at 100 columns in the source; Typer's Rich
    help keeps those line breaks and then wraps again, which broke sentences in the
    middle. A paragraph whose lines are indented is left as it is (an example block)."""
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p if any(line.startswith(" ") for line in p.splitlines()) else " ".join(p.split())
        for p in paragraphs
    )


# What Rich's markup would take for a tag: "[" then a letter, "/", "#" or "@".
_MARKUP_TAG = re.compile(r"\[(?=[a-zA-Z/#@])")


def plain(text: str | None) -> str | None:
    """Help text shown as written: Typer renders help as Rich markup, where
    "etcd://HOST[/PREFIX]" is a closing tag and crashes --help."""
    return None if text is None else _MARKUP_TAG.sub(r"\\[", text)


def _prepare_help(command: Any) -> None:
    command.help = plain(reflow(command.help))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = plain(param.help)
    for child in getattr(command, "commands", {}).values():
        _prepare_help(child)


_COMPLETION_OPTIONS = ("install_completion", "show_completion")


def load_command(name: str) -> Any:
    """The Click command for ``name``, built from its module (imported now)."""
    spec = COMMANDS[name]
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(target, typer.Typer):
        command = get_command(target)
    else:
        holder = typer.Typer(add_completion=False)
        holder.command(name)(target)
        command = get_command(holder)
    command.name = name
    # Shell completion is installed from the root command, not from each subcommand.
    command.params = [p for p in command.params if p.name not in _COMPLETION_OPTIONS]
    _prepare_help(command)
    return command


class LazyGroup(TyperGroup):
    """The root command: subcommands are loaded when they are run, or their own help is
    asked for; listing them (``partita --help``) uses the summaries in ``COMMANDS``."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name].summary)
        return load_command(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


class _ConfigureOnFirstRecord(logging.Handler):
    """Stands in for partita's log handler until something logs: the real one (structlog)
    takes 0.1 s to import, which a client command that logs nothing should not pay."""

    def __init__(self, level: str, fmt: str) -> None:
        super().__init__()
        self.settings = (level, fmt)

    def emit(self, record: logging.LogRecord) -> None:
        from partita import logs  # noqa: PLC0415

        logs.configure(*self.settings)  # replaces this handler on the root logger
        for handler in logging.getLogger().handlers:
            if record.levelno >= handler.level:
                handler.handle(record)


app = typer.Typer(
    name="partita",
    cls=LazyGroup,
    help=(
        "partita: a Kafka-compatible, partitioned, replicated commit log.\n\n"
        "Data lives in Kafka's own on-disk format: one directory per partition holding "
        "segment files (<base-offset>.log) with offset and time indexes."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"partita {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    # The name is common.GLOBAL_BOOTSTRAP: what client commands look up.
    bootstrap_server: str | None = typer.Option(
        None,
        "-b",
        "--bootstrap-server",
        envvar=BOOTSTRAP_ENV,
        metavar="HOST:PORT[,…]",
        help="Any broker of the cluster, for every client command (topic, produce, consume, "
        "group); a -b after the command wins. Default: 127.0.0.1:9092.",
        show_default=False,
    ),
    command_config: str | None = typer.Option(
        None,
        "--command-config",
        envvar=CLIENT_CONFIG_ENV,
        metavar="FILE",
        help="Client settings for a secured cluster, as Kafka's tools take them "
        "(security.protocol, sasl.mechanism, sasl.username, sasl.password or "
        "sasl.jaas.config, ssl.ca.location or ssl.truststore.location, ...); one "
        "key=value a line.",
        show_default=False,
    ),
    client_setting: list[str] = typer.Option(
        [],
        "-X",
        "--client-setting",
        metavar="KEY=VALUE",
        help="One client setting, as kcat's -X; repeatable; wins over --command-config. "
        "Example: -X security.protocol=SASL_SSL -X sasl.mechanism=SCRAM-SHA-512",
    ),
    log_level: str = typer.Option(
        "INFO", "--log-level", envvar="PARTITA_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR."
    ),
    log_format: str = typer.Option(
        "console",
        "--log-format",
        envvar="PARTITA_LOG_FORMAT",
        help="console (key=value lines) or json (one JSON object per line), on stderr.",
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    if bootstrap_server is not None:
        check_bootstrap(bootstrap_server)
    check_client_settings(command_config, client_setting)
    root = logging.getLogger()
    root.handlers[:] = [_ConfigureOnFirstRecord(log_level, log_format)]
    root.setLevel(log_level.upper())


if __name__ == "__main__":  # pragma: no cover
    app()
