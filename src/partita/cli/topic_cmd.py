"""``partita topic``: create, list, describe, alter, delete topics, add partitions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

if TYPE_CHECKING:
    # Loaded when a command runs: --help needs none of the client.
    from partita.client.admin import AsyncAdmin

app = typer.Typer(
    help="Topics: create, list, describe, alter, delete; add partitions.", no_args_is_help=True
)
T = TypeVar("T")

SOURCES = {1: "topic", 4: "broker", 5: "default"}
BROKER_DEFAULT = -1  # CreateTopics: "use the broker's setting"


def run_admin(bootstrap: str, action: Callable[[AsyncAdmin], Awaitable[T]]) -> T:
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    async def go() -> T:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await action(admin)

    return run_client(bootstrap, go())


def _parse_configs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise fail(f"--config expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@app.command()
def create(
    topic: str = typer.Argument(..., help="Topic name."),
    partitions: int | None = typer.Option(
        None, "-p", "--partitions", help="Default: the broker's num.partitions."
    ),
    replicas: int | None = typer.Option(
        None, "-r", "--replicas", help="Default: the broker's default.replication.factor."
    ),
    config: list[str] = typer.Option([], "-c", "--config", help="key=value, repeatable."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Create a topic. Example: partita topic create orders -p 6 -c retention.ms=86400000"""
    configs = _parse_configs(config)
    count = BROKER_DEFAULT if partitions is None else partitions
    factor = BROKER_DEFAULT if replicas is None else replicas
    run_admin(bootstrap, lambda a: a.create_topic(topic, count, factor, configs))
    stdout_console().print(f"created topic {topic}")


@app.command("list")
def list_topics(bootstrap: str = bootstrap_option()) -> None:
    """List topics with their partition counts."""
    from rich.table import Table  # noqa: PLC0415

    topics = run_admin(bootstrap, lambda a: a.describe_topics())
    table = Table(title="topics")
    for column in ("topic", "partitions", "internal"):
        table.add_column(column)
    for t in topics:
        table.add_row(t.name, str(len(t.partitions)), "yes" if t.internal else "")
    stdout_console().print(table)


@app.command()
def describe(topic: str = typer.Argument(...), bootstrap: str = bootstrap_option()) -> None:
    """Each partition's leader, replicas and in-sync replicas, and the topic's configs."""
    from rich.table import Table  # noqa: PLC0415

    async def both(a: AsyncAdmin) -> tuple[Any, Any]:
        return (await a.describe_topics([topic]))[0], await a.describe_configs(topic)

    description, configs = run_admin(bootstrap, both)
    console = stdout_console()
    console.print(
        f"topic [bold]{topic}[/bold]  id {description.topic_id}  "
        f"{len(description.partitions)} partitions"
    )
    table = Table()
    for column in ("partition", "leader", "epoch", "replicas", "in-sync replicas", "offline"):
        table.add_column(column)
    for p in description.partitions:
        table.add_row(
            str(p.partition),
            str(p.leader) if p.leader >= 0 else "none",
            str(p.leader_epoch),
            ",".join(map(str, p.replicas)),
            ",".join(map(str, p.isr)),
            ",".join(map(str, p.offline)) or "-",
        )
    console.print(table)
    overrides = Table(title="configs (non-default)")
    overrides.add_column("name")
    overrides.add_column("value")
    overrides.add_column("source")
    for name, (value, source) in sorted(configs.items()):
        if source != 5:
            overrides.add_row(name, value or "", SOURCES.get(source, str(source)))
    console.print(overrides)


@app.command()
def alter(
    topic: str = typer.Argument(...),
    set_: list[str] = typer.Option([], "--set", help="key=value to set, repeatable."),
    delete: list[str] = typer.Option([], "--delete", help="Config to reset to its default."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Change topic configs. Example: partita topic alter orders --set retention.ms=3600000"""
    if not set_ and not delete:
        raise fail("nothing to change: give --set key=value or --delete key")
    changes = _parse_configs(set_)
    run_admin(bootstrap, lambda a: a.alter_configs(topic, changes, delete))
    stdout_console().print(f"updated topic {topic}")


@app.command("add-partitions")
def add_partitions(
    topic: str = typer.Argument(...),
    total: int = typer.Option(..., "--total", help="The new partition count (more than now)."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Grow a topic. Keyed records hash over the partition count, so keys move."""
    run_admin(bootstrap, lambda a: a.add_partitions(topic, total))
    stdout_console().print(
        f"topic {topic} now has {total} partitions. [yellow]Note:[/yellow] keyed "
        "records now map to different partitions than before."
    )


@app.command()
def delete(topic: str = typer.Argument(...), bootstrap: str = bootstrap_option()) -> None:
    """Delete a topic and all its data."""
    run_admin(bootstrap, lambda a: a.delete_topic(topic))
    stdout_console().print(f"deleted topic {topic}")


@app.command()
def advise(
    target_mb_s: float = typer.Option(
        ..., "--target-mb-s", help="The throughput the topic must carry, in MB/s (10^6 bytes)."
    ),
    record_size: int = typer.Option(1024, "--record-size", help="Bytes per record value."),
    acks: str = typer.Option("all", "--acks", help="The producers' acks: 0, 1 or all."),
    seconds: float = typer.Option(5.0, "--seconds", help="How long the produce run lasts."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """How many partitions a topic needs, measured on this cluster.

    partitions = ceil(target / one partition's throughput). One partition's throughput is
    measured here: a produce run of --seconds into a one-partition scratch topic (deleted
    after), then one read back; the lesser of the two is the denominator. The answer is
    rounded up to a multiple of the broker count, so the partitions spread evenly.

    Example: partita topic advise --target-mb-s 200 --record-size 512 --acks all
    """
    from partita.console import advisor  # noqa: PLC0415

    if target_mb_s <= 0 or not 0 < record_size <= advisor.MAX_RECORD_SIZE or seconds <= 0:
        raise fail("--target-mb-s and --seconds must be above 0, --record-size 1 B to 1 MB")
    if acks not in ("0", "1", "all", "-1"):
        raise fail(f"--acks is 0, 1 or all, not {acks!r}")
    from rich.progress import Progress, SpinnerColumn, TextColumn  # noqa: PLC0415

    async def go() -> tuple[advisor.Measurement, int]:
        return await advisor.measure(bootstrap, client_settings(), record_size, acks, seconds)

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True) as bar:
        bar.add_task(f"measuring one partition for {seconds:g} s (scratch topic)…")
        measurement, brokers = run_client(bootstrap, go())
    advice = advisor.advise(target_mb_s, measurement, brokers)
    out = stdout_console()
    out.print(
        f"one partition here: produce {measurement.produce_mb_s:.1f} MB/s, consume "
        f"{measurement.consume_mb_s:.1f} MB/s ({measurement.records} records of "
        f"{record_size} B, acks={acks})"
    )
    out.print(
        f"ceil({target_mb_s:g} / {measurement.partition_mb_s:.1f}) = {advice.needed}, "
        f"rounded to a multiple of {brokers} broker(s): [bold]{advice.partitions} partitions[/bold]"
    )
    for warning in advice.warnings:
        out.print(f"- {warning}", highlight=False)
