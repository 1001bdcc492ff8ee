"""What a client knows about the cluster: brokers, partition leaders, connections."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from partita.client.bootstrap import parse_bootstrap
from partita.client.connection import BrokerConnection, ConnectionLostError, RequestTally
from partita.client.error_names import describe_error_code
from partita.client.security import ClientSecurity
from partita.cluster.model import valid_topic_name
from partita.errors import (
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from partita.protocol.consumer_requests import MetadataRequestV12

UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
INVALID_TOPIC_EXCEPTION = 17


class NoBrokersAvailableError(KafkaError):
    code = -1
    retriable = True


def topic_error(name: str, code: int) -> KafkaError:
    """The error for a topic that Metadata answered with ``code``, saying what is wrong in
    words: a user who typed a name wants to know that it does not exist, or why it is not
    a valid name, not a number."""
    if code == UNKNOWN_TOPIC_OR_PARTITION:
        return UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    if code == INVALID_TOPIC_EXCEPTION:
        # Kafka's naming rules say why; a name that keeps them was refused for another
        # reason (a topic clients may not use).
        reason = valid_topic_name(name) or f"the broker refuses topic {name!r} as invalid"
        return InvalidTopicError(reason)
    return KafkaError(f"topic {name!r} is not available: {describe_error_code(code)}")


@dataclass(slots=True)
class TopicInfo:
    name: str
    error_code: int
    leaders: dict[int, int] = field(default_factory=dict)  # partition -> leader node
    replicas: dict[int, list[int]] = field(default_factory=dict)  # partition -> replica nodes
    epochs: dict[int, int] = field(default_factory=dict)  # partition -> leader epoch

    @property
    def partitions(self) -> int:
        return len(self.leaders)


def metadata_request(topics: list[str] | None, auto_create: bool = False) -> MetadataRequestV12:
    """Metadata v12 for ``topics`` (None: every topic), framed by hand."""
    return MetadataRequestV12(topics, allow_auto_topic_creation=auto_create)


class Cluster:
    def __init__(
        self,
        bootstrap: str | list[str],
        client_id: str = "partita",
        metadata_max_age_ms: int = 300_000,
        max_block_ms: int = 60_000,
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        # TLS and the SASL login of every connection (client/security.py).
        self.security = (
            security
            if isinstance(security, ClientSecurity)
            else ClientSecurity.from_config(security or {})
        )
        self.metadata_max_age = metadata_max_age_ms / 1000
        self.max_block = max_block_ms / 1000
        self._refreshed: dict[str, float] = {}
        self.client_id = client_id
        self.brokers: dict[int, tuple[str, int]] = {}
        self.racks: dict[int, str | None] = {}  # broker.rack of each broker, if set
        self.topics: dict[str, TopicInfo] = {}
        self._connections: dict[int, BrokerConnection] = {}
        # One connect at a time per broker: callers racing after a failure share it, so
        # a broker never has two connections (requests on one stay in order).
        self._connecting: dict[int, asyncio.Lock] = {}
        self._bootstrap_connection: BrokerConnection | None = None
        self.tally = RequestTally()

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker, as Kafka's least-loaded node: one already open if
        there is one, else each known broker in turn, else the bootstrap servers. A dead
        broker the metadata still lists (killed, or restarted on another port) is passed
        over, not reported: any live broker answers a request that needs no leader."""
        open_now = [
            c for node, c in self._connections.items() if node in self.brokers and not c.closed
        ]
        if open_now:
            return random.choice(open_now)
        errors = []
        nodes = list(self.brokers)
        random.shuffle(nodes)
        for node in nodes:
            try:
                return await self.connection(node)
            except OSError as exc:
                # (a refresh during the connect may have dropped the node meanwhile)
                host, port = self.brokers.get(node, ("?", 0))
                errors.append(f"{host}:{port}: {exc.strerror or exc}")
        if self._bootstrap_connection is not None and not self._bootstrap_connection.closed:
            return self._bootstrap_connection
        for host, port in self.bootstrap:
            connection = BrokerConnection(
                host, port, self.client_id, security=self.security, tally=self.tally
            )
            try:
                await connection.connect()
            except OSError as exc:
                errors.append(f"{host}:{port}: {exc.strerror or exc}")
                continue
            self._bootstrap_connection = connection
            return connection
        raise NoBrokersAvailableError("cannot reach any broker: " + "; ".join(errors))

    async def connection(self, node_id: int) -> BrokerConnection:
        existing = self._connections.get(node_id)
        if existing is not None and not existing.closed:
            return existing
        async with self._connecting.setdefault(node_id, asyncio.Lock()):
            existing = self._connections.get(node_id)
            if existing is not None and not existing.closed:
                return existing
            if node_id not in self.brokers:
                # A partition without a leader (-1), or a broker the metadata no longer lists.
                raise LeaderNotAvailableError(f"broker {node_id} is not in the cluster's metadata")
            host, port = self.brokers[node_id]
            connection = BrokerConnection(
                host, port, self.client_id, security=self.security, tally=self.tally
            )
            await connection.connect()
            self._connections[node_id] = connection
            if existing is not None:
                await existing.close()
            return connection

    async def refresh(self, topics: list[str] | None, *, auto_create: bool = True) -> None:
        connection = await self.any_connection()
        response: Any = await connection.request(metadata_request(topics, auto_create))
        self.brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        self.racks = {b.node_id: b.rack for b in response.brokers}
        for topic in response.topics:
            info = TopicInfo(
                topic.name,
                topic.error_code,
                {p.partition_index: p.leader_id for p in topic.partitions},
                {p.partition_index: list(p.replica_nodes) for p in topic.partitions},
                {p.partition_index: p.leader_epoch for p in topic.partitions},
            )
            _keep_newer_leaders(info, self.topics.get(topic.name))
            self.topics[topic.name] = info
            self._refreshed[topic.name] = time.monotonic()

    async def _refresh_patiently(self, topics: list[str], auto_create: bool) -> None:
        """Refresh, riding out a lost connection for up to ``max.block.ms`` (Java's
        default, 60 s), as the Java producer's wait for metadata does: a broker restart or
        a network blip must not reach the application as an error."""
        deadline = time.monotonic() + self.max_block
        while True:
            try:
                await self.refresh(topics, auto_create=auto_create)
                return
            except (ConnectionLostError, OSError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)

    def is_stale(self, name: str) -> bool:
        """Whether ``name``'s metadata is older than ``metadata.max.age.ms``."""
        return time.monotonic() - self._refreshed.get(name, 0.0) > self.metadata_max_age

    async def topic(self, name: str, *, auto_create: bool = True) -> TopicInfo:
        info = self.topics.get(name)
        if info is None or info.error_code or not info.partitions or self.is_stale(name):
            await self._refresh_patiently([name], auto_create)
            info = self.topics.get(name)
            # A topic being created (LEADER_NOT_AVAILABLE) is ready in moments: ask again
            # for up to max.block.ms, as the Java producer waits for its metadata.
            deadline = time.monotonic() + self.max_block
            while info is not None and info.error_code == LEADER_NOT_AVAILABLE:
                if time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
                await self._refresh_patiently([name], auto_create)
                info = self.topics.get(name)
        if info is None or info.error_code:
            raise topic_error(name, info.error_code if info else UNKNOWN_TOPIC_OR_PARTITION)
        return info

    def replica_racks(self, topics: list[str]) -> dict[tuple[str, int], list[str | None]]:
        """The racks of each partition's replicas (None for a broker without a rack), as
        the rack-aware assignors (KIP-881) want them."""
        return {
            (topic, partition): [self.racks.get(node) for node in nodes]
            for topic in topics
            if topic in self.topics
            for partition, nodes in self.topics[topic].replicas.items()
        }

    async def drop_connection(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (one that stopped answering): the next
        request opens a new one."""
        connection = self._connections.pop(node_id, None)
        if connection is not None:
            await connection.close()

    async def close(self) -> None:
        connections = list(self._connections.values())
        if self._bootstrap_connection is not None:
            connections.append(self._bootstrap_connection)
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
        self._connections.clear()
        self._bootstrap_connection = None


def _keep_newer_leaders(fresh: TopicInfo, known: TopicInfo | None) -> None:
    """Leader epochs only grow: a broker whose metadata lags may name an older leader,
    and its answer must not replace a newer one we already know (KIP-320), or the
    client would go back to a broker that no longer leads."""
    if known is None:
        return
    for partition, epoch in list(fresh.epochs.items()):
        older = known.epochs.get(partition, -1)
        if 0 <= epoch < older and partition in known.leaders:
            fresh.leaders[partition] = known.leaders[partition]
            fresh.epochs[partition] = older
