"""``partita``: the command line, in the style of rpk and Kafka's own tools."""

from __future__ import annotations

import typer

from partita import __version__, logs
from partita.cli import (
    broker_cmd,
    demo,
    group_cmd,
    log_tools,
    pipeline_cmd,
    produce_consume,
    topic_cmd,
)

app = typer.Typer(
    name="partita",
    help=(
        "partita: a Kafka-compatible, partitioned, replicated commit log.\n\n"
        "Data lives in Kafka's own on-disk format: one directory per partition holding "
        "segment files (<base-offset>.log) with offset and time indexes."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(log_tools.app, name="log")
app.add_typer(group_cmd.app, name="group")
app.add_typer(topic_cmd.app, name="topic")
app.command(name="produce")(produce_consume.produce)
app.command(name="consume")(produce_consume.consume)
app.command(name="pipeline")(pipeline_cmd.run)
app.command(name="demo")(demo.run)
app.command(name="broker")(broker_cmd.run)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"partita {__version__}")
        raise typer.Exit()


@app.callback()
def main(
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
    logs.configure(log_level, log_format)


if __name__ == "__main__":  # pragma: no cover
    app()
