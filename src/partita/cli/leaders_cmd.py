"""``partita leaders``: move leadership (ElectLeaders), like kafka-leader-election."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

if TYPE_CHECKING:
    from partita.client.admin import AsyncAdmin

app = typer.Typer(
    help="Partition leadership: move it back to preferred leaders, or elect uncleanly.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Partition leadership: move it back to preferred leaders, or elect uncleanly."""


_OUTCOMES = {
    0: "elected",
    84: "already led by its preferred leader",
    80: "preferred leader not alive or not in sync",
    83: "no live replica can lead",
    3: "no such partition",
}


def parse_partitions(specs: list[str]) -> list[tuple[str, int]] | None:
    """TOPIC (every partition, resolved by the caller) or TOPIC:P; none: everything."""
    if not specs:
        return None
    out = []
    for spec in specs:
        topic, sep, index = spec.rpartition(":")
        if sep and index.isdigit() and topic:
            out.append((topic, int(index)))
        else:
            out.append((spec, -1))
    return out


@app.command()
def elect(
    partitions: list[str] = typer.Argument(
        None, help="TOPIC or TOPIC:PARTITION, repeatable; none: every partition."
    ),
    preferred: bool = typer.Option(
        True,
        "--preferred/--unclean",
        help="--preferred moves leadership back to each partition's first replica (if alive "
        "and in sync). --unclean elects any live replica for partitions with no leader: "
        "records only the old leader had are lost.",
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Run a leader election, as kafka-leader-election --election-type PREFERRED|UNCLEAN.

    Example: partita leaders elect orders            (every partition of orders)
    """
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    wanted = parse_partitions(partitions or [])

    async def go() -> dict[tuple[str, int], tuple[int, str | None]]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await admin.elect_leaders(preferred, await _expand(admin, wanted))

    results = run_client(bootstrap, go())
    from rich.table import Table  # noqa: PLC0415

    table = Table()
    for column in ("partition", "outcome"):
        table.add_column(column)
    for (topic, index), (code, message) in sorted(results.items()):
        table.add_row(f"{topic}-{index}", _OUTCOMES.get(code, message or f"error {code}"))
    stdout_console().print(table)
    failed = [k for k, (code, _m) in results.items() if code not in (0, 84)]
    if failed:
        raise fail(f"{len(failed)} partition(s) could not be elected")


async def _expand(
    admin: AsyncAdmin, wanted: list[tuple[str, int]] | None
) -> list[tuple[str, int]] | None:
    if wanted is None:
        return None
    out = []
    for topic, index in wanted:
        if index >= 0:
            out.append((topic, index))
            continue
        described = await admin.describe_topics([topic])
        out.extend((topic, p.partition) for p in described[0].partitions)
    return out
