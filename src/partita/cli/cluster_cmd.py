"""``partita cluster``: start a local development cluster; describe a running one."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from partita.cli.common import bootstrap_option, client_settings, fail, run_client, stdout_console

if TYPE_CHECKING:
    from partita.client.admin import AsyncAdmin, ClusterDescription, TopicDescription
    from partita.local.cluster import LocalCluster
    from partita.local.hosts import Host
    from partita.local.secure import SecureSetup

app = typer.Typer(
    help="A cluster of brokers: start one locally, or see who leads what.",
    no_args_is_help=True,
)


@app.command()
def up(
    brokers: int = typer.Option(3, "--brokers", min=1, max=64, help="How many brokers."),
    racks: str = typer.Option(
        "",
        "--racks",
        help="Comma-separated rack names given to the brokers in turn (broker.rack), "
        "e.g. a,b,c: replicas of a partition then land on distinct racks.",
    ),
    data_dir: Path = typer.Option(
        Path("var/cluster"), "--data-dir", help="Where etcd's and each broker's data live."
    ),
    etcd: str = typer.Option(
        "",
        "--etcd",
        help="HOST:PORT[,HOST:PORT...] of a running etcd to use instead of starting one.",
    ),
    etcd_members: int | None = typer.Option(
        None,
        "--etcd-members",
        min=1,
        max=7,
        show_default=False,
        help="How many etcd members to start as one quorum: 3 (or 5) is the production "
        "layout, in which losing one member loses nothing and stops no broker. "
        "Default: 1, or 3 with --hosts (one on each of the first three hosts).",
    ),
    hosts: bool = typer.Option(
        False,
        "--hosts",
        help="Run each broker on a host of its own: a network namespace with its own "
        "address (10.213.K.N, port 9092), etcd member N beside broker N, and a client "
        "host to run clients from. Everything then goes through advertised addresses, "
        "as on separate machines. Needs root.",
    ),
    settings: list[str] = typer.Option(
        [], "--set", help="A broker setting for every broker, e.g. --set num.partitions=6."
    ),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="TLS and SASL on every connection (SASL_SSL), ACLs on: makes a CA, the "
        "brokers' certificates, an admin user and client configs under DATA_DIR/security, "
        "and prints how to connect.",
    ),
) -> None:
    """Start etcd and BROKERS brokers on 127.0.0.1 (or each on a host of its own with
    --hosts), print the bootstrap servers and each broker's role, and run until Ctrl-C or
    SIGTERM, which stops everything cleanly.

    Example: partita cluster up --brokers 3 --racks a,b,c --etcd-members 3
    or, as three machines would: sudo partita cluster up --hosts
    then: partita -b <bootstrap> topic create orders -p 6 -r 3
    """
    from partita.local.cluster import LocalCluster  # noqa: PLC0415
    from partita.local.hosts import HostLab, HostLabError  # noqa: PLC0415

    extra: dict[str, str] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise fail(f"--set expects key=value, got {item!r}")
        extra[key] = value
    rack_list = [r.strip() for r in racks.split(",") if r.strip()] or None
    setup = None
    if secure:
        from partita.local.secure import make_secure_setup  # noqa: PLC0415

        setup = make_secure_setup(data_dir.resolve() / "security")
        extra = {**setup.broker_settings, **extra}
    if etcd and etcd_members is not None:
        raise fail("--etcd uses a running etcd; --etcd-members starts one: give one of them")
    if etcd_members is None:
        etcd_members = 3 if hosts and brokers >= 3 else 1
    with contextlib.ExitStack() as cleanup:
        try:
            lab = HostLab() if hosts else None
            if lab is not None:
                cleanup.callback(lab.close)
            cluster = LocalCluster(
                data_dir.resolve(),
                brokers,
                rack_list,
                etcd or None,
                extra,
                etcd_members=etcd_members,
                lab=lab,
            )
            client_host = lab.add("client", 200) if lab is not None else None
        except (HostLabError, ValueError) as exc:
            raise fail(f"--hosts: {exc}" if hosts else str(exc)) from None
        _run_cluster(cluster, client_host, setup, etcd_members, data_dir)


def _run_cluster(
    cluster: LocalCluster,
    client_host: Host | None,
    setup: SecureSetup | None,
    etcd_members: int,
    data_dir: Path,
) -> None:
    """Start ``cluster``, say how to reach it, and run it until a signal or a broker's
    exit; stopped cleanly in every case."""
    from partita.local.cluster import ClusterStartError  # noqa: PLC0415

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console = stdout_console()
    try:
        members = f"{etcd_members} etcd members" if etcd_members > 1 else "etcd"
        with console.status(f"starting {members} and {len(cluster.brokers)} brokers..."):
            cluster.start()
    except ClusterStartError as exc:
        cluster.kill()
        raise fail(str(exc).splitlines()[0]) from None
    try:
        security = setup.client_settings if setup is not None else client_settings()
        description = run_client(cluster.bootstrap, _describe_cluster(cluster.bootstrap, security))
        console.print(f"metadata     {cluster.metadata}")
        console.print(f"bootstrap    [bold]{cluster.bootstrap}[/bold]")
        if client_host is not None:
            console.print(
                f"hosts        {', '.join(f'{h.name} {h.address}' for h in cluster.hosts)}; "
                f"clients run here or on host {client_host.name}:",
                soft_wrap=True,
            )
            console.print(
                f"  {' '.join(client_host.launcher)} kcat -b {cluster.bootstrap} -L",
                soft_wrap=True,
                markup=False,
            )
        if setup is not None:
            _print_how_to_connect(console, cluster.bootstrap, setup)
        _print_brokers(description, {}, {}, {})
        console.print("Ctrl-C stops the cluster.")
        while not stop.wait(0.5):
            dead = [b.node_id for b in cluster.brokers if not b.alive]
            if dead:
                console.print(f"[red]broker {dead} exited[/red]; see {data_dir}/broker-N.log")
                break
    finally:
        with console.status("stopping (controlled shutdown)..."):
            cluster.stop()
        console.print("stopped")


def _print_how_to_connect(console: Any, bootstrap: str, setup: SecureSetup) -> None:
    """The commands that reach the secured cluster, with the files made for them."""
    from rich.markup import escape  # noqa: PLC0415

    lines = [
        "security     SASL_SSL (TLS + SASL PLAIN/SCRAM), ACLs on; admin user: admin",
        f"  partita --command-config {setup.client_properties} -b {bootstrap} topic list",
        f"  kcat -F {setup.librdkafka_properties} -b {bootstrap} -L",
        f"  kafka-topics.sh --bootstrap-server {bootstrap} "
        f"--command-config {setup.client_properties} --list",
        "  add users and ACLs: partita --command-config ... user add alice; "
        "partita ... acl add --allow-principal User:alice -o read --topic orders",
    ]
    for line in lines:
        console.print(escape(line), soft_wrap=True)


async def _describe_cluster(
    bootstrap: str, security: dict[str, str] | None = None
) -> ClusterDescription:
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    chosen = security if security is not None else client_settings()
    async with AsyncAdmin(bootstrap, security=chosen) as admin:
        return await admin.describe_cluster()


@app.command()
def describe(
    bootstrap: str = bootstrap_option(),
    topics: list[str] = typer.Argument(None, help="Only these topics (default: all)."),
    sample: float = typer.Option(
        1.0,
        "--sample",
        help="Seconds between two looks at the partitions' sizes, to show bytes-in per "
        "second per broker and per partition (0: don't).",
    ),
) -> None:
    """Brokers (rack, controller, leaders, replicas, bytes on disk, bytes in), per broker the
    partitions it leads and follows (Broker 1: orders/P0-Leader | orders/P1-Follower ...),
    and the skew: the biggest partitions, their share of the bytes, and how uneven the
    partitions and the brokers' led bytes are (max / mean), so a hot key shows at once."""
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    async def gather(
        admin: AsyncAdmin,
    ) -> tuple[Any, list[Any], dict[int, int], dict[int, dict[tuple[str, int], int]]]:
        cluster = await admin.describe_cluster()
        described = await admin.describe_topics(topics or None)
        sizes: dict[int, int] = {}
        replica_sizes: dict[int, dict[tuple[str, int], int]] = {}
        for broker in cluster.brokers:
            try:
                replica_sizes[broker.node_id] = await admin.describe_log_dirs(broker.node_id)
                sizes[broker.node_id] = sum(replica_sizes[broker.node_id].values())
            except Exception:
                sizes[broker.node_id] = -1  # unreachable right now: shown as "?"
        if sample > 0:
            await asyncio.sleep(sample)
            for node, before in list(replica_sizes.items()):
                with contextlib.suppress(Exception):
                    after = await admin.describe_log_dirs(node)
                    rates[node] = {
                        tp: max(0, size - before.get(tp, 0)) / sample for tp, size in after.items()
                    }
        return cluster, described, sizes, replica_sizes

    async def go() -> tuple[Any, list[Any], dict[int, int], Any]:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            return await gather(admin)

    rates: dict[int, dict[tuple[str, int], float]] = {}  # bytes-in/s, per replica
    cluster, described, sizes, replica_sizes = run_client(bootstrap, go())
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    for topic in described:
        for p in topic.partitions:
            leaders[p.leader] += 1
            replicas.update(p.replicas)
    stdout_console().print(f"cluster {cluster.cluster_id}  controller {cluster.controller}")
    led_rates = {
        (t.name, p.partition): rates.get(p.leader, {}).get((t.name, p.partition), 0.0)
        for t in described
        for p in t.partitions
    }
    rate_of = Counter[int]()
    for t in described:
        for p in t.partitions:
            rate_of[p.leader] += int(led_rates[(t.name, p.partition)])
    _print_brokers(cluster, leaders, replicas, sizes, rate_of if rates else None)
    _print_layout(cluster, described)
    _print_skew(described, replica_sizes, led_rates if rates else None)


def _print_skew(
    described: list[TopicDescription],
    replica_sizes: dict[int, dict[tuple[str, int], int]],
    rates: dict[tuple[str, int], float] | None = None,
) -> None:
    """Partition sizes as their leaders hold them; the hottest first."""
    from rich.table import Table  # noqa: PLC0415

    sized: list[tuple[int, str, int]] = []  # bytes, partition, leader
    led: Counter[int] = Counter()
    for topic in described:
        if topic.internal:
            continue
        for p in topic.partitions:
            size = replica_sizes.get(p.leader, {}).get((topic.name, p.partition), 0)
            sized.append((size, f"{topic.name}/P{p.partition}", p.leader))
            led[p.leader] += size
    total = sum(s for s, _n, _l in sized)
    if not sized or not total:
        return
    sized.sort(reverse=True)
    table = Table(title="biggest partitions (bytes on their leader)")
    for column in ("partition", "leader", "bytes", "share", "bytes-in/s"):
        table.add_column(column)
    for size, name, leader in sized[:10]:
        topic_name, _, index = name.rpartition("/P")
        rate = "-" if rates is None else f"{int(rates.get((topic_name, int(index)), 0)):,}"
        table.add_row(name, str(leader), f"{size:,}", f"{size / total:.0%}", rate)
    console = stdout_console()
    console.print(table)
    mean = total / len(sized)
    hottest = sized[0]
    brokers_mean = total / max(1, len(led))
    console.print(
        f"hottest {hottest[1]}: {hottest[0] / total:.0%} of the bytes; "
        f"partition imbalance (max/mean) {hottest[0] / mean:.2f}; "
        f"led bytes per broker (max/mean) {max(led.values()) / brokers_mean:.2f}"
    )


def _print_brokers(
    cluster: ClusterDescription,
    leaders: Counter[int] | dict[int, int],
    replicas: Counter[int] | dict[int, int],
    sizes: dict[int, int],
    bytes_in: Counter[int] | None = None,
) -> None:
    from rich.table import Table  # noqa: PLC0415

    table = Table()
    columns = ["broker", "address", "rack", "role", "leaders", "replicas", "bytes"]
    for column in columns + (["bytes-in/s"] if bytes_in is not None else []):
        table.add_column(column)
    for b in cluster.brokers:
        size = sizes.get(b.node_id)
        row = [
            str(b.node_id),
            f"{b.host}:{b.port}",
            b.rack or "-",
            "controller" if b.node_id == cluster.controller else "broker",
            str(leaders.get(b.node_id, 0)),
            str(replicas.get(b.node_id, 0)),
            "-" if size is None else "?" if size < 0 else f"{size:,}",
        ]
        if bytes_in is not None:
            row.append(f"{bytes_in.get(b.node_id, 0):,}")
        table.add_row(*row)
    stdout_console().print(table)


def _print_layout(cluster: ClusterDescription, described: list[TopicDescription]) -> None:
    from partita.client.partition_layout import broker_lines, leaderless  # noqa: PLC0415

    console = stdout_console()
    for line in broker_lines([b.node_id for b in cluster.brokers], described):
        console.print(line)
    offline = leaderless(described)
    if offline:
        console.print(f"[red]no leader:[/red] {' '.join(offline)}")


@app.command()
def drain(
    broker: int = typer.Option(..., "--broker", help="The id of the broker to empty."),
    throttle: int = typer.Option(0, "--throttle", help="Replication bytes/s while moving."),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Move every replica and leadership off BROKER so that it can be removed: plan the
    moves over the other brokers (as few as possible, rack-aware), run them with a
    progress bar, then hand leaderships back to preferred leaders."""
    from partita.cli.reassign_cmd import follow  # noqa: PLC0415
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415
    from partita.cluster.rebalance_plan import plan  # noqa: PLC0415

    async def go() -> int:
        async with AsyncAdmin(bootstrap, security=client_settings()) as admin:
            cluster = await admin.describe_cluster()
            others = [b.node_id for b in cluster.brokers if b.node_id != broker]
            if not others:
                raise ValueError("no other broker to move the replicas to")
            racks = {b.node_id: b.rack for b in cluster.brokers}
            described = await admin.describe_topics(None)
            current = {(t.name, p.partition): p.replicas for t in described for p in t.partitions}
            holding = {tp: r for tp, r in current.items() if broker in r}
            if not holding:
                return 0
            planned = plan(holding, others, racks)
            if throttle:
                await admin.set_replication_throttle(throttle)
            await admin.alter_partition_reassignments(dict(planned))
            await follow(admin, planned)
            if throttle:
                await admin.set_replication_throttle(0)
            await admin.elect_leaders(True, list(planned))
            return len(planned)

    moved = run_client(bootstrap, go())
    stdout_console().print(f"broker {broker} holds no replicas now ({moved} partitions moved)")
