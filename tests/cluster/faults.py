"""Reusable faults and checks for cluster tests: a producer that records what was
acknowledged while faults happen, leader lookups, pauses past a lease, and the checks
that every acknowledged record is read back exactly once and replicas agree on disk."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from partita.local.cluster import BROKER_PORT, BrokerNode, EtcdProcess, LocalCluster
from partita.local.hosts import Host, HostLab
from partita.protocol.record_batch import HEADER_SIZE, read_header
from partita.protocol.records import decode_records
from partita.storage.inspection import summarize
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


# ListOffsets errors Kafka's protocol marks retriable, which librdkafka hands to the
# caller of get_watermark_offsets unmarked: a leader just elected (OFFSET_NOT_AVAILABLE
# until its high watermark caught up), leadership moving, or a broker come back with an
# old view of who leads (NOT_LEADER until its image catches up).
RETRIABLE_LIST_OFFSETS = frozenset(
    {
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
    }
)


def watermarks(consumer: Consumer, tp: TopicPartition, timeout: float = 20) -> tuple[int, int]:
    """(log start, high watermark) of ``tp``, asked again while the answer is a retriable
    error: a leader just elected answers OFFSET_NOT_AVAILABLE until its high watermark has
    caught up (Kafka's rule), and librdkafka hands that straight to the caller -- without
    marking it retriable, although Kafka's own clients retry it (RetriableException), as
    the others of ``RETRIABLE_LIST_OFFSETS``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                tp, timeout=max(deadline - time.monotonic(), 1)
            )
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            again = error.retriable() or error.code() in RETRIABLE_LIST_OFFSETS
            if not again or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


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
        ends = {p: watermarks(consumer, TopicPartition(topic, p))[1] for p in range(partitions)}
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


# -- network partitions: etcd and each broker in a network namespace of its own -----------
#
# A bridge in the caller's namespace joins one veth pair per member; the caller (the
# clients) reaches every member over the bridge. Isolating a member adds, in every other
# member's namespace, a blackhole route to it: its packets still arrive but nothing
# answers (its connections time out silently, as across a dead switch), and the others'
# connections to it fail at once. The clients' namespace has no such route, so clients
# still reach it. tc and iptables do not exist on these machines; routes need only `ip`.

ETCD_HOST_INDEX = 100


class NamespacedBroker(BrokerNode):
    """A broker on a lab's host, listening on its address (port 9092)."""

    def __init__(self, member: Host, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.member = member
        self.host = member.address
        self.port = BROKER_PORT
        self.launcher = member.launcher


class NetnsCluster(LocalCluster):
    """LocalCluster with etcd and every broker in namespaces of a NetworkLab."""

    def __init__(
        self,
        base: Path,
        lab: HostLab,
        brokers: int = 3,
        settings: dict[str, str] | None = None,
        data_dirs: dict[int, Path] | None = None,
    ) -> None:
        super().__init__(base, brokers, settings=settings, etcd_endpoints="-")
        self.lab = lab
        self.etcd = EtcdProcess(base / "etcd", host=lab.add("etcd", ETCD_HOST_INDEX))
        self.metadata = f"etcd://{self.etcd.endpoint}/partita"
        self.brokers = [
            NamespacedBroker(
                lab.add(f"b{n}", n),
                n,
                (data_dirs or {}).get(n, base / f"broker-{n}"),
                self.metadata,
                None,
                settings,
            )
            for n in range(1, brokers + 1)
        ]
        self.hosts = [broker.member for broker in self.brokers]
        for broker in self.brokers:  # beside the others, even for a data dir on a tmpfs
            broker.log_path = base / f"broker-{broker.node_id}.log"


# -- a full disk ---------------------------------------------------------------------------


@contextmanager
def tmpfs(mount_point: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MiB mounted at ``mount_point`` (needs root)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point)],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=20)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write zeros into ``directory`` until its file system is full."""
    path = directory / name
    chunk = bytes(1 << 20)
    with open(path, "wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass
        try:
            while True:
                out.write(chunk[:4096])
        except OSError:
            pass
    return path


# -- what each replica holds on disk, read after a clean stop -----------------------------


@dataclass(frozen=True)
class StoredRecord:
    offset: int
    value: bytes
    leader_epoch: int
    producer_id: int
    sequence: int


def stored_records(data_dir: Path, topic: str, partition: int) -> list[StoredRecord]:
    """Every complete record batch's records in one replica's segment files, in order."""
    out = []
    for path in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            header = read_header(data, pos)
            if pos + header.size > len(data):
                break
            batch_header, records = decode_records(data[pos : pos + header.size])
            for i, record in enumerate(records):
                sequence = batch_header.base_sequence + i if batch_header.base_sequence >= 0 else -1
                out.append(
                    StoredRecord(
                        record.offset, record.value or b"", batch_header.partition_leader_epoch,
                        batch_header.producer_id, sequence,
                    )
                )  # fmt: skip
            pos += header.size
    return out


def checkpointed_high_watermarks(data_dir: Path) -> dict[tuple[str, int], int]:
    return {(s.topic, s.partition): s.high_watermark for s in summarize(data_dir)}
