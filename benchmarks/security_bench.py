"""Security benchmark (#28): what TLS, SASL and ACLs cost, partita beside Apache Kafka.

    .venv/bin/python benchmarks/security_bench.py [--records N] [--size BYTES] [--rounds R]
        [--handshake-seconds S] [--no-kafka]

In one run, on free 127.0.0.1 ports:
- partita (``partita broker``) and Kafka 4.4 (one KRaft node, tests/kafka/real_kafka.py),
  each with three listeners: PLAINTEXT, SSL (server certificate only) and SASL_SSL
  (SCRAM-SHA-512), the same PEM certificate from one CA on both;
- produce then consume N records of SIZE bytes (confluent-kafka, acks=1, one partition)
  through each listener, as benchmarks/broker_bench.py does: msgs/s, MB/s, broker CPU per
  record; then TLS's cost as a ratio to plaintext on each broker, and partita's figures
  as a ratio to Kafka's on each listener;
- logins per second: a new connection, the TLS handshake and a SCRAM-SHA-512 login
  (partita's client for both brokers: a Python client is the bottleneck; the broker's CPU
  per login is the figure that compares the brokers);
- the cost of one authorization check in partita's authorizer at 0, 100 and 10,000 ACLs
  (literal and prefixed), a name seen before (cached) and new names (uncached), and the
  produce rate with the authorizer off and on with 10,000 ACLs.
Medians over the rounds; the brokers' order alternates per round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import broker_bench as bb
from partita.client.connection import BrokerConnection
from partita.client.security import ClientSecurity
from partita.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from partita.security.authorizer import Authorizer
from partita.security.certificates import CertificateAuthority

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret";'
)
USER, PASSWORD = "bench", "bench-secret"
LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")


@dataclass
class Setup:
    ca: Path
    keystore: Path


def make_certificates(directory: Path) -> Setup:
    ca = CertificateAuthority.create()
    ca_file = ca.write(directory)
    broker = ca.issue(directory, "broker", hosts=("127.0.0.1", "localhost"))
    return Setup(ca_file, broker.keystore)


def broker_tls_settings(setup: Setup) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(setup.keystore),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }


def client_security(listener: str, setup: Setup) -> dict[str, Any]:
    if listener == "PLAINTEXT":
        return {}
    tls = {"security.protocol": listener, "ssl.ca.location": str(setup.ca)}
    if listener == "SASL_SSL":
        tls |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
    return tls


def start_partita(workdir: Path, setup: Setup) -> tuple[bb.BrokerProcess, dict[str, int]]:
    settings = [
        "listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        *(f"{k}={v}" for k, v in broker_tls_settings(setup).items()),
    ]
    broker = bb.start_partita(workdir, settings)
    named = (workdir / "partita.ready").read_text().splitlines()[1:]
    ports = {
        name: int(address.rpartition(":")[2])
        for name, _, address in (line.partition(" ") for line in named)
    }
    return broker, ports


def start_kafka(workdir: Path, setup: Setup) -> tuple[bb.BrokerProcess, dict[str, int]]:
    from tests.kafka.real_kafka import KafkaCluster  # noqa: PLC0415

    settings = {
        **broker_tls_settings(setup),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
    }
    cluster = KafkaCluster(
        workdir / "kafka", 1, settings, extra_listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"}
    )
    cluster.start()
    (node,) = cluster.nodes
    assert node.proc is not None
    broker = bb.BrokerProcess(bb.KAFKA, [], node.log_path, proc=node.proc)
    broker.port = node.port
    broker.on_stop = cluster.stop
    return broker, {"PLAINTEXT": node.port, **node.extra_ports}


def add_user(broker: bb.BrokerProcess, ports: dict[str, int], setup: Setup) -> None:
    """The SCRAM user, made through the PLAINTEXT listener (no authorizer on either)."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    time.sleep(1)  # Kafka publishes a credential through its metadata log


# -- throughput ----------------------------------------------------------------------------


def throughput(
    broker: bb.BrokerProcess, ports: dict[str, int], listener: str, setup: Setup, args: Any, n: int
) -> tuple[bb.Rate, bb.Rate]:
    at = replace_port(broker, ports[listener])
    bb.CLIENT_SECURITY.clear()
    bb.CLIENT_SECURITY.update(client_security(listener, setup))
    topic = f"sec-{listener.lower()}-{n}"
    scenario = bb.Scenario(1, args.size, "1")
    try:
        bb.create_topic(at, topic, 1)
        produced, acked, problems = bb.produce_pass(at, topic, scenario, args.records, None)
        consumed, more = bb.consume_pass(at, topic, scenario, acked)
        for problem in problems + more:
            print(f"  problem ({broker.name} {listener}): {problem}")
        bb.delete_topic(at, topic)
    finally:
        bb.CLIENT_SECURITY.clear()
    return produced, consumed


def replace_port(broker: bb.BrokerProcess, port: int) -> bb.BrokerProcess:
    """The same process, reached on another listener's port."""
    other = bb.BrokerProcess.__new__(bb.BrokerProcess)
    other.__dict__.update(broker.__dict__)
    other.port = port
    return other


# -- logins ----------------------------------------------------------------------------------


def logins_per_second(
    broker: bb.BrokerProcess, port: int, setup: Setup, seconds: float
) -> tuple[float, float]:
    """(logins/s, broker CPU ms per login): connect, TLS handshake, SCRAM-SHA-512."""
    security = ClientSecurity.from_config(client_security("SASL_SSL", setup))

    async def loop() -> int:
        done = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            connection = BrokerConnection("127.0.0.1", port, security=security)
            await connection.connect()
            await connection.close()
            done += 1
        return done

    cpu = broker.cpu_seconds()
    started = time.perf_counter()
    count = asyncio.run(loop())
    elapsed = time.perf_counter() - started
    return count / elapsed, (broker.cpu_seconds() - cpu) * 1000 / max(count, 1)


# -- authorization ---------------------------------------------------------------------------


def authorizer_with(count: int) -> Authorizer:
    bindings = []
    for i in range(count):
        prefixed = i % 2 == 1
        bindings.append(
            AclBinding(
                ResourceType.TOPIC,
                f"team-{i}-" if prefixed else f"topic-{i}",
                PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                f"User:user-{i % 50}",
                "*",
                Operation.READ,
                Permission.ALLOW,
            )
        )
    authorizer = Authorizer()
    authorizer.load(bindings)
    return authorizer


def check_cost(count: int) -> tuple[float, float]:
    """(cached ns, uncached ns) per authorize() call."""
    authorizer = authorizer_with(count)
    principal, host = "User:user-1", "10.0.0.1"
    names = [f"team-{i * 2 + 1}-orders-{i}" for i in range(20_000)]
    started = time.perf_counter_ns()
    for name in names:  # each new: decided, then cached
        authorizer.authorize(principal, host, Operation.READ, ResourceType.TOPIC, name)
    uncached = (time.perf_counter_ns() - started) / len(names)
    started = time.perf_counter_ns()
    for _ in range(5):
        for name in names:
            authorizer.authorize(principal, host, Operation.READ, ResourceType.TOPIC, name)
    cached = (time.perf_counter_ns() - started) / (5 * len(names))
    return cached, uncached


def produce_with_acls(workdir: Path, args: Any, acls: int | None) -> bb.Rate:
    """Produce rate on a broker with the authorizer off (None) or on with ``acls`` ACLs
    (the producer a super user: every request still passes the check)."""
    settings = []
    if acls is not None:
        settings = [
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found=true",
        ]
    broker = bb.start_partita(workdir, settings)
    try:
        if acls:
            from partita.client.admin import AsyncAdmin  # noqa: PLC0415
            from partita.client.security_admin import create_acls  # noqa: PLC0415

            bindings = list(authorizer_with(acls).bindings())

            async def load() -> None:
                async with AsyncAdmin(broker.bootstrap) as admin:
                    for start in range(0, len(bindings), 500):
                        await create_acls(admin, bindings[start : start + 500])

            asyncio.run(load())
        scenario = bb.Scenario(1, args.size, "1")
        bb.create_topic(broker, "acl-bench", 1)
        rate, _acked, problems = bb.produce_pass(broker, "acl-bench", scenario, args.records, None)
        for problem in problems:
            print(f"  problem (acls={acls}): {problem}")
        return rate
    finally:
        broker.stop()


# -- report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--handshake-seconds", type=float, default=5.0)
    parser.add_argument("--no-kafka", action="store_true")
    args = parser.parse_args(argv)
    console = Console()
    base = Path("var/bench")
    base.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="security-bench-", dir=base.resolve()))
    bb.log_clients_to(workdir / "librdkafka.log")
    setup = make_certificates(workdir / "certs")
    brokers: list[tuple[bb.BrokerProcess, dict[str, int]]] = []
    rates: dict[tuple[str, str, str], list[bb.Rate]] = {}
    logins: dict[str, tuple[float, float]] = {}
    try:
        (workdir / "partita").mkdir()
        brokers.append(start_partita(workdir / "partita", setup))
        if not args.no_kafka:
            brokers.append(start_kafka(workdir, setup))
        for broker, ports in brokers:
            add_user(broker, ports, setup)
        for round_number in range(args.rounds):
            order = brokers if round_number % 2 == 0 else brokers[::-1]
            for broker, ports in order:
                for listener in LISTENERS:
                    produced, consumed = throughput(
                        broker, ports, listener, setup, args, round_number
                    )
                    rates.setdefault((broker.name, listener, "produce"), []).append(produced)
                    rates.setdefault((broker.name, listener, "consume"), []).append(consumed)
                    console.print(
                        f"round {round_number + 1} {broker.name} {listener}: produce "
                        f"{produced.mb_s:.1f} MB/s, consume {consumed.mb_s:.1f} MB/s"
                    )
        for broker, ports in brokers:
            logins[broker.name] = logins_per_second(
                broker, ports["SASL_SSL"], setup, args.handshake_seconds
            )
    finally:
        for broker, _ports in brokers:
            broker.stop()
    costs = {count: check_cost(count) for count in (0, 100, 10_000)}
    acl_rates = {}
    for label, acls in (("off", None), ("10,000 ACLs", 10_000)):
        where = workdir / f"acls-{acls or 0}"
        where.mkdir()
        acl_rates[label] = produce_with_acls(where, args, acls)
    report(console, args, brokers, rates, logins, costs, acl_rates)
    return 0


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    console: Console,
    args: Any,
    brokers: list[tuple[bb.BrokerProcess, dict[str, int]]],
    rates: dict[tuple[str, str, str], list[bb.Rate]],
    logins: dict[str, tuple[float, float]],
    costs: dict[int, tuple[float, float]],
    acl_rates: dict[str, bb.Rate],
) -> None:
    names = [b.name for b, _ in brokers]
    table = Table(
        title=f"{args.records:,} records of {args.size} B, 1 partition, acks=1 "
        f"(medians of {args.rounds})"
    )
    for column in (
        "broker",
        "listener",
        "phase",
        "MB/s",
        "vs PLAINTEXT",
        "broker CPU µs/rec",
        "vs Kafka",
    ):
        table.add_column(column, justify="right")
    for phase in ("produce", "consume"):
        for name in names:
            base = _median([r.mb_s for r in rates[(name, "PLAINTEXT", phase)]])
            for listener in LISTENERS:
                runs = rates[(name, listener, phase)]
                mb = _median([r.mb_s for r in runs])
                cpu = _median([(r.broker_cpu / max(r.records, 1) * 1e6) for r in runs])
                kafka = rates.get((bb.KAFKA, listener, phase))
                versus = (
                    f"{mb / _median([r.mb_s for r in kafka]):.2f}x"
                    if kafka and name != bb.KAFKA
                    else ""
                )
                table.add_row(
                    name, listener, phase, f"{mb:.1f}", f"{mb / base:.2f}x", f"{cpu:.1f}", versus
                )
    console.print(table)
    login = Table(
        title="logins over SASL_SSL (new connection + TLS + SCRAM-SHA-512), partita's client"
    )
    for column in ("broker", "logins/s", "broker CPU ms/login"):
        login.add_column(column, justify="right")
    for name, (per_second, cpu_ms) in logins.items():
        login.add_row(name, f"{per_second:.0f}", f"{cpu_ms:.2f}")
    console.print(login)
    checks = Table(title="partita's authorizer: one check (ns)")
    for column in ("ACLs", "cached", "uncached (new name)"):
        checks.add_column(column, justify="right")
    for count, (cached, uncached) in costs.items():
        checks.add_row(f"{count:,}", f"{cached:.0f}", f"{uncached:.0f}")
    console.print(checks)
    produce = Table(title="produce with the authorizer (partita, PLAINTEXT)")
    for column in ("authorizer", "MB/s", "broker CPU µs/rec"):
        produce.add_column(column, justify="right")
    for label, rate in acl_rates.items():
        produce.add_row(
            label, f"{rate.mb_s:.1f}", f"{(rate.broker_cpu / max(rate.records, 1) * 1e6):.1f}"
        )
    console.print(produce)


if __name__ == "__main__":
    sys.exit(main())
