"""Cluster benchmark: what replication costs, and how long a leader's failure stops writes.

    .venv/bin/python benchmarks/cluster_bench.py [--records N] [--size BYTES]
        [--rate MSGS] [--seconds S] [--rounds R] [--dir DIR] [--hosts] [--kafka]

All in one run, on this machine (brokers, etcd and the client share its cores):

1. throughput: one confluent-kafka producer sends N records of SIZE bytes to a 6-partition
   topic as fast as it can, (a) to one partita broker alone, RF 1, acks=1, and (b) to a
   3-broker partita cluster on etcd, RF 3, min.insync.replicas 2, acks=all (idempotent).
   Reports msgs/s, the ratio b/a, and the brokers' CPU seconds per million records.
2. latency: acks=all to the 3-broker cluster at a paced RATE for S seconds; each record's
   time from produce() to its delivery report; p50 / p99 / max.
3. failover gap: a producer writes ~1000 msgs/s (acks=all) to partition 0 while its leader
   is killed with -9 (then restarted) or stopped with SIGTERM; the gap is the time from
   the signal to the first acknowledgement of a record produced after it. Kafka's KRaft
   defaults take ~9 s for kill -9 (broker.session.timeout.ms=9000); partita's default
   session is 3 s.
4. with --hosts, the same acks=all RF3 throughput, CPU, latency and failover gaps for the
   3-broker cluster on three hosts (network namespaces, each with a member of a 3-member
   etcd quorum: the production layout of docs/deployment.md), beside the loopback one;
5. with --kafka, the same acks=all RF3 throughput, broker CPU, latency and failover gaps
   for a 3-node Apache Kafka (KRaft, default settings but min.insync.replicas=2, jars from
   scripts/kafka_jars.sh) beside the partita cluster, in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from partita.local.cluster import LocalCluster, free_port

TICKS = os.sysconf("SC_CLK_TCK")


def scheduler_seconds(pids: list[int]) -> tuple[float, float]:
    """(running, runnable but waiting for a core) seconds of every thread of ``pids``,
    from /proc/PID/task/TID/schedstat: how much of a tail is the two cores' queue."""
    ran = waited = 0
    for pid in pids:
        tasks = Path(f"/proc/{pid}/task")
        for task in tasks.iterdir() if tasks.exists() else []:
            with contextlib.suppress(OSError, ValueError):
                run_ns, wait_ns, _ = (task / "schedstat").read_text().split()
                ran += int(run_ns)
                waited += int(wait_ns)
    return ran / 1e9, waited / 1e9


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def create(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf)])[topic].result(30)


def blast(bootstrap: str, topic: str, records: int, size: int, acks: str) -> tuple[float, int]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
            "batch.size": 131072,
            "partitioner": "murmur2_random",
        }
    )
    producer.list_topics(topic, timeout=10)
    errors = [0]

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    payload = b"x" * size
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, key=b"%d" % i, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1024 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - started, errors[0]


_TICK_SECONDS = 0.001


def paced_latencies(
    bootstrap: str, topic: str, rate: int, seconds: float, warmup: float = 1.0
) -> list[float]:
    """Produce-to-ack latencies at a paced rate; the first ``warmup`` seconds (connections,
    producer id, the followers' first fetches, a JVM's JIT) are sent but not counted."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 1}
    )  # fmt: skip
    producer.list_topics(topic, timeout=10)
    latencies: list[float] = []

    # As broker_bench does before each pass: no dirty pages left by the blast before it
    # (their writeback would land in this measurement).
    os.sync()
    time.sleep(1)
    counted_from = time.perf_counter() + warmup

    def report(err: Any, msg: Any) -> None:
        sent = float(msg.value())
        if err is None and sent >= counted_from:
            latencies.append(time.perf_counter() - sent)

    # Paced in 1 ms ticks (the records due, then a sleep to the next tick; Kafka's perf
    # tool sleeps only once 2 ms ahead), rather than a sleep before every record: at 10k msgs/s
    # that cost this client 0.55-0.6 of a core against 0.2 (measured), taken from the
    # two cores it shares with the brokers, whose tail it then lengthened.
    total = int(rate * (seconds + warmup))
    started = next_tick = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - started) * rate) + 1)
        while sent < due:
            producer.produce(topic, b"%.9f" % time.perf_counter(), on_delivery=report)
            sent += 1
        producer.poll(0)
        next_tick += _TICK_SECONDS
        pause = next_tick - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    producer.flush(60)
    return latencies


@dataclass
class Cluster3:
    """Three brokers of either kind, as the failover measurement needs them."""

    name: str
    bootstrap: str
    pids: Callable[[], list[int]]
    kill: Callable[[int], None]
    terminate: Callable[[int], None]  # SIGTERM and wait for the exit
    restart: Callable[[int], None]


def partita_cluster(cluster: LocalCluster, name: str = "partita") -> Cluster3:
    def terminate(node: int) -> None:
        broker = cluster.broker(node)
        broker.signal(signal.SIGTERM)
        if broker.proc is not None:
            broker.proc.wait(60)

    return Cluster3(
        name,
        cluster.bootstrap,
        lambda: [b.proc.pid for b in cluster.brokers if b.proc and b.alive],
        lambda node: cluster.broker(node).kill(),
        terminate,
        lambda node: cluster.broker(node).start(),
    )


def kafka_cluster(cluster: Any) -> Cluster3:
    def node(node_id: int) -> Any:
        return next(n for n in cluster.nodes if n.node_id == node_id)

    def restart(node_id: int) -> None:
        cluster.restart_node(node(node_id))

    return Cluster3(
        "kafka",
        cluster.bootstrap,
        lambda: [n.proc.pid for n in cluster.nodes if n.running()],
        lambda node_id: cluster.kill_node(node(node_id)),
        lambda node_id: cluster.stop_node(node(node_id)),
        restart,
    )


def failover_gap(target: Cluster3, topic: str, how: str) -> float:
    """Seconds from the signal to the first ack of a record sent after it."""
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    leader_id = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    producer = Producer(
        {"bootstrap.servers": target.bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 0, "topic.metadata.refresh.interval.ms": 500, "retry.backoff.ms": 20,
         "retry.backoff.max.ms": 100}
    )  # fmt: skip
    signalled = [0.0]
    first_after = [0.0]
    stop = threading.Event()

    def report(err: Any, msg: Any) -> None:
        sent = float(msg.value())
        if err is None and signalled[0] and sent > signalled[0] and not first_after[0]:
            first_after[0] = time.perf_counter()

    def run() -> None:
        while not stop.is_set():
            producer.produce(topic, b"%.9f" % time.perf_counter(), partition=0, on_delivery=report)
            producer.poll(0.001)
        producer.flush(60)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(2)
    signalled[0] = time.perf_counter()
    if how == "kill":
        target.kill(leader_id)
    else:
        threading.Thread(target=target.terminate, args=(leader_id,), daemon=True).start()
    deadline = time.perf_counter() + 60
    while not first_after[0] and time.perf_counter() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(90)
    time.sleep(1)
    target.restart(leader_id)
    return first_after[0] - signalled[0] if first_after[0] else float("inf")


def single_broker(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    ready = workdir / "single.ready"
    log = open(workdir / "single.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "partita.cli.main", "broker", "--data-dir",
         str(workdir / "single"), "--listen", f"127.0.0.1:{port}", "--ready-file", str(ready)],
        stdout=log, stderr=log,
    )  # fmt: skip
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None:
            raise SystemExit("the single broker did not start")
        time.sleep(0.05)
    return proc, f"127.0.0.1:{port}"


@contextlib.contextmanager
def start_kafka(workdir: Path) -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.kafka.real_kafka import real_kafka  # noqa: PLC0415

    with real_kafka(workdir / "kafka", nodes=3, settings={"min.insync.replicas": "2"}) as kafka:
        yield kafka


@contextlib.contextmanager
def on_hosts(workdir: Path) -> Iterator[LocalCluster]:
    """The same cluster with each broker on a host of its own (a network namespace with
    its own address on a private bridge) beside a member of a 3-member etcd quorum: the
    deployment docs/deployment.md describes. Replication and etcd traffic cross veth
    pairs and a bridge instead of loopback."""
    from partita.local.hosts import HostLab  # noqa: PLC0415

    lab = HostLab()
    cluster = LocalCluster(
        workdir / "hosts", 3, etcd_members=3, lab=lab, settings={"min.insync.replicas": "2"}
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        lab.close()


def compare_clusters(targets: list[Cluster3], args: argparse.Namespace) -> None:
    """acks=all RF3 throughput, CPU and latency, then failover gaps, per cluster."""
    rows = []
    for target in targets:
        create(target.bootstrap, "cmp", 6, 3)
        create(target.bootstrap, "gap", 1, 3)
        # Untimed first: Kafka's JIT compiles the produce path, partita's loads its modules.
        blast(target.bootstrap, "cmp", args.records // 2, args.size, "all")
        pids = target.pids()
        before = sum(cpu_seconds(p) for p in pids)
        seconds, errors = blast(target.bootstrap, "cmp", args.records, args.size, "all")
        cpu = (sum(cpu_seconds(p) for p in pids) - before) / args.records * 1e6
        latencies = paced_latencies(target.bootstrap, "cmp", args.rate, args.seconds)
        gaps: dict[str, list[float]] = {"kill": [], "term": []}
        for how, measured in gaps.items():
            for _ in range(args.rounds):
                measured.append(failover_gap(target, "gap", how))
                time.sleep(5)  # back in the ISR before the next round
        rows.append((target.name, args.records / seconds, cpu, latencies, gaps, errors))
    print(f"\n3 brokers, RF3, min ISR 2, acks=all, {args.size} B records:")
    print(f"{'':10s} {'msgs/s':>10s} {'CPU s/M':>8s} {'p50 ms':>7s} {'p99 ms':>7s} "
          f"{'kill -9 gap s':>14s} {'SIGTERM gap s':>14s}")  # fmt: skip
    for name, rate, cpu, lat, gaps, errors in rows:
        print(
            f"{name:10s} {rate:10,.0f} {cpu:8.2f} {pct(lat, 0.5) * 1000:7.1f} "
            f"{pct(lat, 0.99) * 1000:7.1f} {statistics.median(gaps['kill']):14.2f} "
            f"{statistics.median(gaps['term']):14.2f}" + (f"  errors {errors}" if errors else "")
        )
    for name, rate, _cpu, lat, _gaps, _errors in rows[1:]:
        print(
            f"{name} / {rows[0][0]}: throughput {rate / rows[0][1]:.2f}, "
            f"p99 {pct(lat, 0.99) / pct(rows[0][3], 0.99):.2f}"
        )
    print("targets: p99 <= 20 ms at the paced rate; kill -9 gap <= 5 s; SIGTERM gap <= 1 s")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="also run the 3 brokers on 3 hosts (network namespaces, root only), each "
        "beside a member of a 3-member etcd quorum, side by side with the loopback cluster",
    )
    parser.add_argument(
        "--kafka",
        action="store_true",
        help="also run a 3-node Apache Kafka (KRaft, scripts/kafka_jars.sh) side by side",
    )
    args = parser.parse_args()
    if args.dir is not None:
        Path(args.dir).mkdir(parents=True, exist_ok=True)  # --dir may name a new directory
    workdir = Path(tempfile.mkdtemp(prefix="cluster-bench-", dir=args.dir))
    print(f"work dir {workdir}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")

    single, single_bootstrap = single_broker(workdir)
    cluster = LocalCluster(workdir / "cluster", 3, settings={"min.insync.replicas": "2"})
    cluster.start()
    try:
        rows = []
        for r in range(args.rounds):
            topic = f"t{r}"
            create(single_bootstrap, topic, 6, 1)
            create(cluster.bootstrap, topic, 6, 3)
            for name, bootstrap, acks, pids in (
                ("1 broker, RF1, acks=1", single_bootstrap, "1", [single.pid]),
                ("3 brokers, RF3, acks=all", cluster.bootstrap, "all",
                 [b.proc.pid for b in cluster.brokers if b.proc]),
            ):  # fmt: skip
                before = sum(cpu_seconds(p) for p in pids)
                seconds, errors = blast(bootstrap, topic, args.records, args.size, acks)
                cpu = sum(cpu_seconds(p) for p in pids) - before
                rows.append((r, name, args.records / seconds, cpu / args.records * 1e6, errors))
                per_m = cpu / args.records * 1e6
                print(
                    f"round {r} {name:26s} {args.records / seconds:10,.0f} msgs/s  "
                    f"broker CPU {per_m:6.2f} s per M records  errors {errors}"
                )
        one = statistics.median(x[2] for x in rows if x[1].startswith("1"))
        three = statistics.median(x[2] for x in rows if x[1].startswith("3"))
        cpu1 = statistics.median(x[3] for x in rows if x[1].startswith("1"))
        cpu3 = statistics.median(x[3] for x in rows if x[1].startswith("3"))
        print(f"\nthroughput ({args.size} B records, medians of {args.rounds}):")
        print(f"  1 broker RF1 acks=1      {one:10,.0f} msgs/s   broker CPU {cpu1:.2f} s/M")
        print(f"  3 brokers RF3 acks=all   {three:10,.0f} msgs/s   broker CPU {cpu3:.2f} s/M "
              f"(all three)")  # fmt: skip
        print(f"  ratio RF3/RF1            {three / one:10.2f}")

        create(cluster.bootstrap, "lat", 6, 3)
        pids = [b.proc.pid for b in cluster.brokers if b.proc]
        ran, waited = scheduler_seconds(pids)
        latencies = paced_latencies(cluster.bootstrap, "lat", args.rate, args.seconds)
        ran_after, waited_after = scheduler_seconds(pids)
        print(f"\nacks=all RF3 at {args.rate:,} msgs/s for {args.seconds:.0f} s: "
              f"{len(latencies):,} acked, p50 {pct(latencies, 0.5) * 1000:.1f} ms, "
              f"p99 {pct(latencies, 0.99) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms "
              f"(target p99 <= 20 ms)")  # fmt: skip
        print(f"  the brokers' threads ran {ran_after - ran:.1f} s and waited "
              f"{waited_after - waited:.1f} s for a free core meanwhile")  # fmt: skip

        targets = [partita_cluster(cluster)]
        with contextlib.ExitStack() as stack:
            if args.hosts:
                targets.append(partita_cluster(stack.enter_context(on_hosts(workdir)), "3 hosts"))
            if args.kafka:
                targets.append(kafka_cluster(stack.enter_context(start_kafka(workdir))))
            compare_clusters(targets, args)
    finally:
        cluster.stop()
        single.send_signal(signal.SIGTERM)
        single.wait(30)


if __name__ == "__main__":
    main()
