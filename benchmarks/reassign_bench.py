"""Reassignment benchmark: how long moving a partition to a new broker takes, with and
without a replication throttle, and what it does to a concurrent acks=all producer.

    .venv/bin/python benchmarks/reassign_bench.py [--mib 1024] [--throttle-mib 50]
        [--rate MSGS] [--dir DIR]

A 4-broker partita cluster on etcd (min ISR 2). A topic of one partition on brokers
[1, 2, 3] is filled with MIB MiB (1 MB records, acks=all), then moved to [4, 2, 3]
(broker 4 copies everything) while another topic's producer writes at RATE msgs/s with
acks=all; the move runs twice, unthrottled and at THROTTLE MiB/s (moving back in
between). For each: seconds from the request to the completed move, MiB/s copied, and
the producer's p50 / p99 during the move against its p99 before it.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from partita.client.admin import AsyncAdmin
from partita.local.cluster import LocalCluster


def fill(bootstrap: str, topic: str, mib: int) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
         "batch.size": 1_048_576, "message.max.bytes": 2_000_000}
    )  # fmt: skip
    record = b"x" * (1 << 20)
    for _ in range(mib):
        while True:
            try:
                producer.produce(topic, record)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(600)


class Background(threading.Thread):
    """An acks=all producer at a paced rate, recording (send time, latency)."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.rate = rate
        self.stop = threading.Event()
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
             "linger.ms": 1}
        )  # fmt: skip
        self.topic = topic

    def run(self) -> None:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                sent = float(msg.value())
                self.samples.append((sent, time.perf_counter() - sent))

        started = time.perf_counter()
        i = 0
        while not self.stop.is_set():
            due = started + i / self.rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            self.producer.produce(self.topic, b"%.9f" % time.perf_counter(), on_delivery=report)
            self.producer.poll(0)
            i += 1
        self.producer.flush(60)

    def p(self, q: float, start: float, end: float) -> float:
        window = sorted(lat for sent, lat in self.samples if start <= sent < end)
        return window[min(len(window) - 1, int(q * len(window)))] * 1000 if window else float("nan")


async def move(bootstrap: str, topic: str, target: list[int], throttle: int) -> float:
    async with AsyncAdmin(bootstrap) as admin:
        await admin.set_replication_throttle(throttle)
        started = time.perf_counter()
        await admin.alter_partition_reassignments({(topic, 0): target})
        while (await admin.list_partition_reassignments()).get((topic, 0)):
            await asyncio.sleep(0.2)
        elapsed = time.perf_counter() - started
        await admin.set_replication_throttle(0)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--throttle-mib", type=int, default=50)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="reassign-bench-", dir=args.dir))
    cluster = LocalCluster(
        workdir, 4, settings={"min.insync.replicas": "2", "message.max.bytes": "2000000"}
    )
    cluster.start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics(
            [NewTopic("big", 1, replica_assignment=[[1, 2, 3]]), NewTopic("live", 3, 3)]
        )["big"].result(30)
        started = time.perf_counter()
        fill(cluster.bootstrap, "big", args.mib)
        print(f"filled {args.mib} MiB in {time.perf_counter() - started:.1f} s")
        background = Background(cluster.bootstrap, "live", args.rate)
        background.start()
        time.sleep(5)
        rows = []
        for label, throttle, target in (
            ("unthrottled", 0, [4, 2, 3]),
            (f"throttled {args.throttle_mib} MiB/s", args.throttle_mib << 20, [1, 2, 3]),
        ):
            before = time.perf_counter()
            elapsed = asyncio.run(move(cluster.bootstrap, "big", target, throttle))
            after = before + elapsed
            rows.append(
                (
                    label,
                    elapsed,
                    args.mib / elapsed,
                    background.p(0.99, before - 5, before),
                    background.p(0.5, before, after),
                    background.p(0.99, before, after),
                )
            )
            time.sleep(3)
        background.stop.set()
        background.join(60)
        print(f"\nmoving a {args.mib} MiB partition to a new broker (4 brokers, acks=all "
              f"producer at {args.rate} msgs/s meanwhile):")  # fmt: skip
        print(f"{'':24s} {'seconds':>8s} {'MiB/s':>7s} {'p99 before':>11s} "
              f"{'p50 during':>11s} {'p99 during':>11s}")  # fmt: skip
        for label, seconds, speed, p99_before, p50, p99 in rows:
            print(f"{label:24s} {seconds:8.1f} {speed:7.1f} {p99_before:11.1f} {p50:11.1f} "
                  f"{p99:11.1f}")  # fmt: skip
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
