"""BrokerMetrics on a real (unstarted-network) Broker: label hygiene and exposition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from partita.server.broker import Broker
from partita.server.config import BrokerConfig, ListenerSpec


def samples(broker: Broker) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = broker.metrics.exposition().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def run_alone(tmp_path: Path, body: Callable[[Broker], Awaitable[None]]) -> None:
    """A broker alone, up as runtime brings it up (its file-backed store, its logs, its
    registration) but with no listener, while ``body`` runs."""

    async def run() -> None:
        broker = Broker(
            BrokerConfig.from_sources(),
            tmp_path,
            [ListenerSpec("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)],
        )  # registered, never listened on
        await broker.cluster.connect()
        broker.startup()
        await broker.cluster.join()
        try:
            await body(broker)
        finally:
            await broker.leave_cluster(1.0)
            broker.shutdown()

    asyncio.run(run())


def test_refusals_for_made_up_topics_share_one_label(tmp_path: Path) -> None:
    run_alone(tmp_path, _refusals_for_made_up_topics_share_one_label)


async def _refusals_for_made_up_topics_share_one_label(broker: Broker) -> None:
    await broker.topic_admin.create("real", 1, 1, {})
    for name in ("ghost-1", "ghost-2", "ghost-3"):
        broker.metrics.produce_refused(name, 3)
    broker.metrics.produce_refused("real", 10)
    found = samples(broker)
    failed = {k: v for k, v in found.items() if k[0] == "partita_failed_produce_partitions_total"}
    assert failed == {
        (
            "partita_failed_produce_partitions_total",
            frozenset({("topic", "(unknown)"), ("error", "UNKNOWN_TOPIC_OR_PARTITION")}),
        ): 3,
        (
            "partita_failed_produce_partitions_total",
            frozenset({("topic", "real"), ("error", "MESSAGE_SIZE_TOO_LARGE")}),
        ): 1,
    }
    assert found[("partita_partitions", frozenset())] == 1


def test_replication_gauges_on_a_broker_alone(tmp_path: Path) -> None:
    run_alone(tmp_path, _replication_gauges_on_a_broker_alone)


async def _replication_gauges_on_a_broker_alone(broker: Broker) -> None:
    await broker.topic_admin.create("led", 3, 1, {})
    broker.metrics.isr_changed(3, 2)
    broker.metrics.isr_changed(2, 3)
    broker.metrics.isr_changed(2, 3)
    found = samples(broker)
    assert found[("partita_leader_partitions", frozenset())] == 3
    assert found[("partita_under_replicated_partitions", frozenset())] == 0
    assert found[("partita_isr_changes_total", frozenset({("kind", "shrink")}))] == 1
    assert found[("partita_isr_changes_total", frozenset({("kind", "expand")}))] == 2
