"""``partita quota``: client quotas per user, client id, or both (Kafka's
AlterClientQuotas and DescribeClientQuotas), as ``kafka-configs --entity-type
users|clients`` sets them."""

from __future__ import annotations

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

app = typer.Typer(
    help="Client quotas: byte rates and request time per user or client id.", no_args_is_help=True
)
KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
Entity = tuple[tuple[str, str | None], ...]


def _entity(
    user: str | None, default_user: bool, client_id: str | None, default_client_id: bool
) -> Entity:
    if user is not None and default_user:
        raise fail("--user or --default-user, not both")
    if client_id is not None and default_client_id:
        raise fail("--client-id or --default-client-id, not both")
    parts: list[tuple[str, str | None]] = []
    if user is not None or default_user:
        parts.append(("user", user))
    if client_id is not None or default_client_id:
        parts.append(("client-id", client_id))
    return tuple(parts)


@app.command("set")
def set_quota(
    values: list[str] = typer.Argument(None, help=f"KEY=VALUE, KEY one of {', '.join(KEYS)}."),
    user: str | None = typer.Option(None, "--user"),
    default_user: bool = typer.Option(False, "--default-user", help="Every user without one."),
    client_id: str | None = typer.Option(None, "--client-id"),
    default_client_id: bool = typer.Option(False, "--default-client-id"),
    remove: list[str] = typer.Option([], "--remove", metavar="KEY", help="Remove a quota."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Set quotas. Example (1 MiB/s for alice's producers):

        partita quota set --user alice producer_byte_rate=1048576

    The most specific entity wins: user and client id, then user, then the defaults."""
    entity = _entity(user, default_user, client_id, default_client_id)
    if not entity:
        raise fail("name who: --user, --default-user, --client-id or --default-client-id")
    chosen: dict[str, float] = {}
    for item in values or []:
        key, sep, value = item.partition("=")
        if not sep or key not in KEYS:
            raise fail(f"{item!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
        try:
            chosen[key] = float(value)
        except ValueError:
            raise fail(f"{item!r}: the value is not a number") from None
    if not chosen and not remove:
        raise fail("give KEY=VALUE to set, or --remove KEY")

    async def go() -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import alter_client_quotas  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            await alter_client_quotas(admin, entity, chosen, remove)

    run_client(bootstrap, go())
    stdout_console().print(f"quotas of {_name(entity)} updated")


@app.command()
def describe(
    user: str | None = typer.Option(None, "--user"),
    default_user: bool = typer.Option(False, "--default-user"),
    client_id: str | None = typer.Option(None, "--client-id"),
    default_client_id: bool = typer.Option(False, "--default-client-id"),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Show quotas: of one entity, or every one that has some."""
    from rich.table import Table  # noqa: PLC0415

    entity = _entity(user, default_user, client_id, default_client_id) or None

    async def go() -> list[tuple[Entity, dict[str, float]]]:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import describe_client_quotas  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await describe_client_quotas(admin, entity)

    table = Table(title="client quotas")
    for column in ("entity", *KEYS):
        table.add_column(column)
    for found, quotas in sorted(run_client(bootstrap, go()), key=lambda e: _name(e[0])):
        table.add_row(_name(found), *(f"{quotas[k]:.15g}" if k in quotas else "" for k in KEYS))
    stdout_console().print(table)


def _name(entity: Entity) -> str:
    return ", ".join(f"{kind}={name if name is not None else '<default>'}" for kind, name in entity)
