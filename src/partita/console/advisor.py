"""How many partitions a topic needs: the seeds' rule, with the denominator measured.

partitions = ceil(target throughput / one partition's throughput), where one partition's
throughput is the lesser of what a producer and a consumer reach on it. ``advise`` is the
rule (sans-IO); ``measure`` runs the short bounded test on a scratch topic of the user's
cluster and deletes it after.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from partita.client.admin import AsyncAdmin
from partita.client.consumer import AsyncConsumer
from partita.client.producer import AsyncProducer
from partita.client.security import ClientSecurity

MB = 1_000_000
SCRATCH_PREFIX = "partita-advise-"
DEFAULT_SECONDS = 5.0
MAX_BYTES = 256 * MB  # the produce run stops near this much, whichever comes first
MAX_RECORD_SIZE = 1 * MB  # Kafka's default max.message.bytes is about this
# Kafka's guidance: past a few thousand partitions per broker, start-up, failover and
# memory grow with the count (partita measured 10,000 per cluster in docs/performance.md).
MANY_PER_BROKER = 4000


@dataclass(frozen=True, slots=True)
class Measurement:
    record_size: int
    acks: str
    records: int
    produce_mb_s: float
    consume_mb_s: float
    seconds: float

    @property
    def partition_mb_s(self) -> float:
        return min(self.produce_mb_s, self.consume_mb_s)


@dataclass(frozen=True, slots=True)
class Advice:
    target_mb_s: float
    measurement: Measurement
    brokers: int
    needed: int  # ceil(target / one partition's throughput)
    partitions: int  # rounded up to spread evenly over the brokers
    warnings: tuple[str, ...]


def advise(target_mb_s: float, measurement: Measurement, brokers: int) -> Advice:
    if target_mb_s <= 0:
        raise ValueError("the target throughput must be above 0 MB/s")
    per = measurement.partition_mb_s
    if per <= 0:
        raise ValueError("the measurement moved no data: nothing to divide by")
    brokers = max(brokers, 1)
    needed = max(1, math.ceil(target_mb_s / per))
    partitions = math.ceil(needed / brokers) * brokers
    warnings = [
        "Every partition costs: open files and memory on each replica's broker, a fetch "
        "entry for each follower, and time at start-up and failover. Do not add far more "
        "than the target needs.",
        "More partitions make consumer group rebalances longer: each member's assignment "
        "grows, and with the eager protocol every member stops while it moves.",
        "Growing a topic later changes which partition a key goes to (murmur2(key) % "
        "partitions): records of one key written before and after are then in two "
        "partitions, out of order for a reader. Create the topic with the count it needs.",
    ]
    if partitions / brokers > MANY_PER_BROKER:
        warnings.insert(
            0,
            f"{partitions} partitions are {partitions // brokers} per broker, above "
            f"{MANY_PER_BROKER}: add brokers rather than partitions.",
        )
    return Advice(target_mb_s, measurement, brokers, needed, partitions, tuple(warnings))


async def measure(
    bootstrap: str,
    security: ClientSecurity | Mapping[str, str] | None = None,
    record_size: int = 1024,
    acks: str = "all",
    seconds: float = DEFAULT_SECONDS,
) -> tuple[Measurement, int]:
    """Produce for ``seconds`` (or MAX_BYTES) into a one-partition scratch topic, read it
    all back once, delete the topic. Returns the measurement and the broker count."""
    if not 1 <= record_size <= MAX_RECORD_SIZE:
        raise ValueError(f"the record size is 1 B to {MAX_RECORD_SIZE // MB} MB")
    name = SCRATCH_PREFIX + secrets.token_hex(4)
    async with AsyncAdmin(bootstrap, client_id="partita-advise", security=security) as admin:
        brokers = len((await admin.describe_cluster()).brokers)
        await admin.create_topic(name, 1, min(3, brokers))
        try:
            measurement = await _run(bootstrap, security, name, record_size, acks, seconds)
        finally:
            await admin.delete_topic(name)
    return measurement, brokers


async def _run(
    bootstrap: str,
    security: ClientSecurity | Mapping[str, str] | None,
    topic: str,
    record_size: int,
    acks: str,
    seconds: float,
) -> Measurement:
    value = os.urandom(record_size)  # incompressible, as real payloads mostly are
    # Chunks of at most 500 records and 4 MB; the last future of each is awaited four
    # chunks later: a bounded amount in flight, and the run stops near MAX_BYTES.
    chunk = max(1, min(500, (4 * MB) // record_size))
    sent = 0
    async with AsyncProducer(
        bootstrap,
        acks=acks,
        linger_ms=5,
        batch_size=64 * 1024,
        client_id="partita-advise",
        security=security,
    ) as producer:
        started = time.monotonic()
        window: list[asyncio.Future[object]] = []
        while time.monotonic() - started < seconds and sent * record_size < MAX_BYTES:
            for _ in range(chunk):
                last = await producer.send(topic, value, partition=0)
            sent += chunk
            window.append(last)  # type: ignore[arg-type]
            if len(window) > 4:
                await window.pop(0)
        await producer.flush()
        produce_s = time.monotonic() - started
    async with AsyncConsumer(
        bootstrap, client_id="partita-advise", security=security, enable_auto_commit=False
    ) as consumer:
        # What the partition holds (with acks=0 a record may be lost: the read stops at
        # the log end, not at the count sent).
        end = (await consumer.end_offsets([(topic, 0)]))[(topic, 0)]
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        started = time.monotonic()
        position = 0
        async with asyncio.timeout(max(60.0, 4 * seconds)):
            while position < end:
                for record in await consumer.getmany(timeout_ms=1000):
                    position = record.offset + 1
        consume_s = time.monotonic() - started
    total = end * record_size
    return Measurement(
        record_size,
        acks,
        end,
        total / produce_s / MB,
        total / max(consume_s, 1e-9) / MB,
        produce_s + consume_s,
    )
