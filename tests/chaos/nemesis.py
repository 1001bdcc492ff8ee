"""The nemesis: faults injected into a running cluster, each healed before the next, and
every one of them healed at the end (``heal_all``). Each start and heal is a Fault event.

Kinds:
- kill: kill -9 a broker (a random one, or the leader of a random partition: they
  alternate), restart it on its data directory after a few seconds;
- pause: SIGSTOP the leader of a random partition past its etcd lease, then SIGCONT;
- term: SIGTERM a random broker (controlled shutdown; it must exit 0), restart it;
- etcd: kill -9 etcd (every member of a quorum), restart it on its data directory;
- etcd-member: kill -9 one member of etcd's quorum, restart it;
- etcd-leader: SIGTERM the member etcd's quorum follows, restart it;
- partition: cut a broker (random or a leader) off from the other brokers and etcd while
  clients still reach it (network namespaces, partita.local.hosts.HostLab), heal; on a
  cluster of hosts the broker's host is cut off, its etcd member with it;
- disk: fill the disk of the broker whose data is on a tmpfs, empty it, restart it (as
  in Kafka, a replica taken offline by a failed disk comes back with its broker);
- elect: a preferred leader election of every partition (AsyncAdmin.elect_leaders);
- reassign: move a partition off one of its replicas and back (two reassignments through
  AsyncAdmin.alter_partition_reassignments, each waited for).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from partita.local.cluster import BrokerNode, EtcdProcess, LocalCluster
from partita.local.hosts import HostLab
from tests.chaos.history import Fault
from tests.chaos.workload import Recorder, announced
from tests.cluster.conftest import until
from tests.cluster.faults import fill

KINDS = ("kill", "pause", "term", "etcd", "partition", "disk", "elect", "reassign")
# On a cluster of hosts with etcd as a quorum only (RunConfig.hosts).
QUORUM_KINDS = ("etcd-member", "etcd-leader")
ADMIN_KINDS = ("elect", "reassign")


def admin_kinds_available() -> bool:
    """Whether this tree's admin client can elect leaders and reassign partitions."""
    from partita.client.admin import AsyncAdmin  # noqa: PLC0415

    return all(
        hasattr(AsyncAdmin, m)
        for m in ("elect_leaders", "alter_partition_reassignments", "list_partition_reassignments")
    )


class Nemesis:
    def __init__(
        self,
        cluster: LocalCluster,
        topic: str,
        partitions: int,
        recorder: Recorder,
        rng: random.Random,
        disk: tuple[int, Path] | None = None,
        lease_s: float = 3.0,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.rec = recorder
        self.rng = rng
        self.disk = disk  # (broker id, the tmpfs it keeps its data on)
        self.lease_s = lease_s
        self.paused: set[int] = set()
        self.filler: Path | None = None
        self._kills = 0

    # -- helpers -------------------------------------------------------------------------

    def _fault(self, fault: str, phase: str, target: str = "", detail: str = "") -> None:
        self.rec.add(Fault(self.rec.now(), fault, phase, target, detail))

    def _sleep(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high))

    def asker(self) -> BrokerNode:
        return next(
            b
            for b in self.cluster.brokers
            if b.alive
            and b.node_id not in self.paused
            and self.cluster.host(b.node_id).name not in self.lab.isolated
        )

    def layout(self) -> dict[int, tuple[int, int, tuple[int, ...]]]:
        return announced(self.asker(), self.topic, timeout=3)

    def leader(self, partition: int) -> BrokerNode:
        node = until(lambda: max(self.layout()[partition][0], 0), 30, "a leader")
        return self.cluster.broker(node)

    def settled(self) -> bool:
        """Every broker up and back in every ISR."""
        if not all(b.alive for b in self.cluster.brokers):
            return False
        try:
            view = self.layout()
        except Exception:  # a broker still starting: not yet
            return False
        wanted = len(self.cluster.brokers)
        return len(view) == self.partitions and all(
            leader >= 0 and len(isr) == min(3, wanted) for leader, _epoch, isr in view.values()
        )

    def settle(self, timeout: float = 60.0) -> bool:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.settled():
                self._fault("settle", "done", detail=f"{time.monotonic() - start:.1f}s")
                return True
            time.sleep(0.25)
        self._fault("settle", "timeout", detail=f"{timeout:.0f}s")
        return False

    # -- the faults ----------------------------------------------------------------------

    def kill(self) -> None:
        self._kills += 1
        if self._kills % 2:
            victim = self.rng.choice(self.cluster.brokers)
            how = "random broker"
        else:
            partition = self.rng.randrange(self.partitions)
            victim = self.leader(partition)
            how = f"leader of {self.topic}-{partition}"
        self._fault("kill", "start", f"broker {victim.node_id}", how)
        victim.kill()
        self._sleep(2, 6)
        victim.start()
        self._fault("kill", "heal", f"broker {victim.node_id}", "restarted")

    def pause(self) -> None:
        partition = self.rng.randrange(self.partitions)
        victim = self.leader(partition)
        self._fault("pause", "start", f"broker {victim.node_id}", f"leader of {partition}")
        victim.signal(signal.SIGSTOP)
        self.paused.add(victim.node_id)
        self._sleep(self.lease_s + 2, self.lease_s + 5)
        victim.signal(signal.SIGCONT)
        self.paused.discard(victim.node_id)
        self._fault("pause", "heal", f"broker {victim.node_id}", "SIGCONT")

    def term(self) -> None:
        victim = self.rng.choice(self.cluster.brokers)
        self._fault("term", "start", f"broker {victim.node_id}", "SIGTERM")
        code = victim.stop(30)
        self._sleep(1, 3)
        victim.start()
        self._fault("term", "heal", f"broker {victim.node_id}", f"had exited {code}; restarted")

    @property
    def lab(self) -> HostLab:
        assert self.cluster.lab is not None
        return self.cluster.lab

    def _etcd_members(self) -> list[EtcdProcess]:
        if self.cluster.etcd_cluster is not None:
            return self.cluster.etcd_cluster.members
        assert self.cluster.etcd is not None
        return [self.cluster.etcd]

    def etcd(self) -> None:
        members = self._etcd_members()
        self._fault("etcd", "start", "etcd", f"kill -9 of {len(members)} member(s)")
        for member in members:
            member.kill()
        self._sleep(2, 5)
        for member in members:
            member.start(wait=False)
        for member in members:
            member.wait_healthy(30)
        self._fault("etcd", "heal", "etcd", "restarted")

    def etcd_member(self) -> None:
        victim = self.rng.choice(self._etcd_members())
        self._member_down("etcd-member", victim, "kill -9", victim.kill, (2, 5))

    def etcd_leader(self) -> None:
        assert self.cluster.etcd_cluster is not None
        victim = until(self.cluster.etcd_cluster.leader, 15, "an etcd leader")
        self._member_down("etcd-leader", victim, "SIGTERM of the leader", victim.stop, (1, 3))

    def _member_down(
        self,
        kind: str,
        victim: EtcdProcess,
        how: str,
        take_down: Callable[[], None],
        down_for: tuple[float, float],
    ) -> None:
        """One etcd member down for a while, then back in the quorum."""
        self._fault(kind, "start", victim.name, how)
        take_down()
        self._sleep(*down_for)
        victim.start(wait=False)
        victim.wait_healthy(30)
        self._fault(kind, "heal", victim.name, "restarted")

    def partition(self) -> None:
        if self.rng.random() < 0.5:
            victim = self.rng.choice(self.cluster.brokers)
            how = "random broker"
        else:
            partition = self.rng.randrange(self.partitions)
            victim = self.leader(partition)
            how = f"leader of {self.topic}-{partition}"
        name = self.cluster.host(victim.node_id).name
        self._fault("partition", "start", f"broker {victim.node_id}", f"{how}; host {name}")
        self.lab.isolate(name)
        self._sleep(6, 10)
        self.lab.heal(name)
        self._fault("partition", "heal", f"broker {victim.node_id}", "routes removed")

    def disk_full(self) -> None:
        assert self.disk is not None
        node, mount = self.disk
        victim = self.cluster.broker(node)
        self._fault("disk", "start", f"broker {node}", "tmpfs filled")
        self.filler = fill(mount)
        self._sleep(10, 14)
        self.filler.unlink()
        self.filler = None
        code = victim.stop(30)
        victim.start()
        self._fault("disk", "heal", f"broker {node}", f"emptied; restarted (exit {code})")

    def elect(self) -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415

        async def go() -> dict[tuple[str, int], tuple[int, str | None]]:
            async with AsyncAdmin(self.cluster.bootstrap) as admin:
                return await admin.elect_leaders(
                    True, [(self.topic, p) for p in range(self.partitions)]
                )

        self._fault("elect", "start", self.topic, "preferred")
        results = asyncio.run(go())
        moved = sorted(p for (_t, p), (code, _m) in results.items() if code == 0)
        self._fault("elect", "heal", self.topic, f"moved {moved}")

    def reassign(self) -> None:
        from partita.client.admin import AsyncAdmin  # noqa: PLC0415

        partition = self.rng.randrange(self.partitions)

        async def move(replicas: list[int]) -> str:
            async with AsyncAdmin(self.cluster.bootstrap) as admin:
                result = await admin.alter_partition_reassignments(
                    {(self.topic, partition): replicas}
                )
                code, message = result[(self.topic, partition)]
                if code:
                    return f"refused {code} {message}"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if (self.topic, partition) not in await admin.list_partition_reassignments():
                        return "done"
                    await asyncio.sleep(0.25)
                return "not done in 60 s"

        replicas = list(
            next(
                p.replica_nodes
                for p in _metadata_partitions(self.asker(), self.topic)
                if p.partition_index == partition
            )
        )
        removed = self.rng.choice(replicas)
        fewer = [r for r in replicas if r != removed]
        self._fault("reassign", "start", f"{self.topic}-{partition}", f"{replicas} -> {fewer}")
        first = asyncio.run(move(fewer))
        back = list(fewer)
        back.insert(self.rng.randrange(len(back) + 1), removed)
        second = asyncio.run(move(back))
        self._fault(
            "reassign", "heal", f"{self.topic}-{partition}", f"{first}; -> {back}: {second}"
        )

    def action(self, kind: str) -> Callable[[], None]:
        return {
            "kill": self.kill,
            "pause": self.pause,
            "term": self.term,
            "etcd": self.etcd,
            "etcd-member": self.etcd_member,
            "etcd-leader": self.etcd_leader,
            "partition": self.partition,
            "disk": self.disk_full,
            "elect": self.elect,
            "reassign": self.reassign,
        }[kind]

    def run(self, kinds: list[str], until_t: float, quiet: tuple[float, float] = (3, 6)) -> None:
        """Faults of ``kinds`` in turn (shuffled each round) until ``until_t`` (recorder
        time); each is healed and the cluster settled before the next."""
        while self.rec.now() < until_t:
            order = list(kinds)
            self.rng.shuffle(order)
            for kind in order:
                if self.rec.now() >= until_t:
                    return
                self.action(kind)()
                self.settle()
                self._sleep(*quiet)

    def heal_all(self) -> None:
        """Undo whatever a fault left: paused brokers, cut links, a full disk, dead
        processes."""
        for broker in self.cluster.brokers:
            if broker.alive:
                broker.signal(signal.SIGCONT)
        self.paused.clear()
        self.lab.heal()
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None
        dead = [m for m in self._etcd_members() if not m.alive]
        for member in dead:
            member.start(wait=False)
        for member in dead:
            member.wait_healthy(30)
        for broker in self.cluster.brokers:
            if not broker.alive:
                broker.start()
        self._fault("heal-all", "heal")


def _metadata_partitions(broker: BrokerNode, topic: str) -> list[object]:
    from tests.cluster.conftest import layout  # noqa: PLC0415

    return list(layout(broker, topic).values())
