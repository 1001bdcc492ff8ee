"""Client benchmark: partita's asyncio producer and consumer beside kafka-python, aiokafka
and confluent-kafka, in the same run, against the same partita broker.

    .venv/bin/python benchmarks/client_bench.py [--records N] [--quick] [--rounds R]
        [--partitions 1 [6]] [--sizes 100 1000] [--clients partita kafka-python ...]
        [--profile [P:SIZE]] [--profile-top N] [--dir DIR] [--keep]

One partita broker (``partita broker``, default settings, data on disk in a fresh work dir
under var/bench) serves every pass. For each scenario (partitions x record size) and each
client, a fresh topic is created (CreateTopics, then waiting for leaders), and two passes
run, each in a fresh Python subprocess (``client_bench.py --worker``) that prints its
figures as JSON, so that process CPU time belongs to that one client alone:

1. produce: the client is created, connected and has the topic's metadata (not timed);
   then N keyless records whose values are exactly SIZE bytes are sent as fast as the
   client allows, and the clock stops when every record is acknowledged (flush).
   Settings, the same for all: acks=1, linger 5 ms, batch size 64 KiB, no compression,
   idempotence off (partita turns it on only with acks=all; kafka-python's default, on,
   is switched off explicitly: it would force acks=all). partita and aiokafka await
   send() per record and keep the futures; kafka-python keeps send()'s futures;
   confluent-kafka produce()s with a delivery callback and poll(0) every 1024 records.
   Afterwards (not timed) every future is checked: no errors, offsets contiguous from 0
   in every partition. The topic's segment files then give the records per batch each
   producer actually built.
2. consume: assign() every partition, seek to offset 0 (no group, no commits), read the
   records the produce pass acknowledged, asking for 10,000 per call (fewer when fewer are
   left: confluent's consume() would otherwise wait out its timeout at the end): partita
   AsyncConsumer.getmany, aiokafka getmany, kafka-python poll(max_records=...),
   confluent-kafka consume(num_messages=...) with fetch.queue.backoff.ms=1. Every record
   is counted and its offset checked in the loop (contiguous from 0 per partition); the
   clock runs from assign() to the arrival of the last record. Fetch sizes are every
   client's default (1 MiB per partition, 50 MiB per fetch, max wait 500 ms); CRC checks
   are off for all (check_crcs=False for partita, aiokafka and kafka-python; librdkafka
   does not check by default).

Client CPU is the worker process's user + system time (all its threads: kafka-python's
sender thread, librdkafka's threads) over the phase's wall time; broker CPU is read from
/proc for the same interval. Rounds interleave the clients (the order rotates for every
scenario and round); figures are medians over the rounds. An unscored warm-up pass per
client runs first, and every pass starts after os.sync().

Targets (from the issue): partita >= 2x kafka-python and >= 1x aiokafka, produce and
consume, every scenario; the ratio to confluent-kafka is printed for information.
--profile runs one more, unscored, partita pass under cProfile inside the worker
(the timed region only) and prints where the time goes. The exit status is 0 whatever
the verdicts; broken invariants are printed as problems.

The broker and the workers import partita the way this process does, so PYTHONPATH can
point them at another copy (e.g. a `git archive HEAD src` snapshot, to measure committed
code while the working tree is being edited); the header prints which copy ran and its
git state.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import math
import mmap
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import partita
from broker_bench import (
    BrokerProcess,
    create_topic,
    delete_topic,
    load_average,
    log_clients_to,
    median,
    start_partita,
    verdict,
)
from broker_bench import Rate as BrokerRate
from partita.protocol.record_batch import iter_headers
from startup_bench import measure, prepare_topic, startup_tables

MB = 1_000_000  # MB/s are of record values, in decimal megabytes
DEFAULT_RECORDS = 200_000
QUICK_RECORDS = 30_000
WARM_UP_RECORDS = 20_000
DEFAULT_PARENT = Path(__file__).resolve().parent.parent / "var" / "bench"

PARTITA = "partita"
KAFKA_PYTHON = "kafka-python"
AIOKAFKA = "aiokafka"
CONFLUENT = "confluent"
CLIENTS = (PARTITA, KAFKA_PYTHON, AIOKAFKA, CONFLUENT)
PHASES = ("produce", "consume")
# partita / other client, for both phases; None: printed, not a target
TARGETS: dict[str, float | None] = {KAFKA_PYTHON: 2.0, AIOKAFKA: 1.0, CONFLUENT: None}

ACKS = 1
LINGER_MS = 5
BATCH_SIZE = 64 * 1024
CONSUME_BATCH = 10_000  # max records per getmany/poll/consume call
POLL_EVERY = 1024  # confluent: produce() calls between poll(0) calls
STALL_SECONDS = 30.0  # a consumer that sees nothing new for this long gives up
RESULT_PREFIX = "CLIENT_BENCH_RESULT "
STARTUP_ROUNDS = 3  # start-up measurements per client, after the throughput rounds


# -- the worker: one client, one phase, in its own process ---------------------------


def broker_cpu(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return float("nan")
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Meter:
    """Wall time, this process's CPU time and the broker's CPU time over the timed region;
    optionally a cProfile of that region."""

    def __init__(self, broker_pid: int, profile_path: str | None) -> None:
        self.broker_pid = broker_pid
        self.profile_path = profile_path
        self.profiler = cProfile.Profile() if profile_path else None
        self.seconds = self.client_cpu = self.broker_cpu = 0.0
        self._t0 = self._c0 = self._b0 = 0.0

    @staticmethod
    def _cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    def start(self) -> None:
        self._b0 = broker_cpu(self.broker_pid)
        self._c0 = self._cpu()
        if self.profiler is not None:
            self.profiler.enable()
        self._t0 = time.perf_counter()

    def stop(self, end: float | None = None) -> None:
        """Stop the clock (at ``end``, a perf_counter() reading, if given)."""
        now = time.perf_counter()
        if self.profiler is not None:
            self.profiler.disable()
        self.seconds = (end if end is not None else now) - self._t0
        self.client_cpu = self._cpu() - self._c0
        self.broker_cpu = broker_cpu(self.broker_pid) - self._b0
        if self.profiler is not None and self.profile_path:
            self.profiler.dump_stats(self.profile_path)

    def result(self, **extra: Any) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "client_cpu": self.client_cpu,
            "broker_cpu": self.broker_cpu,
            **extra,
        }


def _check_offsets(
    per_partition: dict[int, list[int]], partitions: int
) -> tuple[dict[str, int], list[str]]:
    """Acked counts per partition; problems unless offsets are 0, 1, 2, ... in each."""
    problems = []
    acked = {}
    for p in range(partitions):
        offsets = sorted(per_partition.get(p, []))
        acked[str(p)] = len(offsets)
        if offsets != list(range(len(offsets))):
            problems.append(f"produce: partition {p} acked offsets are not 0..{len(offsets) - 1}")
    return acked, problems


class _ConsumeCheck:
    """Counts records and checks that offsets are contiguous from 0 per partition."""

    __slots__ = ("expected", "gaps", "last_progress", "nbytes", "next_offset", "received")

    def __init__(self, partitions: int) -> None:
        self.next_offset = [0] * partitions
        self.gaps = self.received = self.nbytes = 0
        self.last_progress = time.perf_counter()

    def wanted(self, expected: int) -> int:
        """Records to ask for: never more than are left (confluent's consume() would wait
        for its timeout to fill a call the topic cannot fill)."""
        return max(1, min(CONSUME_BATCH, expected - self.received))

    def result(self, meter: Meter, size: int, acked: dict[str, int]) -> dict[str, Any]:
        expected = sum(acked.values())
        problems = []
        if self.gaps:
            problems.append(f"consume: {self.gaps} offset gaps or repeats")
        if self.received < expected:
            problems.append(
                f"consume: stalled at {self.received} of {expected} records "
                f"(nothing for {STALL_SECONDS:.0f} s)"
            )
        if self.received > expected:
            problems.append(f"consume: {self.received} records read, {expected} acked")
        for p, count in acked.items():
            if self.received >= expected and self.next_offset[int(p)] != count:
                problems.append(
                    f"consume: partition {p} ends at offset {self.next_offset[int(p)]}, "
                    f"{count} records were acked"
                )
        if self.nbytes != self.received * size:
            problems.append(f"consume: {self.nbytes} value bytes for {self.received} records")
        return meter.result(records=self.received, nbytes=self.nbytes, problems=problems)


def _stalled(check: _ConsumeCheck) -> bool:
    return time.perf_counter() - check.last_progress > STALL_SECONDS


async def _partita_produce(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from partita.client.producer import AsyncProducer  # noqa: PLC0415 (worker-only)

    topic, records = spec["topic"], spec["records"]
    value = os.urandom(spec["size"])
    futures: list[asyncio.Future[Any]] = []
    async with AsyncProducer(
        spec["bootstrap"],
        acks=ACKS,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
        compression_type="none",
    ) as producer:
        await producer.cluster.topic(topic)  # metadata: not timed
        send, append = producer.send, futures.append
        meter.start()
        for _ in range(records):
            append(await send(topic, value))
        await producer.flush()
        meter.stop()
    offsets: dict[int, list[int]] = {}
    errors: dict[str, int] = {}
    for future in futures:
        if not future.done():
            errors["not done after flush()"] = errors.get("not done after flush()", 0) + 1
        elif future.exception() is not None:
            key = repr(future.exception())
            errors[key] = errors.get(key, 0) + 1
        else:
            md = future.result()
            offsets.setdefault(md.partition, []).append(md.offset)
    return _produce_result(meter, spec, offsets, errors)


async def _aiokafka_produce(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    topic, records = spec["topic"], spec["records"]
    value = os.urandom(spec["size"])
    futures: list[asyncio.Future[Any]] = []
    producer = AIOKafkaProducer(
        bootstrap_servers=spec["bootstrap"],
        acks=ACKS,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
        compression_type=None,
        enable_idempotence=False,
    )
    await producer.start()
    try:
        await producer.partitions_for(topic)  # metadata: not timed
        send, append = producer.send, futures.append
        meter.start()
        for _ in range(records):
            append(await send(topic, value))
        await producer.flush()
        meter.stop()
    finally:
        await producer.stop()
    offsets: dict[int, list[int]] = {}
    errors: dict[str, int] = {}
    for future in futures:
        if not future.done() or future.exception() is not None:
            key = repr(future.exception()) if future.done() else "not done after flush()"
            errors[key] = errors.get(key, 0) + 1
        else:
            md = future.result()
            offsets.setdefault(md.partition, []).append(md.offset)
    return _produce_result(meter, spec, offsets, errors)


def _kafka_python_produce(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from kafka import KafkaProducer  # noqa: PLC0415

    topic, records = spec["topic"], spec["records"]
    value = os.urandom(spec["size"])
    producer = KafkaProducer(
        bootstrap_servers=spec["bootstrap"],
        acks=ACKS,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
        compression_type=None,
        enable_idempotence=False,
    )
    futures: list[Any] = []
    try:
        producer.partitions_for(topic)  # metadata: not timed
        send, append = producer.send, futures.append
        meter.start()
        for _ in range(records):
            append(send(topic, value))
        producer.flush()
        meter.stop()
    finally:
        producer.close()
    offsets: dict[int, list[int]] = {}
    errors: dict[str, int] = {}
    for future in futures:
        if not future.is_done or future.failed():
            key = repr(future.exception) if future.is_done else "not done after flush()"
            errors[key] = errors.get(key, 0) + 1
        else:
            md = future.value
            offsets.setdefault(md.partition, []).append(md.offset)
    return _produce_result(meter, spec, offsets, errors)


def _confluent_produce(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from confluent_kafka import Producer  # noqa: PLC0415

    topic, records = spec["topic"], spec["records"]
    value = os.urandom(spec["size"])
    offsets: dict[int, list[int]] = {}
    errors: dict[str, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            offsets.setdefault(msg.partition(), []).append(msg.offset())
        else:
            errors[str(err)] = errors.get(str(err), 0) + 1

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "acks": str(ACKS),
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "message.timeout.ms": 120_000,
            "on_delivery": on_delivery,
        }
    )
    producer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
    produce, poll = producer.produce, producer.poll
    meter.start()
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
    meter.stop()
    if left:
        errors["undelivered after flush()"] = left
    return _produce_result(meter, spec, offsets, errors)


def _produce_result(
    meter: Meter, spec: dict[str, Any], offsets: dict[int, list[int]], errors: dict[str, int]
) -> dict[str, Any]:
    acked, problems = _check_offsets(offsets, spec["partitions"])
    problems += [f"produce: {n} x {e}" for e, n in errors.items()]
    ok = sum(acked.values())
    return meter.result(
        records=ok,
        nbytes=ok * spec["size"],
        errors=sum(errors.values()),
        acked=acked,
        problems=problems,
    )


async def _partita_consume(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    topic, partitions = spec["topic"], spec["partitions"]
    expected = sum(spec["acked"].values())
    check = _ConsumeCheck(partitions)
    next_offset = check.next_offset
    async with AsyncConsumer(
        spec["bootstrap"], auto_offset_reset="earliest", check_crcs=False
    ) as consumer:
        await consumer.cluster.topic(topic, auto_create=False)  # metadata: not timed
        meter.start()
        consumer.assign([(topic, p) for p in range(partitions)])
        for p in range(partitions):
            consumer.seek((topic, p), 0)
        getmany = consumer.getmany
        check.last_progress = time.perf_counter()
        while check.received < expected:
            batch = await getmany(timeout_ms=1000, max_records=check.wanted(expected))
            if not batch:
                if _stalled(check):
                    break
                continue
            check.last_progress = time.perf_counter()
            for r in batch:
                if r.offset != next_offset[r.partition]:
                    check.gaps += 1
                next_offset[r.partition] = r.offset + 1
                check.nbytes += len(r.value)
            check.received += len(batch)
        meter.stop(check.last_progress)
    return check.result(meter, spec["size"], spec["acked"])


async def _aiokafka_consume(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    topic, partitions = spec["topic"], spec["partitions"]
    expected = sum(spec["acked"].values())
    check = _ConsumeCheck(partitions)
    next_offset = check.next_offset
    consumer = AIOKafkaConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        check_crcs=False,
    )
    await consumer.start()  # loads the metadata of every topic: not timed
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        meter.start()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        getmany = consumer.getmany
        check.last_progress = time.perf_counter()
        while check.received < expected:
            batches = await getmany(timeout_ms=1000, max_records=check.wanted(expected))
            if not batches:
                if _stalled(check):
                    break
                continue
            check.last_progress = time.perf_counter()
            for batch in batches.values():
                for r in batch:
                    if r.offset != next_offset[r.partition]:
                        check.gaps += 1
                    next_offset[r.partition] = r.offset + 1
                    check.nbytes += len(r.value)
                check.received += len(batch)
        meter.stop(check.last_progress)
    finally:
        await consumer.stop()
    return check.result(meter, spec["size"], spec["acked"])


def _kafka_python_consume(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415

    topic, partitions = spec["topic"], spec["partitions"]
    expected = sum(spec["acked"].values())
    check = _ConsumeCheck(partitions)
    next_offset = check.next_offset
    consumer = KafkaConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        check_crcs=False,
    )
    try:
        consumer.partitions_for_topic(topic)  # connected, metadata known: not timed
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        meter.start()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        poll = consumer.poll
        check.last_progress = time.perf_counter()
        while check.received < expected:
            batches = poll(timeout_ms=1000, max_records=check.wanted(expected))
            if not batches:
                if _stalled(check):
                    break
                continue
            check.last_progress = time.perf_counter()
            for batch in batches.values():
                for r in batch:
                    if r.offset != next_offset[r.partition]:
                        check.gaps += 1
                    next_offset[r.partition] = r.offset + 1
                    check.nbytes += len(r.value)
                check.received += len(batch)
        meter.stop(check.last_progress)
    finally:
        consumer.close()
    return check.result(meter, spec["size"], spec["acked"])


def _confluent_consume(spec: dict[str, Any], meter: Meter) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    topic, partitions = spec["topic"], spec["partitions"]
    expected = sum(spec["acked"].values())
    check = _ConsumeCheck(partitions)
    next_offset = check.next_offset
    errors = 0
    consumer = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": f"client-bench-{uuid.uuid4().hex[:12]}",  # required; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 1,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.list_topics(topic, timeout=10)  # connected, metadata known: not timed
        meter.start()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        consume = consumer.consume
        check.last_progress = time.perf_counter()
        while check.received < expected:
            batch = consume(num_messages=check.wanted(expected), timeout=1.0)
            if not batch:
                if _stalled(check):
                    break
                continue
            check.last_progress = time.perf_counter()
            for msg in batch:
                if msg.error() is not None:
                    errors += 1
                    continue
                partition, offset = msg.partition(), msg.offset()
                if offset != next_offset[partition]:
                    check.gaps += 1
                next_offset[partition] = offset + 1
                check.nbytes += len(msg.value())
                check.received += 1
        meter.stop(check.last_progress)
    finally:
        consumer.close()
    result = check.result(meter, spec["size"], spec["acked"])
    if errors:
        result["problems"].append(f"consume: {errors} error events")
    return result


WORKERS: dict[tuple[str, str], Callable[[dict[str, Any], Meter], Any]] = {
    (PARTITA, "produce"): _partita_produce,
    (PARTITA, "consume"): _partita_consume,
    (AIOKAFKA, "produce"): _aiokafka_produce,
    (AIOKAFKA, "consume"): _aiokafka_consume,
    (KAFKA_PYTHON, "produce"): _kafka_python_produce,
    (KAFKA_PYTHON, "consume"): _kafka_python_consume,
    (CONFLUENT, "produce"): _confluent_produce,
    (CONFLUENT, "consume"): _confluent_consume,
}


def worker_main(raw_spec: str) -> int:
    """Run one (client, phase) pass as described by the JSON spec; print the JSON result."""
    spec = json.loads(raw_spec)
    meter = Meter(spec["broker_pid"], spec.get("profile"))
    try:
        function = WORKERS[(spec["client"], spec["phase"])]
        result = function(spec, meter)
        if asyncio.iscoroutine(result):
            result = asyncio.run(result)
    except Exception as exc:
        traceback.print_exc()
        result = {"problems": [f"{spec['phase']} failed: {type(exc).__name__}: {exc}"]}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


# -- the coordinator: broker, topics, worker processes, report -----------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    partitions: int
    size: int

    @property
    def label(self) -> str:
        return f"{self.partitions}p {self.size} B"


@dataclass(slots=True)
class Rate(BrokerRate):
    """broker_bench's Rate plus what the producer actually batched."""

    records_per_batch: float | None = None  # produce: as written to the log


@dataclass(slots=True)
class PassResult:
    client: str
    scenario: Scenario
    round_no: int
    produce: Rate | None = None
    consume: Rate | None = None
    problems: list[str] = field(default_factory=list)


def run_worker(
    spec: dict[str, Any], log_path: Path, timeout: float
) -> tuple[dict[str, Any], list[str]]:
    """Run a worker subprocess; (its JSON result, problems). Its stderr goes to the log."""
    with open(log_path, "ab") as log:
        log.write(f"--- {spec['client']} {spec['phase']} {spec['topic']}\n".encode())
        log.flush()
        try:
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
                stdout=subprocess.PIPE,
                stderr=log,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {}, [f"{spec['phase']}: worker timed out after {timeout:.0f} s"]
    for line in proc.stdout.decode(errors="replace").splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            return result, list(result.get("problems", []))
    return {}, [f"{spec['phase']}: worker exited with {proc.returncode}, no result; {log_path}"]


def _rate(result: dict[str, Any]) -> Rate | None:
    if "seconds" not in result:
        return None
    return Rate(
        records=result["records"],
        nbytes=result["nbytes"],
        seconds=result["seconds"],
        broker_cpu=result["broker_cpu"],
        client_cpu=result["client_cpu"],
    )


def batch_stats(data_dir: Path, topic: str, partitions: int) -> float | None:
    """Average records per batch in the topic's segment files (what the producer built)."""
    batches = records = 0
    for p in range(partitions):
        for path in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    for _pos, header in iter_headers(mm):
                        batches += 1
                        records += header.records_count
    return records / batches if batches else None


def client_pass(
    broker: BrokerProcess,
    client: str,
    scenario: Scenario,
    round_no: int,
    records: int,
    workdir: Path,
    profile_dir: Path | None = None,
) -> PassResult:
    result = PassResult(client, scenario, round_no)
    suffix = "warm-up" if round_no < 0 else ("profile" if profile_dir else f"r{round_no}")
    topic = f"cb-{client}-{scenario.partitions}p-{scenario.size}b-{suffix}"
    log_path = workdir / "clients.log"
    timeout = max(180.0, records / 500)
    spec: dict[str, Any] = {
        "client": client,
        "bootstrap": broker.bootstrap,
        "broker_pid": broker.pid,
        "topic": topic,
        "partitions": scenario.partitions,
        "size": scenario.size,
        "records": records,
    }
    try:
        broker.check_alive()
        create_topic(broker, topic, scenario.partitions)
        os.sync()  # no dirty pages left by the previous pass
        profile = str(profile_dir / "produce.prof") if profile_dir else None
        produced, problems = run_worker(
            {**spec, "phase": "produce", "profile": profile}, log_path, timeout
        )
        result.problems += problems
        result.produce = _rate(produced)
        if result.produce is None or not produced.get("acked"):
            return result
        result.produce.records_per_batch = batch_stats(
            workdir / "partita-data", topic, scenario.partitions
        )
        os.sync()
        profile = str(profile_dir / "consume.prof") if profile_dir else None
        consumed, problems = run_worker(
            {**spec, "phase": "consume", "acked": produced["acked"], "profile": profile},
            log_path,
            timeout,
        )
        result.problems += problems
        result.consume = _rate(consumed)
    except Exception as exc:
        result.problems.append(f"pass failed: {type(exc).__name__}: {exc}")
    finally:
        error = delete_topic(broker, topic) if broker.proc.poll() is None else "broker is gone"
        if error is not None:
            result.problems.append(f"delete topic: {error}")
    return result


# -- report --------------------------------------------------------------------------


def _rates(results: list[PassResult], client: str, scenario: Scenario, phase: str) -> list[Rate]:
    rates = [getattr(r, phase) for r in results if r.client == client and r.scenario == scenario]
    return [r for r in rates if r is not None and r.records > 0]


def _ratio(results: list[PassResult], scenario: Scenario, phase: str, other: str) -> float:
    mine = median([r.msgs_s for r in _rates(results, PARTITA, scenario, phase)])
    theirs = median([r.msgs_s for r in _rates(results, other, scenario, phase)])
    return mine / theirs if theirs > 0 else float("nan")


def throughput_table(
    results: list[PassResult], scenarios: list[Scenario], clients: list[str], rounds: int
) -> Table:
    table = Table(
        title=f"Client throughput, median of {rounds} round(s): msgs/s and MB/s of record "
        "values; CPU of the client process and of the broker, % of one core during the phase"
    )
    for name in (
        "scenario",
        "phase",
        "client",
        "msgs/s",
        "MB/s",
        "client CPU",
        "broker CPU",
        "recs/batch",
        "partita / client",
        "target",
    ):
        left = name in ("scenario", "phase", "client", "target")
        table.add_column(name, justify="left" if left else "right")
    for scenario in scenarios:
        for phase in PHASES:
            for i, client in enumerate(clients):
                rates = _rates(results, client, scenario, phase)
                if not rates:
                    table.add_row(
                        scenario.label if i == 0 else "",
                        phase if i == 0 else "",
                        client,
                        *(["-"] * 6),
                        "[red]FAILED[/]",
                    )
                    continue
                per_batch = [r.records_per_batch for r in rates if r.records_per_batch]
                ratio_cell = target_cell = ""
                if client != PARTITA and PARTITA in clients:
                    ratio = _ratio(results, scenario, phase, client)
                    ratio_cell = f"{ratio:.2f}x"
                    goal = TARGETS[client]
                    target_cell = (
                        f"{verdict(ratio >= goal)} (>= {goal:g}x)" if goal else "(information)"
                    )
                table.add_row(
                    scenario.label if i == 0 else "",
                    phase if i == 0 else "",
                    client,
                    f"{median([r.msgs_s for r in rates]):,.0f}",
                    f"{median([r.mb_s for r in rates]):,.1f}",
                    f"{median([r.client_cpu_pct for r in rates]):.0f}%",
                    f"{median([r.broker_cpu_pct for r in rates]):.0f}%",
                    f"{median(per_batch):,.0f}" if per_batch else "",
                    ratio_cell,
                    target_cell,
                )
            table.add_section()
    return table


def spread_table(results: list[PassResult], scenarios: list[Scenario], clients: list[str]) -> Table:
    table = Table(title="Spread over the rounds: min - max msgs/s")
    table.add_column("scenario")
    table.add_column("phase")
    for client in clients:
        table.add_column(client, justify="right")

    def span(rates: list[Rate]) -> str:
        values = sorted(r.msgs_s for r in rates)
        return f"{values[0]:,.0f} - {values[-1]:,.0f}" if values else "-"

    for scenario in scenarios:
        for phase in PHASES:
            table.add_row(
                scenario.label,
                phase,
                *(span(_rates(results, c, scenario, phase)) for c in clients),
            )
    return table


def target_lines(
    results: list[PassResult], scenarios: list[Scenario], clients: list[str]
) -> list[str]:
    lines = []
    if PARTITA not in clients:
        return ["no partita passes: no targets"]
    for other in clients:
        goal = TARGETS.get(other)
        if other == PARTITA:
            continue
        for phase in PHASES:
            ratios = [(_ratio(results, s, phase, other), s.label) for s in scenarios]
            valid = [(r, label) for r, label in ratios if not math.isnan(r)]
            if not valid:
                lines.append(f"[red]MISS[/]  {phase} vs {other}: no comparable figures")
                continue
            worst = min(valid)
            if goal is None:
                lines.append(
                    f"info  {phase}: partita / {other} from {worst[0]:.2f}x ({worst[1]}) to "
                    f"{max(valid)[0]:.2f}x ({max(valid)[1]})"
                )
                continue
            passed = sum(r >= goal for r, _ in valid)
            ok = passed == len(ratios)
            lines.append(
                f"{verdict(ok)}  {phase}: partita >= {goal:g}x {other} in {passed} of "
                f"{len(ratios)} scenarios (worst {worst[0]:.2f}x, {worst[1]})"
            )
    return lines


def report(
    console: Console,
    args: argparse.Namespace,
    scenarios: list[Scenario],
    results: list[PassResult],
) -> None:
    console.print()
    console.print(throughput_table(results, scenarios, args.clients, args.rounds))
    console.print(
        "  recs/batch: records per batch in the topic's segment files, i.e. the batches the "
        "producer built (a 64 KiB batch holds ~600 records of 100 B, ~64 of 1000 B); the "
        "consume pass reads what the same client produced."
    )
    console.print(
        f"  {os.cpu_count()} CPUs are shared by the broker and the client: client + broker "
        "CPU near the CPU count means the machine, not the client alone, is the limit."
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
            "their rates are noisy and CPU figures coarse; use more --records."
        )
    if args.rounds > 1:
        console.print(spread_table(results, scenarios, args.clients))
    console.print("[bold]Targets[/] (medians; partita's ratio to each client)")
    for line in target_lines(results, scenarios, args.clients):
        console.print(f"  {line}")
    problems = [
        f"{r.client} {r.scenario.label} round {r.round_no + 1}: {p}"
        for r in results
        for p in r.problems
    ]
    if problems:
        console.print(f"[bold red]Problems ({len(problems)})[/]")
        for line in problems:
            console.print(f"  {line}", markup=False, highlight=False)
    else:
        console.print(
            "[bold]Checks:[/] every produced record acknowledged without error, acked offsets "
            "contiguous from 0; every consume pass read each acked record once, in order"
        )
    console.print(f"[bold]Machine:[/] {load_average()} at the end (other work skews the figures)")


def startup_report(console: Console, broker: BrokerProcess) -> None:
    """Each client's start-up in a fresh process (startup_bench.py): the throughput above
    starts its clock after the client is imported and connected."""
    prepare_topic(broker, "startup")
    figures = measure(broker.bootstrap, "startup", STARTUP_ROUNDS, with_commands=False)
    for table in startup_tables(figures, STARTUP_ROUNDS):
        console.print(table)


def print_profile(console: Console, path: Path, top: int, seconds: float | None) -> None:
    stats = pstats.Stats(str(path), stream=io.StringIO())
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_cc, _nc, tt, _ct, _callers) in entries.values()) or 1.0

    def name(func: tuple[str, int, str]) -> str:
        filename, line, function = func
        if "/partita/" in filename:
            filename = "partita/" + filename.rpartition("/partita/")[2]
        elif filename.startswith("~"):
            return function  # built-in
        else:
            filename = filename.rpartition("/")[2]
        return f"{filename}:{line}:{function}"

    for key, title in ((2, "own time"), (3, "inclusive time")):
        table = Table(title=f"{path.stem}: top {top} functions by {title} (cProfile)")
        for column in ("function", "calls", "own s", "own %", "incl s", "incl %"):
            table.add_column(column, justify="left" if column == "function" else "right")
        # Frames already running when the profiler was enabled (the event loop, the
        # benchmark's coroutine) get inclusive times that can exceed the total: left out.
        kept = [kv for kv in entries.items() if kv[1][3] <= total * 1.001]
        ranked = sorted(kept, key=lambda kv: kv[1][key], reverse=True)[:top]
        for func, (_cc, ncalls, tt, ct, _callers) in ranked:
            table.add_row(
                name(func),
                f"{ncalls:,}",
                f"{tt:.3f}",
                f"{100 * tt / total:.1f}",
                f"{ct:.3f}",
                f"{100 * ct / total:.1f}",
            )
        console.print(table)
    wall = f" over {seconds:.2f} s of wall time (profiled, so slower)" if seconds else ""
    console.print(
        f"  {total:.2f} s of profiled CPU{wall}; stats in {path}. cProfile charges C "
        "iterators (aiokafka's compiled record reader) and type calls (list(), ...) to the "
        "caller's own time; dataclass __init__s all share the key <string>:2:__init__, so "
        "pstats keeps one of them and the others' time shows only in their callers' "
        "inclusive time."
    )


def profile_scenario(
    spec: str, results: list[PassResult], scenarios: list[Scenario], clients: list[str]
) -> Scenario:
    if spec != "worst":
        partitions, size = spec.split(":")
        return Scenario(int(partitions), int(size))

    def worst(scenario: Scenario) -> float:
        ratios = [
            _ratio(results, scenario, phase, other) / (TARGETS[other] or 1.0)
            for phase in PHASES
            for other in clients
            if other != PARTITA and TARGETS.get(other)
        ]
        return min([r for r in ratios if not math.isnan(r)] or [float("inf")])

    return min(scenarios, key=worst)


# -- main ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=None, help="records per pass")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS:,} records")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; figures are medians")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000], help="bytes")
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument(
        "--profile",
        nargs="?",
        const="worst",
        metavar="P:SIZE",
        help="after the rounds, one more (unscored) partita pass under cProfile; the "
        "scenario with partita's worst ratio to a target, or the one given, e.g. 1:100",
    )
    parser.add_argument("--profile-top", type=int, default=25, help="rows per profile table")
    parser.add_argument("--dir", type=Path, default=DEFAULT_PARENT, help="parent of the work dir")
    parser.add_argument("--keep", action="store_true", help="keep data, logs and profiles")
    args = parser.parse_args(argv)
    if args.records is None:
        args.records = QUICK_RECORDS if args.quick else DEFAULT_RECORDS
    if args.records <= 0 or args.rounds <= 0:
        parser.error("--records and --rounds must be positive")
    if args.profile not in (None, "worst") and (
        len(args.profile.split(":")) != 2 or not args.profile.replace(":", "").isdigit()
    ):
        parser.error(f"--profile {args.profile!r}: use PARTITIONS:SIZE, e.g. 1:100")
    return args


def log_pass(console: Console, r: PassResult) -> None:
    parts = [f"{r.client:>12} {r.scenario.label:<10}"]
    for phase in PHASES:
        rate: Rate | None = getattr(r, phase)
        if rate is not None:
            parts.append(
                f"{phase} {rate.msgs_s:>9,.0f} msgs/s {rate.mb_s:6.1f} MB/s "
                f"(CPU client {rate.client_cpu_pct:3.0f}%, broker {rate.broker_cpu_pct:3.0f}%)"
            )
    if r.problems:
        parts.append(f"[red]{len(r.problems)} problem(s)[/]")
    console.log("  ".join(parts))


def partita_source() -> str:
    """Where the partita package comes from (workers and broker inherit PYTHONPATH), and
    its git commit, flagging uncommitted changes under src/partita."""
    package = Path(partita.__file__).resolve().parent
    where = str(package)
    try:
        git = ["git", "-C", str(package)]
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return f"{where} (not a git checkout)"
    changed = [line[3:] for line in dirty if line.strip()]
    state = f"uncommitted changes: {', '.join(changed)}" if changed else "clean"
    return f"{where} (git {commit}, {state})"


def run(args: argparse.Namespace, workdir: Path, console: Console) -> None:
    scenarios = [Scenario(p, size) for p in args.partitions for size in args.sizes]
    clients: list[str] = args.clients
    console.print(
        f"[bold]partita client benchmark[/]: {args.records:,} records per pass, "
        f"{args.rounds} round(s), {len(scenarios)} scenario(s) x {len(clients)} clients, "
        f"in {workdir}\n"
        f"python {sys.version.split()[0]}; {os.cpu_count()} CPUs (broker and client share "
        f"them), {load_average()}\n"
        f"produce: acks={ACKS}, linger {LINGER_MS} ms, batch size {BATCH_SIZE // 1024} KiB, "
        "no compression, idempotence off, keyless values of exactly SIZE bytes; timed from the "
        "first send to the last acknowledgement\n"
        f"consume: assign() + seek(0), no group; {CONSUME_BATCH:,} records per call at most; "
        "CRC checks off; timed from assign() to the last record\n"
        "every pass in a fresh worker process; one partita broker (default settings, data on "
        f"disk in {workdir / 'partita-data'}); a fresh topic per client and scenario, deleted "
        "after its passes"
    )
    console.print(f"partita code: {partita_source()}")
    log_clients_to(workdir / "admin.log")
    broker = start_partita(workdir, [])
    results: list[PassResult] = []
    try:
        console.log(f"partita broker pid {broker.pid} on {broker.bootstrap}")
        for client in clients:  # unscored: broker code paths, page cache, imports
            warm = client_pass(broker, client, Scenario(1, 100), -1, WARM_UP_RECORDS, workdir)
            if warm.problems:
                console.log(f"[red]{client} warm-up problems: {warm.problems}[/]")
        step = 0
        for round_no in range(args.rounds):
            console.log(f"round {round_no + 1} of {args.rounds}")
            for scenario in scenarios:
                shift = step % len(clients)
                step += 1
                for client in clients[shift:] + clients[:shift]:
                    result = client_pass(broker, client, scenario, round_no, args.records, workdir)
                    results.append(result)
                    log_pass(console, result)
        report(console, args, scenarios, results)
        startup_report(console, broker)
        if args.profile and PARTITA in clients:
            scenario = profile_scenario(args.profile, results, scenarios, clients)
            console.rule(f"profile: partita, {scenario.label}, {args.records:,} records")
            profile_dir = workdir / "profile"
            profile_dir.mkdir(exist_ok=True)
            result = client_pass(
                broker, PARTITA, scenario, args.rounds, args.records, workdir, profile_dir
            )
            log_pass(console, result)
            for phase in PHASES:
                path = profile_dir / f"{phase}.prof"
                rate: Rate | None = getattr(result, phase)
                if path.exists():
                    print_profile(console, path, args.profile_top, rate.seconds if rate else None)
    finally:
        code = broker.stop()
        console.log(f"broker stopped, exit code {code}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160, log_path=False)
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="client-bench-", dir=args.dir.resolve()))
    try:
        run(args, workdir, console)
    except Exception as exc:
        console.print(f"[red]benchmark failed: {type(exc).__name__}: {exc}[/]")
    finally:
        if args.keep or args.profile:
            console.print(f"data, logs and profiles kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        sys.exit(worker_main(sys.argv[2]))
    sys.exit(main())
