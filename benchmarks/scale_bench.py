"""How a cluster's cost grows with partitions (#30): partita (3 brokers on etcd) and Apache
Kafka (3 KRaft nodes, each broker and controller) side by side, on the same machine, in
the same run, for each partition count asked:

- create: CreateTopics of N partitions at RF 3 (over 5,000: 5,000, then CreatePartitions
  in steps of 5,000, Kafka's controller refusing more than 10,000 records at once),
  until every partition has a leader and a full ISR in the cluster's Metadata;
- RSS: each broker's resident memory once created (partita: the broker processes; Kafka:
  the JVMs, which hold the controllers too);
- metadata size: etcd's database (Maintenance.Status dbSize) against the KRaft metadata
  log on disk (each node's __cluster_metadata-0);
- restart to ISR: a broker that is not the controller stopped (SIGTERM) and started
  again, from the start until it is back in every ISR;
- failover: kill -9 of a broker that is not the controller, until none of its partitions
  is led by it (the failover gap of the partitions it led, a third of them);
- controller: kill -9 of the active controller, until the leaderships of its own
  partitions have moved: the next election it performs, by its successor.

    .venv/bin/python benchmarks/scale_bench.py --partitions 1000,10000 [--no-kafka]

Kafka needs its jars (scripts/kafka_jars.sh). Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from partita.local.cluster import LocalCluster

TOPIC = "scale"
CREATE_STEP = 5000


@dataclass
class Target:
    name: str
    bootstrap: str
    pids: Callable[[], dict[int, int]]  # node id -> pid
    controller: Callable[[], int]
    stop: Callable[[int], None]
    start: Callable[[int], None]
    kill: Callable[[int], None]
    metadata_bytes: Callable[[], int]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def partitions(admin: AdminClient) -> dict[int, Any]:
    return dict(admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions)


def wait_for(
    admin: AdminClient, condition: Callable[[dict[int, Any]], bool], timeout: float
) -> float:
    """Seconds until ``condition`` holds of the topic's partitions (inf if never)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            parts = partitions(admin)
            if parts and condition(parts):
                return time.monotonic() - started
        except Exception:  # a broker going away under the request: ask again
            pass
        time.sleep(0.1)
    return float("inf")


def full(count: int) -> Callable[[dict[int, Any]], bool]:
    return lambda parts: (
        len(parts) == count and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts.values())
    )


def leaders_moved_after_kill(target: Target, admin: AdminClient, node: int, count: int) -> float:
    """Seconds from kill -9 of ``node`` (once it leads something) until none of its
    partitions is led by it or leaderless; restarted after, back in every ISR."""
    wait_for(admin, lambda ps: any(p.leader == node for p in ps.values()), 120)
    started = time.monotonic()
    target.kill(node)
    wait_for(admin, lambda ps: all(p.leader not in (node, -1) for p in ps.values()), 300)
    moved = time.monotonic() - started
    target.start(node)
    wait_for(admin, full(count), 900)
    return moved


def measure(target: Target, count: int) -> dict[str, float]:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    out: dict[str, float] = {}
    started = time.monotonic()
    # Kafka's controller refuses an operation of more than 10,000 records (POLICY_
    # VIOLATION, "excessively large batch"): a topic of 10,000 partitions is 10,001. So
    # both create the topic with up to CREATE_STEP partitions and add the rest in steps
    # (CreatePartitions), as a Kafka user must.
    first = min(count, CREATE_STEP)
    admin.create_topics([NewTopic(TOPIC, first, 3)], request_timeout=600)[TOPIC].result(600)
    for total in range(first + CREATE_STEP, count + CREATE_STEP, CREATE_STEP):
        grow = NewPartitions(TOPIC, min(total, count))
        admin.create_partitions([grow], request_timeout=600)[TOPIC].result(600)
    wait_for(admin, full(count), 900)
    out["create_s"] = time.monotonic() - started
    time.sleep(5)
    out["rss_mb"] = max(rss_mb(pid) for pid in target.pids().values())
    out["metadata_mb"] = target.metadata_bytes() / 2**20
    controller = target.controller()
    others = [n for n in sorted(target.pids()) if n != controller]

    restarted = others[-1]
    target.stop(restarted)
    time.sleep(2)
    started = time.monotonic()
    target.start(restarted)
    wait_for(admin, lambda ps: all(restarted in p.isrs for p in ps.values()), 900)
    out["restart_to_isr_s"] = time.monotonic() - started

    out["failover_s"] = leaders_moved_after_kill(target, admin, others[0], count)
    out["controller_kill_s"] = leaders_moved_after_kill(target, admin, target.controller(), count)
    return out


@contextlib.contextmanager
def partita_target(workdir: Path) -> Iterator[Target]:
    cluster = LocalCluster(workdir, 3, settings={"max.broker.partitions": "100000"})
    cluster.start()

    def db_size() -> int:
        assert cluster.etcd is not None
        request = urllib.request.Request(
            f"http://{cluster.etcd.endpoint}/v3/maintenance/status", data=b"{}", method="POST"
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(json.loads(response.read()).get("dbSize", 0))

    def controller() -> int:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        return int(admin.list_topics(timeout=30).controller_id)

    def stop(node: int) -> None:
        cluster.broker(node).stop(300)

    try:
        yield Target(
            "partita",
            ",".join(b.bootstrap for b in cluster.brokers),
            lambda: {b.node_id: b.proc.pid for b in cluster.brokers if b.proc and b.alive},
            controller,
            stop,
            lambda node: cluster.broker(node).start(timeout=900),
            lambda node: cluster.broker(node).kill(),
            db_size,
        )
    finally:
        cluster.kill()


@contextlib.contextmanager
def kafka_target(workdir: Path) -> Iterator[Target]:
    from tests.kafka.real_kafka import KafkaCluster, run_tool  # noqa: PLC0415

    kafka = KafkaCluster(workdir, 3, heap="2g")
    kafka.start()

    def node(node_id: int) -> Any:
        return next(n for n in kafka.nodes if n.node_id == node_id)

    def controller() -> int:
        status = run_tool(
            "metadata-quorum", "--bootstrap-server", kafka.bootstrap, "describe", "--status"
        ).stdout
        line = next(line for line in status.splitlines() if line.startswith("LeaderId:"))
        return int(line.split(":")[1])

    def metadata_bytes() -> int:
        return max(
            # Blocks in use: the index files are preallocated sparse (10 MiB each).
            sum(f.stat().st_blocks * 512 for f in n.directory.rglob("__cluster_metadata-0/*"))
            for n in kafka.nodes
        )

    try:
        yield Target(
            "kafka",
            kafka.bootstrap,
            lambda: {n.node_id: n.proc.pid for n in kafka.nodes if n.running()},
            controller,
            lambda node_id: kafka.stop_node(node(node_id), timeout=300),
            lambda node_id: kafka.restart_node(node(node_id), timeout=900),
            lambda node_id: kafka.kill_node(node(node_id)),
            metadata_bytes,
        )
    finally:
        kafka.stop()


COLUMNS = [
    ("create_s", "create s"),
    ("rss_mb", "RSS MiB"),
    ("metadata_mb", "meta MiB"),
    ("restart_to_isr_s", "restart->ISR s"),
    ("failover_s", "failover s"),
    ("controller_kill_s", "ctrl kill s"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1000,10000", help="comma-separated counts")
    parser.add_argument("--no-kafka", action="store_true", help="partita only")
    args = parser.parse_args()
    counts = [int(c) for c in args.partitions.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows: list[tuple[str, int, dict[str, float]]] = []
    targets: list[Callable[[Path], Any]] = [partita_target]
    if not args.no_kafka:
        targets.append(kafka_target)
    for count in counts:
        for make in targets:
            with (
                tempfile.TemporaryDirectory(prefix="scale-", dir="/tmp") as tmp,
                make(Path(tmp)) as target,
            ):
                figures = measure(target, count)
                rows.append((target.name, count, figures))
                print(target.name, count, {k: round(v, 2) for k, v in figures.items()}, flush=True)
    print("\n3 brokers, RF 3, one topic of N partitions:")
    header = f"{'':8s} {'partitions':>10s} " + " ".join(f"{t:>14s}" for _k, t in COLUMNS)
    print(header)
    for name, count, figures in rows:
        print(f"{name:8s} {count:10,d} " + " ".join(f"{figures[k]:14.2f}" for k, _t in COLUMNS))
    for count in counts:
        by = {name: f for name, c, f in rows if c == count}
        if len(by) == 2:
            ratios = " ".join(
                f"{t} {by['partita'][k] / by['kafka'][k]:.2f}" for k, t in COLUMNS if by["kafka"][k]
            )
            print(f"partita/kafka at {count:,}: {ratios}")


if __name__ == "__main__":
    main()
