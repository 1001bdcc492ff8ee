"""``partita group``: inspect and manage consumer groups (like kafka-consumer-groups.sh).

Everything goes through partita's own client: ``AsyncAdmin`` for the groups and their
offsets, ``AsyncConsumer.list_offsets`` for log start and end offsets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import typer

from partita.cli.common import (
    bootstrap_option,
    client_settings,
    error_message,
    fail,
    stdout_console,
)

if TYPE_CHECKING:
    # Loaded by _run, when a command runs: --help needs none of the client.
    from partita.client.admin import AsyncAdmin
    from partita.client.consumer import AsyncConsumer

T = TypeVar("T")
TopicPartition = tuple[str, int]
EARLIEST, LATEST = -2, -1
GROUP_ERRORS = {
    68: "the group still has active members; stop them first",
    69: "no such group",
    24: "the group id is invalid",
}

app = typer.Typer(
    help="Consumer groups: members, committed offsets, lag; reset or delete offsets.",
    no_args_is_help=True,
)


def _run(bootstrap: str, action: Callable[[AsyncAdmin, AsyncConsumer], Awaitable[T]]) -> T:
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415
    from partita.client.group_member import GroupError  # noqa: PLC0415

    async def go() -> T:
        async with (
            AsyncAdmin(bootstrap, client_id="partita-cli", security=client_settings()) as admin,
            AsyncConsumer(
                bootstrap, client_id="partita-cli", security=client_settings()
            ) as consumer,
        ):
            return await action(admin, consumer)

    try:
        return asyncio.run(go())
    except typer.Exit:
        raise
    except GroupError as exc:
        raise fail(GROUP_ERRORS.get(exc.code, exc.message)) from None
    except Exception as exc:
        raise fail(error_message(exc, bootstrap)) from None


async def _offsets(
    consumer: AsyncConsumer, partitions: list[TopicPartition], spec: int
) -> dict[TopicPartition, int]:
    if not partitions:
        return {}
    found = await consumer.list_offsets(dict.fromkeys(partitions, spec))
    return {tp: offset for tp, (offset, _ts) in found.items()}


@app.command("list")
def list_groups(bootstrap: str = bootstrap_option()) -> None:
    """List every consumer group with its state."""
    from rich.table import Table  # noqa: PLC0415

    groups = _run(bootstrap, lambda admin, _c: admin.list_groups())
    table = Table(title="consumer groups")
    for column in ("group", "state", "protocol type"):
        table.add_column(column)
    for group in groups:
        table.add_row(group.group_id, group.state, group.protocol_type)
    stdout_console().print(table)


@app.command()
def describe(
    group: str = typer.Argument(..., help="The group id."), bootstrap: str = bootstrap_option()
) -> None:
    """Members, their partitions, committed offsets, log end offsets and lag."""

    async def gather(admin: AsyncAdmin, consumer: AsyncConsumer) -> tuple:  # type: ignore[type-arg]
        info = await admin.describe_group(group)
        committed = await admin.group_offsets(group)
        owners = {tp: f"{m.member_id} ({m.host})" for m in info.members for tp in m.assignment}
        partitions = sorted(set(owners) | set(committed))
        return info, committed, owners, partitions, await _offsets(consumer, partitions, LATEST)

    from rich.table import Table  # noqa: PLC0415

    info, committed, owners, partitions, ends = _run(bootstrap, gather)
    if info.state == "Dead" and not info.members and not committed:
        # What DescribeGroups answers for a group id it has never seen; Kafka's tool says:
        raise fail(f"Consumer group '{group}' does not exist.")
    console = stdout_console()
    console.print(
        f"group [bold]{group}[/bold]: state {info.state}, "
        f"{len(info.members)} member(s), protocol {info.protocol or '-'}"
    )
    table = Table()
    for column in ("topic", "partition", "committed", "log end", "lag", "member"):
        table.add_column(
            column,
            justify="right" if column in ("partition", "committed", "log end", "lag") else "left",
        )
    for tp in partitions:
        offset = committed.get(tp)
        end = ends.get(tp, -1)
        lag = end - offset if offset is not None and end >= 0 else None
        table.add_row(
            tp[0],
            str(tp[1]),
            "-" if offset is None else str(offset),
            str(end),
            "-" if lag is None else str(lag),
            owners.get(tp, "-"),
        )
    console.print(table)


@app.command("reset-offsets")
def reset_offsets(
    group: str = typer.Argument(..., help="The group id (it must have no active members)."),
    topic: str = typer.Option(..., "--topic", help="Reset this topic's partitions."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="The log start offset."),
    to_latest: bool = typer.Option(False, "--to-latest", help="The log end offset."),
    to_offset: int | None = typer.Option(None, "--to-offset", help="This offset."),
    to_datetime: str | None = typer.Option(
        None, "--to-datetime", help="The first offset at or after this ISO time."
    ),
    shift_by: int | None = typer.Option(None, "--shift-by", help="Move by N (may be < 0)."),
    execute: bool = typer.Option(False, "--execute", help="Apply; without it, a dry run."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Move a group's committed offsets, like kafka-consumer-groups --reset-offsets.

    Without --execute it only shows what would change (a dry run, as Kafka's tool does).
    """
    chosen = [
        to_earliest,
        to_latest,
        to_offset is not None,
        to_datetime is not None,
        shift_by is not None,
    ]
    if sum(chosen) != 1:
        raise fail(
            "give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
        )
    when: int | None = None
    if to_datetime is not None:
        try:
            when = int(datetime.fromisoformat(to_datetime).timestamp() * 1000)
        except ValueError:
            raise fail(f"--to-datetime {to_datetime!r} is not an ISO date-time") from None

    async def plan(
        admin: AsyncAdmin, consumer: AsyncConsumer
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        described = await admin.describe_topics([topic])  # fails for a missing topic
        partitions = [(topic, p.partition) for p in described[0].partitions]
        earliest = await _offsets(consumer, partitions, EARLIEST)
        latest = await _offsets(consumer, partitions, LATEST)
        current = {tp: o for tp, o in (await admin.group_offsets(group)).items() if tp[0] == topic}
        targets: dict[TopicPartition, int] = {}
        for tp in partitions:
            if to_earliest:
                target = earliest[tp]
            elif to_latest:
                target = latest[tp]
            elif to_offset is not None:
                target = to_offset
            elif when is not None:
                found = (await consumer.list_offsets({tp: when}))[tp][0]
                target = latest[tp] if found < 0 else found
            else:
                target = current.get(tp, earliest[tp]) + (shift_by or 0)
            targets[tp] = min(max(target, earliest[tp]), latest[tp])
        if execute:
            await admin.alter_group_offsets(group, targets)
        return current, targets

    from rich.table import Table  # noqa: PLC0415

    current, targets = _run(bootstrap, plan)
    table = Table(
        title=f"{'new' if execute else 'proposed (dry run; add --execute)'} offsets "
        f"for group {group}"
    )
    for column in ("topic", "partition", "current", "new"):
        table.add_column(column)
    for tp, offset in targets.items():
        before = current.get(tp)
        table.add_row(tp[0], str(tp[1]), "-" if before is None else str(before), str(offset))
    stdout_console().print(table)


@app.command()
def delete(
    group: str = typer.Argument(..., help="The group id (it must be empty)."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Delete a group and its committed offsets."""
    result = _run(bootstrap, lambda admin, _c: admin.delete_groups([group]))
    code = result.get(group, 0)
    if code:
        raise fail(f"cannot delete group {group!r}: {GROUP_ERRORS.get(code, f'error {code}')}")
    stdout_console().print(f"deleted group {group}")
