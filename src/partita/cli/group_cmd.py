"""``partita group``: inspect and manage consumer groups (like kafka-consumer-groups.sh)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

import typer
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.structs import OffsetAndMetadata
from rich.table import Table

from partita.cli.common import bootstrap_option, broker_errors, console, fail, quiet_client_logs
from partita.coordinator.consumer_protocol import assignment_partitions

app = typer.Typer(
    help="Consumer groups: members, committed offsets, lag; reset or delete offsets.",
    no_args_is_help=True,
)


def _admin(bootstrap: str) -> KafkaAdminClient:
    quiet_client_logs()
    return KafkaAdminClient(
        bootstrap_servers=bootstrap.split(","),
        client_id="partita-cli",
        request_timeout_ms=10_000,
        bootstrap_timeout_ms=5_000,
    )


@app.command("list")
def list_groups(bootstrap: str = bootstrap_option()) -> None:
    """List every consumer group with its state."""
    with broker_errors(bootstrap):
        admin = _admin(bootstrap)
        groups = admin.list_groups()
        admin.close()
    table = Table(title="consumer groups")
    for column in ("group", "state", "protocol type"):
        table.add_column(column)
    for group in sorted(groups, key=lambda g: g["group_id"]):
        table.add_row(group["group_id"], group.get("group_state", ""), group["protocol_type"])
    console.print(table)


def _end_offsets(
    admin: KafkaAdminClient, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    if not partitions:
        return {}
    found = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in partitions})
    return {tp: value.offset for tp, value in found.items()}


@app.command()
def describe(
    group: str = typer.Argument(..., help="The group id."), bootstrap: str = bootstrap_option()
) -> None:
    """Members, their partitions, committed offsets, log end offsets and lag."""
    with broker_errors(bootstrap):
        admin = _admin(bootstrap)
        info = admin.describe_groups([group])[group]
        committed = admin.list_group_offsets({group: None})[group]
        owners: dict[tuple[str, int], str] = {}
        for member in info["members"]:
            raw = member.get("member_assignment") or b""
            parts = (
                assignment_partitions(bytes(raw))
                if isinstance(raw, bytes | bytearray)
                else _assignment_from_object(raw)
            )
            for topic, numbers in parts.items():
                for p in numbers:
                    owners[(topic, p)] = f"{member['member_id']} ({member['client_host']})"
        partitions = sorted(
            {TopicPartition(t, p) for t, p in owners} | set(committed),
            key=lambda tp: (tp.topic, tp.partition),
        )
        ends = _end_offsets(admin, partitions)
        admin.close()
    console.print(
        f"group [bold]{group}[/bold]: state {info['group_state']}, "
        f"{len(info['members'])} member(s), protocol {info.get('protocol_data') or '-'}"
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
        lag = end - offset.offset if offset is not None and end >= 0 else None
        table.add_row(
            tp.topic,
            str(tp.partition),
            str(offset.offset) if offset else "-",
            str(end),
            "-" if lag is None else str(lag),
            owners.get((tp.topic, tp.partition), "-"),
        )
    console.print(table)


def _assignment_from_object(raw: Any) -> dict[str, list[int]]:
    """kafka-python hands back the decoded ConsumerProtocolAssignment as a dict:
    {"assigned_partitions": [{"topic": ..., "partitions": [...]}], "user_data": ...}."""
    out: dict[str, list[int]] = defaultdict(list)
    entries = raw.get("assigned_partitions") if isinstance(raw, dict) else None
    for entry in entries or []:
        out[entry["topic"]] += list(entry["partitions"])
    return dict(out)


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
    with broker_errors(bootstrap):
        admin = _admin(bootstrap)
        metadata = admin.describe_topics([topic])
        if not metadata or metadata[0].get("error_code", 0) != 0:
            raise fail(f"unknown topic {topic!r}")
        partitions = [
            TopicPartition(topic, p["partition_index"]) for p in metadata[0]["partitions"]
        ]
        earliest = {
            tp: o.offset
            for tp, o in admin.list_partition_offsets(
                {tp: OffsetSpec.EARLIEST for tp in partitions}
            ).items()
        }
        latest = _end_offsets(admin, partitions)
        current = admin.list_group_offsets({group: partitions})[group]
        targets: dict[TopicPartition, int] = {}
        for tp in partitions:
            if to_earliest:
                target = earliest[tp]
            elif to_latest:
                target = latest[tp]
            elif to_offset is not None:
                target = to_offset
            elif when is not None:
                found = admin.list_partition_offsets({tp: when})[tp].offset
                target = latest[tp] if found < 0 else found
            else:
                base = current.get(tp)
                target = (base.offset if base and base.offset >= 0 else earliest[tp]) + (
                    shift_by or 0
                )
            targets[tp] = min(max(target, earliest[tp]), latest[tp])
        if execute:
            admin.alter_group_offsets(
                group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in targets.items()}
            )
        admin.close()
    table = Table(
        title=f"{'new' if execute else 'proposed (dry run; add --execute)'} offsets "
        f"for group {group}"
    )
    for column in ("topic", "partition", "current", "new"):
        table.add_column(column)
    for tp, offset in targets.items():
        before = current.get(tp)
        table.add_row(
            tp.topic, str(tp.partition), str(before.offset) if before else "-", str(offset)
        )
    console.print(table)


@app.command()
def delete(
    group: str = typer.Argument(..., help="The group id (it must be empty)."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Delete a group and its committed offsets."""
    with broker_errors(bootstrap):
        admin = _admin(bootstrap)
        result = admin.delete_groups([group])
        admin.close()
    errors = [
        e
        for _g, e in (result.items() if isinstance(result, dict) else result)
        if e and getattr(e, "errno", 0)
    ]
    if errors:
        raise fail(f"cannot delete group {group!r}: {errors[0]}")
    console.print(f"deleted group {group}")
