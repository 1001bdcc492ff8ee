"""``partita txn``: find and end transactions (like kafka-transactions.sh).

A read_committed consumer stops at a partition's last stable offset: the first offset of
the oldest transaction still open there. ``txn list`` and ``txn describe`` show which
transactional ids are open and since when; ``txn producers`` shows who holds a partition
back; ``txn abort`` ends a transaction whose producer and coordinator are both gone.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from partita.cli.common import bootstrap_option, client_settings, run_client, stdout_console

if TYPE_CHECKING:
    from partita.client.cluster import Cluster

T = TypeVar("T")

app = typer.Typer(
    help="Transactions: list and describe them, see a partition's producers, abort a hanging one.",
    no_args_is_help=True,
)


def _run(bootstrap: str, action: Callable[[Cluster], Awaitable[T]]) -> T:
    """``action`` over a cluster connection; a failure is one line and exit 1."""
    from partita.client.cluster import Cluster  # noqa: PLC0415

    async def go() -> T:
        cluster = Cluster(bootstrap, "partita-cli", security=client_settings())
        try:
            return await action(cluster)
        finally:
            await cluster.close()

    return run_client(bootstrap, go())


def _age(start_ms: int) -> str:
    if start_ms < 0:
        return "-"
    return f"{max(0.0, time.time() - start_ms / 1000):.0f} s"


@app.command("list")
def list_transactions(
    state: list[str] = typer.Option(
        [], "--state", help="Only these states (Ongoing, PrepareCommit, CompleteAbort, ...)."
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Every transactional id the coordinators know, with its producer id and state."""
    from rich.table import Table  # noqa: PLC0415

    from partita.client.transaction_admin import list_transactions  # noqa: PLC0415

    found = _run(bootstrap, lambda cluster: list_transactions(cluster, state))
    table = Table(title="transactions")
    for column in ("transactional id", "producer id", "state", "coordinator"):
        table.add_column(column)
    for t in found:
        table.add_row(t.transactional_id, str(t.producer_id), t.state, str(t.coordinator))
    stdout_console().print(table)


@app.command()
def describe(
    transactional_id: str = typer.Argument(..., help="The transactional id."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """One transactional id: its state, producer, timeout, how long its transaction has
    been open and the partitions it wrote."""
    from rich.table import Table  # noqa: PLC0415

    from partita.client.transaction_admin import describe_transaction  # noqa: PLC0415

    d = _run(bootstrap, lambda cluster: describe_transaction(cluster, transactional_id))
    table = Table(title=f"transactional id '{d.transactional_id}'", show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("state", d.state)
    table.add_row("coordinator", d.coordinator)
    table.add_row("producer id / epoch", f"{d.producer_id} / {d.producer_epoch}")
    table.add_row("timeout", f"{d.timeout_ms / 1000:.0f} s")
    table.add_row("open for", _age(d.start_ms))
    table.add_row("partitions", " ".join(f"{t}-{p}" for t, p in d.partitions) or "-")
    stdout_console().print(table)


@app.command()
def producers(
    topic: str = typer.Argument(..., help="The topic."),
    partition: int = typer.Option(0, "-p", "--partition", help="The partition."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """The producers a partition's leader knows, and the transactions they hold open
    there (the oldest one is where read_committed readers stop)."""
    from rich.table import Table  # noqa: PLC0415

    from partita.client.transaction_admin import describe_producers  # noqa: PLC0415

    found = _run(bootstrap, lambda cluster: describe_producers(cluster, topic, partition))
    table = Table(title=f"producers of {topic}-{partition}")
    for column in ("producer id", "epoch", "last sequence", "last write", "open since offset"):
        table.add_column(column, justify="right")
    for p in found:
        table.add_row(
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.last_sequence),
            _age(p.last_timestamp_ms) + " ago" if p.last_timestamp_ms >= 0 else "-",
            str(p.txn_start_offset) if p.txn_start_offset >= 0 else "-",
        )
    stdout_console().print(table)


@app.command()
def abort(
    topic: str = typer.Option(..., "--topic", help="The partition's topic."),
    partition: int = typer.Option(..., "--partition", help="The partition."),
    start_offset: int = typer.Option(
        ...,
        "--start-offset",
        help="The first offset of the transaction to abort (see 'txn producers').",
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Abort a hanging transaction on one partition: an ABORT marker is written there
    for its producer. Needs CLUSTER_ACTION when ACLs are on. Only for a transaction whose
    producer and coordinator are gone: a live one is ended by its producer or its
    transaction timeout."""
    from partita.client.transaction_admin import abort_transaction  # noqa: PLC0415

    producer = _run(
        bootstrap, lambda cluster: abort_transaction(cluster, topic, partition, start_offset)
    )
    stdout_console().print(
        f"aborted producer {producer.producer_id}'s transaction on {topic}-{partition} "
        f"(open since offset {start_offset})"
    )
