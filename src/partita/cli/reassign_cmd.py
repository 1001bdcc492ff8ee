"""``partita reassign``: plan, run, follow and cancel replica moves, with plans in
kafka-reassign-partitions' JSON format so either tool can read the other's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

if TYPE_CHECKING:
    from partita.client.admin import AsyncAdmin

app = typer.Typer(
    help="Move partition replicas between brokers: plan, execute, verify, cancel.",
    no_args_is_help=True,
)

Plan = dict[tuple[str, int], list[int]]


def to_json(plan: Plan) -> str:
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(plan.items())
            ],
        },
        indent=1,
    )


def read_plan(path: Path) -> Plan:
    try:
        data = json.loads(path.read_text())
        return {
            (str(e["topic"]), int(e["partition"])): [int(b) for b in e["replicas"]]
            for e in data["partitions"]
        }
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise fail(
            f"{path} is not a reassignment plan (kafka-reassign-partitions JSON): {exc}"
        ) from None


async def _current(
    admin: AsyncAdmin, topics: list[str] | None
) -> tuple[Plan, dict[int, str | None]]:
    described = await admin.describe_topics(topics)
    cluster = await admin.describe_cluster()
    current = {
        (t.name, p.partition): list(p.replicas)
        for t in described
        if not t.internal or topics
        for p in t.partitions
    }
    return current, {b.node_id: b.rack for b in cluster.brokers}


async def _check_plan(admin: AsyncAdmin, planned: Plan) -> None:
    """Refuse a plan naming topics, partitions or brokers that do not exist, before any
    move starts."""
    cluster = await admin.describe_cluster()
    brokers = {b.node_id for b in cluster.brokers}
    known = {(t.name, p.partition) for t in await admin.describe_topics(None) for p in t.partitions}
    missing = sorted(tp for tp in planned if tp not in known)
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing[:5])
        raise ValueError(f"the plan names partitions that do not exist: {names}")
    strangers = sorted({b for replicas in planned.values() for b in replicas} - brokers)
    if strangers:
        raise ValueError(f"the plan names brokers that are not in the cluster: {strangers}")


@app.command("plan")
def plan_cmd(
    topics: str = typer.Option(..., "--topics", help="Comma-separated topics to balance."),
    brokers: str = typer.Option(
        ..., "--brokers", help="Comma-separated broker ids the replicas should spread over."
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Print a plan (JSON, kafka-reassign-partitions format) that balances the topics'
    replicas and preferred leaders over BROKERS, rack-aware, moving as few replicas as
    possible (unlike kafka-reassign-partitions --generate, which reshuffles everything).

    Example: partita reassign plan --topics orders --brokers 1,2,3,4 > plan.json
    """
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415
    from partita.cluster.rebalance_plan import moves, plan  # noqa: PLC0415

    try:
        wanted = [int(b) for b in brokers.split(",") if b.strip()]
    except ValueError:
        raise fail(f"--brokers expects comma-separated ids, got {brokers!r}") from None

    async def go() -> tuple[Plan, dict[int, str | None]]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await _current(admin, [t for t in topics.split(",") if t])

    current, racks = run_client(bootstrap, go())
    try:
        planned = plan(current, wanted, racks)
    except ValueError as exc:
        raise fail(str(exc)) from None
    changed = {tp: r for tp, r in planned.items() if r != current[tp]}
    print(to_json(changed))
    typer.echo(
        f"{len(changed)} partitions change, {moves(current, planned)} replicas move", err=True
    )


@app.command()
def execute(
    plan_file: Path = typer.Argument(..., help="A plan from `partita reassign plan`."),
    throttle: int = typer.Option(
        0,
        "--throttle",
        help="Bytes/s a moving replica may copy at (follower.replication.throttled.rate); "
        "0: unthrottled.",
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the moves to the end."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Start the moves in PLAN_FILE and (by default) follow them with a progress bar of
    the bytes copied, until every partition has its new replicas."""
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    planned = read_plan(plan_file)

    async def go() -> dict[tuple[str, int], tuple[int, str | None]]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            await _check_plan(admin, planned)
            if throttle:
                await admin.set_replication_throttle(throttle)
            results = await admin.alter_partition_reassignments(dict(planned))
            if wait:
                await follow(admin, planned)
                if throttle:
                    await admin.set_replication_throttle(0)
            return results

    results = run_client(bootstrap, go())
    refused = {tp: r for tp, r in results.items() if r[0]}
    for (topic, index), (code, message) in sorted(refused.items()):
        typer.echo(f"{topic}-{index}: refused ({message or f'error {code}'})", err=True)
    if refused:
        raise fail(f"{len(refused)} of {len(planned)} moves were refused")
    typer.echo(f"{len(planned)} partitions {'moved' if wait else 'moving'}")


async def follow(admin: AsyncAdmin, planned: Plan) -> None:
    """A progress bar per moving partition (bytes its new replicas hold against the
    leader's), until none of ``planned`` is moving."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn  # noqa: PLC0415

    leaders = {(t.name, p.partition): p.leader for t in await admin.describe_topics(
        sorted({t for t, _p in planned})) for p in t.partitions}  # fmt: skip
    with Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), transient=False
    ) as progress:
        tasks = {tp: progress.add_task(f"{tp[0]}-{tp[1]}", total=None) for tp in planned}
        while True:
            ongoing = await admin.list_partition_reassignments()
            sizes: dict[int, dict[tuple[str, int], int]] = {}
            for tp, task in tasks.items():
                if tp not in ongoing:
                    progress.update(
                        task,
                        completed=progress.tasks[task].total or 1,
                        total=progress.tasks[task].total or 1,
                    )
                    continue
                _replicas, adding, _removing = ongoing[tp]
                for broker in {leaders.get(tp, -1), *adding}:
                    if broker >= 0 and broker not in sizes:
                        try:
                            sizes[broker] = await admin.describe_log_dirs(broker)
                        except Exception:
                            sizes[broker] = {}
                total = sizes.get(leaders.get(tp, -1), {}).get(tp, 0)
                copied = min((sizes.get(b, {}).get(tp, 0) for b in adding), default=total)
                progress.update(task, completed=copied, total=max(total, copied, 1))
            if not any(tp in ongoing for tp in planned):
                return
            await asyncio.sleep(0.5)


@app.command()
def verify(
    plan_file: Path = typer.Argument(..., help="The plan that was executed."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Say, per partition, whether the move is complete, still running, or elsewhere;
    exit 1 unless every partition has exactly its planned replicas."""
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    planned = read_plan(plan_file)

    async def go() -> tuple[Plan, dict[Any, Any]]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            current, _racks = await _current(admin, sorted({t for t, _ in planned}))
            return current, await admin.list_partition_reassignments()

    current, ongoing = run_client(bootstrap, go())
    incomplete = 0
    for tp, replicas in sorted(planned.items()):
        if tp in ongoing:
            state = "in progress"
        elif current.get(tp) == replicas:
            state = "complete"
        else:
            state = f"not as planned: replicas {current.get(tp)}"
        incomplete += state != "complete"
        stdout_console().print(f"{tp[0]}-{tp[1]}: {state}")
    if incomplete:
        raise fail(f"{incomplete} of {len(planned)} partitions are not as planned yet")


@app.command()
def cancel(
    plan_file: Path = typer.Argument(..., help="The plan whose moves should stop."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Cancel the plan's moves still in progress: their original replicas come back."""
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    planned = read_plan(plan_file)

    async def go() -> dict[tuple[str, int], tuple[int, str | None]]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            ongoing = await admin.list_partition_reassignments()
            return await admin.alter_partition_reassignments(
                {tp: None for tp in planned if tp in ongoing}
            )

    results = run_client(bootstrap, go())
    typer.echo(f"{sum(1 for c, _m in results.values() if c == 0)} moves cancelled")
