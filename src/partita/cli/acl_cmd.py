"""``partita acl``: add, list and remove ACLs (Kafka's CreateAcls, DescribeAcls,
DeleteAcls), as kafka-acls and rpk acl do."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

if TYPE_CHECKING:
    from partita.security.acl import AclBinding, AclFilter

app = typer.Typer(
    help="ACLs: who may do what to which topics, groups, transactional ids, the cluster.",
    no_args_is_help=True,
)


def _resources(
    topic: list[str], group: list[str], cluster: bool, transactional_id: list[str]
) -> list[tuple[str, str]]:
    out = [("TOPIC", t) for t in topic] + [("GROUP", g) for g in group]
    out += [("TRANSACTIONAL_ID", t) for t in transactional_id]
    if cluster:
        out.append(("CLUSTER", "kafka-cluster"))
    return out


def _operation(name: str) -> str:
    from partita.security.acl import Operation  # noqa: PLC0415

    wanted = name.strip().upper().replace("-", "_")
    if wanted not in Operation.__members__ or wanted in ("ANY", "UNKNOWN"):
        choices = ", ".join(o.name.lower() for o in Operation if o.value > 1)
        raise fail(f"--operation {name!r}: one of {choices}")
    return wanted


@app.command()
def add(
    allow_principal: list[str] = typer.Option(
        [], "--allow-principal", metavar="User:NAME", help="Principal allowed (repeatable)."
    ),
    deny_principal: list[str] = typer.Option(
        [], "--deny-principal", metavar="User:NAME", help="Principal denied (repeatable)."
    ),
    operation: list[str] = typer.Option(
        ...,
        "--operation",
        "-o",
        help="read, write, create, delete, alter, describe, "
        "cluster_action, describe_configs, alter_configs, idempotent_write, all (repeatable).",
    ),
    topic: list[str] = typer.Option([], "--topic", help="A topic (repeatable)."),
    group: list[str] = typer.Option([], "--group", help="A consumer group (repeatable)."),
    transactional_id: list[str] = typer.Option([], "--transactional-id"),
    cluster: bool = typer.Option(False, "--cluster", help="The cluster itself."),
    prefixed: bool = typer.Option(
        False, "--prefixed", help="Names are prefixes: --topic orders- covers orders-eu."
    ),
    host: str = typer.Option("*", "--host", help="Client address the ACL applies to."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Allow or deny operations. Example:

        partita acl add --allow-principal User:alice -o read --topic orders --group billing

    DENY wins over ALLOW; READ, WRITE, DELETE and ALTER imply DESCRIBE."""
    from partita.security.acl import (  # noqa: PLC0415
        AclBinding,
        InvalidAclError,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )

    resources = _resources(topic, group, cluster, transactional_id)
    if not resources:
        raise fail("name a resource: --topic, --group, --transactional-id or --cluster")
    if not (allow_principal or deny_principal):
        raise fail("name a principal: --allow-principal or --deny-principal")
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    bindings: list[AclBinding] = []
    for permission, principals in (
        (Permission.ALLOW, allow_principal),
        (Permission.DENY, deny_principal),
    ):
        for principal in principals:
            for kind, name in resources:
                for op in operation:
                    binding = AclBinding(
                        ResourceType[kind], name, pattern, principal, host,
                        Operation[_operation(op)], permission,
                    )  # fmt: skip
                    try:
                        bindings.append(binding.validate())
                    except InvalidAclError as exc:
                        raise fail(str(exc)) from None

    async def go() -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import create_acls  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            await create_acls(admin, bindings)

    run_client(bootstrap, go())
    _print(bindings, f"added {len(bindings)} ACL{'s' if len(bindings) != 1 else ''}")


def _selection(
    topic: str | None, group: str | None, cluster: bool, principal: str | None
) -> AclFilter:
    from partita.security.acl import AclFilter, PatternType, ResourceType  # noqa: PLC0415

    if topic is not None:
        return AclFilter(ResourceType.TOPIC, topic, PatternType.MATCH, principal)
    if group is not None:
        return AclFilter(ResourceType.GROUP, group, PatternType.MATCH, principal)
    if cluster:
        return AclFilter(ResourceType.CLUSTER, "kafka-cluster", PatternType.MATCH, principal)
    return AclFilter(principal=principal)


@app.command("list")
def list_acls(
    topic: str | None = typer.Option(None, "--topic", help="Only ACLs that apply to it."),
    group: str | None = typer.Option(None, "--group", help="Only ACLs that apply to it."),
    cluster: bool = typer.Option(False, "--cluster"),
    principal: str | None = typer.Option(None, "--principal", metavar="User:NAME"),
    bootstrap: str = bootstrap_option(),
) -> None:
    """List ACLs: all, or those that apply to a topic, a group or the cluster (prefixed
    and wildcard ones included)."""
    selection = _selection(topic, group, cluster, principal)

    async def go() -> list[AclBinding]:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import describe_acls  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await describe_acls(admin, selection)

    _print(run_client(bootstrap, go()), None)


@app.command()
def remove(
    topic: str | None = typer.Option(None, "--topic", help="ACLs named exactly this topic."),
    group: str | None = typer.Option(None, "--group"),
    cluster: bool = typer.Option(False, "--cluster"),
    principal: str | None = typer.Option(None, "--principal", metavar="User:NAME"),
    operation: str | None = typer.Option(None, "--operation", "-o"),
    prefixed: bool = typer.Option(False, "--prefixed", help="The name is a prefix ACL's."),
    everything: bool = typer.Option(
        False, "--all", help="With no resource named: remove every ACL (of --principal)."
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Remove the ACLs that match. Example:

    partita acl remove --topic orders --principal User:alice"""
    from partita.security.acl import (  # noqa: PLC0415
        AclFilter,
        Operation,
        PatternType,
        ResourceType,
    )

    named = [(k, n) for k, n in (("TOPIC", topic), ("GROUP", group)) if n is not None]
    if cluster:
        named.append(("CLUSTER", "kafka-cluster"))
    if len(named) > 1:
        raise fail("name one resource: --topic, --group or --cluster")
    if not named and not everything:
        raise fail("name a resource (--topic, --group, --cluster), or say --all")
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    kind, name = named[0] if named else ("ANY", None)
    selection = AclFilter(
        ResourceType[kind],
        name,
        pattern if named else PatternType.ANY,
        principal,
        None,
        Operation[_operation(operation)] if operation else Operation.ANY,
    )

    async def go() -> list[AclBinding]:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415
        from partita.client.security_admin import delete_acls  # noqa: PLC0415

        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await delete_acls(admin, selection)

    removed = run_client(bootstrap, go())
    _print(removed, f"removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}")


def _print(bindings: list[AclBinding], title: str | None) -> None:
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=title)
    for column in ("principal", "host", "operation", "permission", "resource", "name", "pattern"):
        table.add_column(column)
    for b in sorted(bindings, key=lambda b: (b.principal, b.resource_type, b.resource_name)):
        table.add_row(
            b.principal,
            b.host,
            b.operation.name,
            b.permission.name,
            b.resource_type.name,
            b.resource_name,
            b.pattern_type.name,
        )
    stdout_console().print(table)
