"""Reusable faults and checks for cluster tests: a producer that records what was
acknowledged while faults happen, leader lookups, pauses past a lease, and the checks
that every acknowledged record is read back exactly once and replicas agree on disk."""

from __future__ import annotations

import hashlib
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from partita.cli.local_cluster import BrokerNode, LocalCluster
from tests.cluster.conftest import layout, until


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> BrokerNode:
    asker = next(b for b in cluster.brokers if b.alive)
    return cluster.broker(until(lambda: _leader(asker, topic, partition), 20, "a leader"))


def _leader(asker: BrokerNode, topic: str, partition: int) -> int:
    leader = layout(asker, topic)[partition].leader_id
    return leader if leader >= 0 else 0


@dataclass
class Ledger:
    """What a producer was told: acknowledged values with their offsets, and failures."""

    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (p, offset)
    failed: dict[bytes, str] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: KafkaError | None, msg: object) -> None:
        value = msg.value()  # type: ignore[attr-defined]
        with self.lock:
            if err is None:
                self.acked[value] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
                self.ack_times.append(time.monotonic())
            else:
                self.failed[value] = err.name()


@contextmanager
def producing(
    bootstrap: str, topic: str, partitions: int, rate: float = 400.0, acks: str = "all"
) -> Iterator[Ledger]:
    """An idempotent producer writing unique values round-robin in a thread."""
    ledger = Ledger()
    stop = threading.Event()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 2,
            "message.timeout.ms": 60_000,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )

    def run() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(
                topic, value=b"v%08d" % i, partition=i % partitions, on_delivery=ledger.on_delivery
            )
            i += 1
            producer.poll(0)
            time.sleep(1 / rate)
        producer.flush(90)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield ledger
    finally:
        stop.set()
        thread.join(120)


Records = dict[int, list[tuple[int, bytes]]]


def read_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30) -> Records:
    """Every record of every partition, from offset 0 to the current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: Records = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(len(out[p]) < ends[p] for p in out) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out[msg.partition()].append((msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


def check_no_loss_no_duplicates(ledger: Ledger, records: Records) -> None:
    seen: dict[bytes, tuple[int, int]] = {}
    for partition, entries in records.items():
        offsets = [o for o, _ in entries]
        assert offsets == sorted(offsets), f"partition {partition}: offsets out of order"
        for offset, value in entries:
            assert value not in seen, f"{value!r} at {(partition, offset)} and {seen[value]}"
            seen[value] = (partition, offset)
    lost = [v for v in ledger.acked if v not in seen]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    moved = [v for v, where in ledger.acked.items() if seen[v] != where]
    assert not moved, f"acknowledged at one offset, found at another: {moved[:5]}"
    for partition, entries in records.items():
        numbers = [int(v[1:]) for _, v in entries]
        assert numbers == sorted(numbers), f"partition {partition}: a producer's order broke"


def segment_digests(cluster: LocalCluster, topic: str, partition: int) -> dict[int, str]:
    """Each replica's segment files of one partition, hashed in order."""
    out = {}
    for broker in cluster.brokers:
        directory = broker.data_dir / f"{topic}-{partition}"
        if not directory.exists():
            continue
        digest = hashlib.sha256()
        for path in sorted(directory.glob("*.log")):
            digest.update(path.read_bytes())
        out[broker.node_id] = digest.hexdigest()
    return out


@contextmanager
def paused(broker: BrokerNode) -> Iterator[None]:
    broker.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        broker.signal(signal.SIGCONT)


def log_dir(broker: BrokerNode, topic: str, partition: int) -> Path:
    return broker.data_dir / f"{topic}-{partition}"
