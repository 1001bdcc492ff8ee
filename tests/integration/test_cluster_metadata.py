"""What partita's client learns from a real broker's Metadata: leaders, replicas and the
racks the rack-aware assignors need."""

from __future__ import annotations

import asyncio

from partita.client.cluster import Cluster
from partita.local.cluster import free_port
from tests.integration.clients import create_topic
from tests.integration.conftest import BrokerProcess


def test_replica_racks_come_from_broker_rack(broker_factory: type[BrokerProcess]) -> None:
    racked = broker_factory({"broker.rack": "eu-west-1a"})
    racked.start()
    create_topic(racked.bootstrap, "racked", partitions=3)

    async def learn() -> dict[tuple[str, int], list[str | None]]:
        cluster = Cluster(racked.bootstrap)
        try:
            await cluster.refresh(["racked"], auto_create=False)
            return cluster.replica_racks(["racked", "unknown-topic"])
        finally:
            await cluster.close()

    assert asyncio.run(learn()) == {("racked", p): ["eu-west-1a"] for p in range(3)}


def test_no_rack_is_none(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "plain")

    async def learn() -> dict[tuple[str, int], list[str | None]]:
        cluster = Cluster(broker.bootstrap)
        try:
            await cluster.refresh(["plain"], auto_create=False)
            return cluster.replica_racks(["plain"])
        finally:
            await cluster.close()

    assert asyncio.run(learn()) == {("plain", 0): [None]}


def test_requests_for_any_broker_pass_over_a_dead_one(broker: BrokerProcess) -> None:
    # The metadata still lists a broker that was killed (or restarted on another port):
    # a request any broker can answer goes to a live one, as Kafka's least-loaded node
    # does, and never fails on the dead one. Before, a random listed broker was chosen,
    # and an admin call failed with "connection refused" once in N.
    dead_port = free_port()

    async def ask() -> list[int]:
        cluster = Cluster(broker.bootstrap)
        try:
            await cluster.refresh([], auto_create=False)
            (live,) = cluster.brokers
            cluster.brokers[live + 1] = ("127.0.0.1", dead_port)
            ports = []
            for _ in range(20):
                connection = await cluster.any_connection()
                ports.append(connection.port)
                await connection.close()  # each time a fresh pick among the listed
            return ports
        finally:
            await cluster.close()

    assert set(asyncio.run(ask())) == {broker.port}
