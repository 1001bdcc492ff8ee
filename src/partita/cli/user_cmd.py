"""``partita user``: SCRAM users (Kafka's AlterUserScramCredentials and
DescribeUserScramCredentials), as ``kafka-configs --entity-type users`` and ``rpk
security user`` manage them. The password is salted and hashed here: only the salted
password reaches the broker, and only the derived keys are kept."""

from __future__ import annotations

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

app = typer.Typer(help="SCRAM users: add, list, remove.", no_args_is_help=True)
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanism(value: str) -> str:
    if value.upper() not in MECHANISMS:
        raise fail(f"--mechanism {value!r}: {' or '.join(MECHANISMS)}")
    return value.upper()


@app.command()
def add(
    name: str = typer.Argument(..., help="The user name (its principal is User:NAME)."),
    password: str = typer.Option(
        ...,
        "--password",
        prompt=True,
        hide_input=True,
        confirmation_prompt=True,
        envvar="PARTITA_USER_PASSWORD",
        help="Asked for when not given (or $PARTITA_USER_PASSWORD).",
    ),
    mechanism: str = typer.Option("SCRAM-SHA-512", "--mechanism", "-m"),
    iterations: int = typer.Option(8192, "--iterations", help="4096 to 16384."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Create a user, or change its password. Example: partita user add alice -m SCRAM-SHA-256"""
    chosen = _mechanism(mechanism)

    async def go() -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import upsert_scram_user  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            await upsert_scram_user(admin, name, password, chosen, iterations)

    run_client(bootstrap, go())
    stdout_console().print(f"user {name} can log in with {chosen}")


@app.command("list")
def list_users(bootstrap: str = bootstrap_option()) -> None:
    """List users and their SCRAM mechanisms (never a password or key)."""
    from rich.table import Table  # noqa: PLC0415

    async def go() -> list[tuple[str, str]]:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import describe_scram_users  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            users = await describe_scram_users(admin)
        return [
            (u.name, ", ".join(f"{m} ({i} iterations)" for m, i in u.mechanisms)) for u in users
        ]

    table = Table(title="users")
    table.add_column("user")
    table.add_column("mechanisms")
    for row in run_client(bootstrap, go()):
        table.add_row(*row)
    stdout_console().print(table)


@app.command()
def remove(
    name: str = typer.Argument(...),
    mechanism: str = typer.Option("SCRAM-SHA-512", "--mechanism", "-m"),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Remove a user's credential for one mechanism."""
    chosen = _mechanism(mechanism)

    async def go() -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import delete_scram_user  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            await delete_scram_user(admin, name, chosen)

    run_client(bootstrap, go())
    stdout_console().print(f"removed {chosen} for user {name}")
