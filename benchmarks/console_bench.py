"""The console at 100, 1,000 and 10,000 partitions (#32), against partita (3 brokers on
etcd) and Apache Kafka (3 KRaft nodes) in the same run, on the same machine:

- page load: server time to answer /cluster, /topics, /topic (the big topic's first
  page) and /groups, median of 5, and the page's size;
- poll: how long one poll of the cluster takes (every page shares it);
- update latency: from a CreateTopics acknowledged to the open /topics stream sending a
  page that lists the new topic (waiting for the next poll included: the interval is
  2 s), median of 3;
- load on the cluster: requests per second the console sends while a page is open (its
  client's count of requests, over 30 s), and the console's CPU per second.

    .venv/bin/python benchmarks/console_bench.py [--partitions 100,1000,10000] [--no-kafka]

Figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from partita.local.cluster import LocalCluster

TOPIC = "scale"
CREATE_STEP = 5000
INTERVAL_S = 2.0
LOAD_WINDOW_S = 30.0
PAGES = ("/cluster", f"/topic?name={TOPIC}", "/topics", "/groups")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def quiet(bootstrap: str) -> dict[str, str | int]:
    """librdkafka's settings for the bench's clients, without its connection chatter (the
    clusters are stopped under clients that are still being collected)."""
    return {"bootstrap.servers": bootstrap, "log_level": 0}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create(bootstrap: str, count: int) -> None:
    admin = AdminClient(quiet(bootstrap))
    first = min(count, CREATE_STEP)
    admin.create_topics([NewTopic(TOPIC, first, 3)], request_timeout=600)[TOPIC].result(600)
    for total in range(first + CREATE_STEP, count + CREATE_STEP, CREATE_STEP):
        grow = NewPartitions(TOPIC, min(total, count))
        admin.create_partitions([grow], request_timeout=600)[TOPIC].result(600)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        topic = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
        if len(topic.partitions) == count and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in topic.partitions.values()
        ):
            return
        time.sleep(1)
    raise SystemExit(f"{count} partitions not ready in 900 s")


def with_a_group(bootstrap: str) -> None:
    """A small consumer group with committed offsets, for the groups page."""
    from confluent_kafka import (  # noqa: PLC0415
        Consumer,
        KafkaException,
        Producer,
        TopicPartition,
    )

    admin = AdminClient(quiet(bootstrap))
    admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(60)
    producer = Producer(quiet(bootstrap))
    for i in range(3000):
        producer.produce("orders", b"x" * 100, str(i).encode())
    producer.flush(60)
    consumer = Consumer({**quiet(bootstrap), "group.id": "readers"})
    deadline = time.monotonic() + 120
    while True:  # Kafka's group coordinator needs a moment after its cluster starts
        try:
            consumer.commit(
                offsets=[TopicPartition("orders", p, 500) for p in range(3)], asynchronous=False
            )
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    consumer.close()


class ConsoleProcess:
    def __init__(self, bootstrap: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "partita.cli.main", "-b", bootstrap, "console",
             "--listen", self.url.removeprefix("http://"), "--interval", str(INTERVAL_S)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 300
        while self.health().get("polls", 0) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("the console never polled")
            time.sleep(0.5)

    def health(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=30) as answer:
                words = answer.read().decode().split()
        except OSError:
            return {}
        numbers = words[: words.index("error")] if "error" in words else words
        return {k: float(v) for k, v in zip(numbers[::2], numbers[1::2], strict=False)}

    def load(self, path: str) -> tuple[float, int]:
        started = time.monotonic()
        with urllib.request.urlopen(self.url + path, timeout=120) as answer:
            body = answer.read()
        return time.monotonic() - started, len(body)

    def update_latency(self, bootstrap: str, name: str) -> float:
        """From the topic created to the /topics stream naming it."""
        stream = urllib.request.urlopen(self.url + "/stream?view=topics", timeout=120)
        try:
            admin = AdminClient(quiet(bootstrap))
            admin.create_topics([NewTopic(name, 1, 3)])[name].result(60)
            created = time.monotonic()
            while True:
                line = stream.readline()
                if not line:
                    raise SystemExit("the stream ended")
                if f'data-topic="{name}"'.encode() in line:
                    return time.monotonic() - created
        finally:
            stream.close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def measure(bootstrap: str, count: int) -> dict[str, float]:
    create(bootstrap, count)
    with_a_group(bootstrap)
    console = ConsoleProcess(bootstrap)
    out: dict[str, float] = {}
    try:
        for path in PAGES:
            for _warm in range(2):
                console.load(path)
            loads = [console.load(path) for _ in range(5)]
            out[f"load {path.split('?')[0]} ms"] = 1000 * statistics.median(t for t, _ in loads)
            out[f"size {path.split('?')[0]} KiB"] = loads[0][1] / 1024
        out["poll s"] = console.health()["last_poll_s"]
        out["update s"] = statistics.median(
            console.update_latency(bootstrap, f"a-marker-{i}") for i in range(3)
        )
        before, cpu_before = console.health()["requests"], cpu_seconds(console.proc.pid)
        time.sleep(LOAD_WINDOW_S)
        after, cpu_after = console.health()["requests"], cpu_seconds(console.proc.pid)
        out["requests/s"] = (after - before) / LOAD_WINDOW_S
        out["console CPU s/s"] = (cpu_after - cpu_before) / LOAD_WINDOW_S
    finally:
        console.stop()
    return out


@contextlib.contextmanager
def partita_cluster(workdir: Path) -> Iterator[str]:
    cluster = LocalCluster(workdir, 3, settings={"max.broker.partitions": "100000"})
    cluster.start()
    try:
        yield cluster.bootstrap
    finally:
        cluster.kill()


@contextlib.contextmanager
def kafka_cluster(workdir: Path) -> Iterator[str]:
    from tests.kafka.real_kafka import KafkaCluster  # noqa: PLC0415

    kafka = KafkaCluster(workdir, 3, heap="2g")
    kafka.start()
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="100,1000,10000")
    parser.add_argument("--no-kafka", action="store_true", help="partita only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    targets: list[tuple[str, Callable[[Path], contextlib.AbstractContextManager[str]]]] = [
        ("partita", partita_cluster)
    ]
    if not args.no_kafka:
        targets.append(("kafka", kafka_cluster))
    rows: list[tuple[int, str, dict[str, float]]] = []
    for count in (int(c) for c in args.partitions.split(",")):
        for name, make in targets:
            with (
                tempfile.TemporaryDirectory(prefix="console-", dir="/tmp") as tmp,
                make(Path(tmp)) as bootstrap,
            ):
                figures = measure(bootstrap, count)
            rows.append((count, name, figures))
            print(f"{count:>6} {name:8} " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                  flush=True)  # fmt: skip
    print("\n| partitions | cluster | " + " | ".join(rows[0][2]) + " |")
    print("| ---: | --- | " + " | ".join("---:" for _ in rows[0][2]) + " |")
    for count, name, figures in rows:
        cells = " | ".join(f"{v:.2f}" if v < 100 else f"{v:.0f}" for v in figures.values())
        print(f"| {count:,} | {name} | {cells} |")


if __name__ == "__main__":
    main()
