"""The main job on a cluster: etcd and N brokers on loopback (replication factor 3, min
ISR 2), the broker leading the most partitions killed with -9 halfway through producing,
and what the cluster does about it, measured from outside: the new leaders and the ISR
shrink as the brokers' metadata shows them, the producer's pause in acknowledgements,
the restarted broker back in every ISR, and its leaderships handed back by a preferred
leader election (ElectLeaders), not left to the controller's own rebalance, which looks
only every ``leader.imbalance.check.interval.seconds`` (300 s by default)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from partita.client.admin import AsyncAdmin, PartitionDescription, TopicDescription
from partita.client.partition_layout import broker_lines
from partita.errors import KafkaError
from partita.local.cluster import BrokerNode, ClusterStartError, LocalCluster

REPLICATION = 3
MIN_ISR = 2
# Every topic of the job, the ones Spark writes included, is replicated as 'flights' is.
BROKER_SETTINGS = {
    "default.replication.factor": str(REPLICATION),
    "min.insync.replicas": str(MIN_ISR),
    "offsets.topic.replication.factor": str(REPLICATION),
}
POLL_SECONDS = 0.1
WAIT_SECONDS = 120.0

Say = Callable[[str], None]


@contextlib.contextmanager
def local_cluster(
    base: Path,
    brokers: int,
    settings: dict[str, str] | None = None,
    client_settings: dict[str, str] | None = None,
) -> Iterator[LocalCluster]:
    """etcd and ``brokers`` brokers under ``base`` (with ``settings`` beside the job's:
    a secured cluster's), reached with ``client_settings``; stopped with a controlled
    shutdown, or killed if they did not all come up."""
    cluster = LocalCluster(
        base,
        brokers,
        settings={**BROKER_SETTINGS, **(settings or {})},
        client_settings=client_settings,
    )
    try:
        cluster.start()
    except ClusterStartError:
        cluster.kill()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()


def all_brokers(cluster: LocalCluster) -> str:
    """Every broker's address, a stopped one's too: what Spark is given."""
    return ",".join(b.bootstrap for b in cluster.brokers)


class AckClock:
    """Acknowledgements per partition, and the longest pause between two of them that
    ended after the kill: how long a producer waited on that partition for the cluster.

    Not simply 'first acknowledgement after the kill': the answer a killed leader sent
    just before dying still completes its records' futures after the kill."""

    def __init__(self) -> None:
        self.acked = 0
        self.per_partition: dict[int, int] = {}
        self.last: dict[int, float] = {}
        self.longest: dict[int, float] = {}
        self.last_any = 0.0
        self.longest_any = 0.0  # ... on every partition at once
        self.killed_at: float | None = None

    def ack(self, partition: int) -> None:
        now = time.monotonic()
        self.acked += 1
        self.per_partition[partition] = self.per_partition.get(partition, 0) + 1
        previous = self.last.get(partition)
        self.last[partition] = now
        if self.killed_at is not None and previous is not None:
            pause = now - previous
            if pause > self.longest.get(partition, 0.0):
                self.longest[partition] = pause
            self.longest_any = max(self.longest_any, now - self.last_any)
        self.last_any = now

    def kill_now(self) -> float:
        self.killed_at = time.monotonic()
        return self.killed_at

    def pauses(self) -> dict[int, float]:
        """Per partition: the longest pause in its acknowledgements ending after the kill."""
        return dict(sorted(self.longest.items()))


@dataclass
class PartitionFailover:
    partition: int
    leader_before: int
    isr_before: list[int]
    leader_after: int = -1
    isr_after: list[int] = field(default_factory=list)
    moved_s: float | None = None  # seconds from the kill to the new leader in metadata
    shrunk_s: float | None = None  # ... to the ISR without the killed broker


@dataclass
class FailoverReport:
    victim: int = 0
    led: list[int] = field(default_factory=list)
    acked_at_kill: int = 0
    killed_at: float = 0.0
    partitions: list[PartitionFailover] = field(default_factory=list)
    failover_s: float = 0.0  # until every partition had a live leader and a shrunk ISR
    pauses: dict[int, float] = field(default_factory=dict)  # AckClock.pauses, at the end
    silence_s: float = 0.0  # AckClock.longest_any: no acknowledgement on any partition
    restarted_after_s: float = 0.0  # from the kill to the restart
    restart_s: float = 0.0  # the broker's own start-up
    rejoined_s: float = 0.0  # from its restart to being back in every ISR
    preferred_s: float = 0.0  # from the election request to every preferred leader
    elected: list[int] = field(default_factory=list)  # partitions the election moved
    restored_at: float = 0.0


async def _partitions(admin: AsyncAdmin, topic: str) -> list[PartitionDescription] | None:
    """The topic's partitions from any broker that answers; None if none did this time."""
    try:
        async with asyncio.timeout(5):
            return (await admin.describe_topics([topic]))[0].partitions
    except (OSError, KafkaError, TimeoutError):
        return None


async def _until(
    admin: AsyncAdmin,
    topic: str,
    done: Callable[[list[PartitionDescription]], bool],
    what: str,
    seen: Callable[[list[PartitionDescription]], None] | None = None,
) -> list[PartitionDescription]:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        partitions = await _partitions(admin, topic)
        if partitions is not None:
            if seen is not None:
                seen(partitions)
            if done(partitions):
                return partitions
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {WAIT_SECONDS:.0f} s")
        await asyncio.sleep(POLL_SECONDS)


def layout(cluster: LocalCluster, topic: str, partitions: list[PartitionDescription]) -> list[str]:
    """The per-broker layout of ``topic``, brokers that are not running shown down."""
    described = [TopicDescription(topic, "", False, partitions)]
    down = [b.node_id for b in cluster.brokers if not b.alive]
    return broker_lines(
        [b.node_id for b in cluster.brokers], described, with_topic=False, down=down
    )


async def describe(cluster: LocalCluster, topic: str) -> list[PartitionDescription]:
    async with AsyncAdmin(cluster.bootstrap, security=cluster.client_settings) as admin:
        return await _until(admin, topic, lambda ps: all(p.leader >= 0 for p in ps), "leaders")


def _isr(isr: list[int]) -> str:
    return "[" + ",".join(map(str, isr)) + "]"


class Failover:
    """Give ``ack`` to the producer as its acknowledgement callback: once half of
    ``total`` records are acknowledged it kills -9 the broker leading the most partitions
    (the most acknowledged records breaks a tie), there and then, between two
    acknowledgements. ``follow`` then watches the failover until every partition has a
    live leader and an ISR without that broker, restarts it on its port, waits until it
    is back in every ISR, and elects the preferred leaders."""

    def __init__(
        self,
        cluster: LocalCluster,
        topic: str,
        before: list[PartitionDescription],
        total: int,
        say: Say,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.before = before
        self.total = total
        self.say = say
        self.clock = AckClock()
        self.report = FailoverReport()
        self.killed = asyncio.Event()

    def ack(self, partition: int) -> None:
        self.clock.ack(partition)
        if not self.killed.is_set() and self.clock.acked * 2 >= self.total:
            self._kill()

    def _kill(self) -> None:
        led: dict[int, list[int]] = {}
        for p in self.before:
            led.setdefault(p.leader, []).append(p.partition)
        acked = self.clock.per_partition
        victim = max(sorted(led), key=lambda n: (len(led[n]), sum(acked.get(p, 0) for p in led[n])))
        report = self.report
        report.victim, report.led = victim, sorted(led[victim])
        report.acked_at_kill = self.clock.acked
        report.killed_at = self.clock.kill_now()
        self.cluster.broker(victim).kill()
        self.killed.set()
        self.say(
            f"[bold red]kill -9 broker {victim}[/bold red] (leader of "
            f"{', '.join(f'P{p}' for p in report.led)}) with {report.acked_at_kill:,} of "
            f"{self.total:,} flights acknowledged"
        )

    async def follow(self) -> FailoverReport:
        await self.killed.wait()
        report, topic, say = self.report, self.topic, self.say
        victim = report.victim
        node = self.cluster.broker(victim)
        states = {
            p.partition: PartitionFailover(p.partition, p.leader, list(p.isr))
            for p in self.before
            if victim in p.replicas
        }

        def seen(partitions: list[PartitionDescription]) -> None:
            now = time.monotonic() - report.killed_at
            for p in partitions:
                state = states.get(p.partition)
                if state is None:
                    continue
                if state.moved_s is None and p.leader not in (victim, -1):
                    state.moved_s = now if state.leader_before == victim else 0.0
                    state.leader_after = p.leader
                if state.shrunk_s is None and victim not in p.isr:
                    state.shrunk_s = now
                    state.isr_after = list(p.isr)

        async with AsyncAdmin(
            self.cluster.bootstrap, security=self.cluster.client_settings
        ) as admin:
            after = await _until(
                admin,
                topic,
                lambda ps: all(p.leader not in (victim, -1) and victim not in p.isr for p in ps),
                f"the failover from broker {victim}",
                seen,
            )
            report.failover_s = time.monotonic() - report.killed_at
            report.partitions = [states[p] for p in sorted(states)]
            for state in report.partitions:
                if state.leader_before == victim:
                    say(
                        f"  P{state.partition}: leader {victim} -> {state.leader_after} after "
                        f"{state.moved_s or 0:.1f} s, ISR {_isr(state.isr_before)} -> "
                        f"{_isr(state.isr_after)}"
                    )
                else:
                    say(
                        f"  P{state.partition}: leader {state.leader_before} stays, ISR "
                        f"{_isr(state.isr_before)} -> {_isr(state.isr_after)} after "
                        f"{state.shrunk_s or 0:.1f} s"
                    )
            for line in layout(self.cluster, topic, after):
                say("  " + line)

            started = time.monotonic()
            report.restarted_after_s = started - report.killed_at
            await asyncio.to_thread(_restart, node)
            report.restart_s = time.monotonic() - started
            say(
                f"broker {victim} restarted on {node.bootstrap}, {started - report.killed_at:.1f}"
                f" s after the kill (its start-up took {report.restart_s:.1f} s)"
            )
            await _until(
                admin,
                topic,
                lambda ps: all(victim in p.isr for p in ps if victim in p.replicas),
                f"broker {victim} rejoining the ISRs",
            )
            report.rejoined_s = time.monotonic() - started
            say(f"  broker {victim} back in every ISR {report.rejoined_s:.1f} s after its restart")

            started = time.monotonic()
            results = await admin.elect_leaders(
                preferred=True, partitions=[(topic, p.partition) for p in self.before]
            )
            report.elected = sorted(p for (_t, p), (code, _m) in results.items() if code == 0)
            restored = await _until(
                admin,
                topic,
                lambda ps: all(p.leader == p.replicas[0] for p in ps),
                "the preferred leaders' return",
            )
            report.preferred_s = time.monotonic() - started
            report.restored_at = time.monotonic()
            say(
                f"  preferred leaders back (ElectLeaders moved "
                f"{', '.join(f'P{p}' for p in report.elected) or 'nothing'}) in "
                f"{report.preferred_s:.1f} s:"
            )
            for line in layout(self.cluster, topic, restored):
                say("  " + line)
        return report


def _restart(node: BrokerNode) -> None:
    """Restart a killed broker on its port; on another if that port is taken."""
    try:
        node.start()
    except ClusterStartError:
        if "address already in use" not in node.logs().lower():
            raise
        node.port = 0
        node.listener_ports.clear()
        node.start()
