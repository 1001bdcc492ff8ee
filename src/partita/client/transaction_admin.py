"""Transaction administration, as Kafka's ``kafka-transactions`` does it: list the
transactional ids the coordinators know, describe one, show the producers writing to a
partition, and abort a hanging transaction on a partition (KIP-664).

A transaction *hangs* when its producer is gone and its coordinator no longer knows it
(lost state, a bug, an old client): it holds the partition's last stable offset back, so
read_committed readers stop there. Aborting it writes an ABORT marker on that partition
directly (WriteTxnMarkers to the leader, which needs CLUSTER_ACTION, as in Kafka).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.producer import WriteTxnMarkersRequest

from partita.client.admin import AdminError, check_answer
from partita.client.cluster import Cluster
from partita.client.connection import BrokerConnection
from partita.client.group_member import TRANSACTION_KEY, find_coordinator
from partita.errors import UnknownTopicOrPartitionError


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # -1 when no transaction is open
    partitions: tuple[tuple[str, int], ...]
    coordinator: str  # host:port


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    txn_start_offset: int  # -1: no open transaction on this partition


async def list_transactions(
    cluster: Cluster, states: list[str] | None = None
) -> list[TransactionListing]:
    """Every transactional id on every broker (each lists those it coordinates)."""
    await cluster.refresh([])
    found: list[TransactionListing] = []
    for node in sorted(cluster.brokers):
        connection = await cluster.connection(node)
        response = await connection.request(
            ListTransactionsRequest(version=0, state_filters=states or [], producer_id_filters=[])
        )
        check_answer(response.error_code, None, f"broker {node} cannot list transactions")
        found += [
            TransactionListing(t.transactional_id, t.producer_id, t.transaction_state, node)
            for t in response.transaction_states
        ]
    return sorted(found, key=lambda t: t.transactional_id)


async def describe_transaction(cluster: Cluster, transactional_id: str) -> TransactionDescription:
    coordinator = await find_coordinator(cluster, transactional_id, TRANSACTION_KEY)
    try:
        response = await coordinator.request(
            DescribeTransactionsRequest(version=0, transactional_ids=[transactional_id])
        )
    finally:
        await coordinator.close()
    (state,) = response.transaction_states
    check_answer(state.error_code, None, f"cannot describe transactional id {transactional_id!r}")
    return TransactionDescription(
        transactional_id,
        state.transaction_state,
        state.producer_id,
        state.producer_epoch,
        state.transaction_timeout_ms,
        state.transaction_start_time_ms,
        tuple(sorted((t.topic, p) for t in state.topics for p in t.partitions)),
        f"{coordinator.host}:{coordinator.port}",
    )


async def describe_producers(cluster: Cluster, topic: str, partition: int) -> list[ProducerState]:
    """The producers the partition's leader keeps state for."""
    leader = await _leader(cluster, topic, partition)
    response = await leader.request(
        DescribeProducersRequest(
            version=0,
            topics=[
                DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])
            ],
        )
    )
    (result,) = [p for t in response.topics for p in t.partitions]
    check_answer(result.error_code, None, f"cannot describe the producers of {topic}-{partition}")
    return [
        ProducerState(
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in result.active_producers
    ]


async def abort_transaction(
    cluster: Cluster, topic: str, partition: int, start_offset: int
) -> ProducerState:
    """Abort the transaction open on ``topic-partition`` since ``start_offset`` (as
    ``kafka-transactions abort --start-offset``); returns the producer it belonged to."""
    producers = await describe_producers(cluster, topic, partition)
    matching = [p for p in producers if p.txn_start_offset == start_offset]
    if not matching:
        open_at = sorted(p.txn_start_offset for p in producers if p.txn_start_offset >= 0)
        raise AdminError(
            -1,
            f"no transaction is open on {topic}-{partition} at offset {start_offset}"
            + (f" (open ones start at {', '.join(map(str, open_at))})" if open_at else ""),
        )
    producer = matching[0]
    leader = await _leader(cluster, topic, partition)
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        transaction_result=False,
        coordinator_epoch=producer.coordinator_epoch,
        topics=[
            WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
                name=topic, partition_indexes=[partition]
            )
        ],
    )
    response = await leader.request(WriteTxnMarkersRequest(version=1, markers=[marker]))
    for result in response.markers:
        for t in result.topics:
            for p in t.partitions:
                check_answer(
                    p.error_code, None, f"cannot abort the transaction on {topic}-{partition}"
                )
    return producer


async def _leader(cluster: Cluster, topic: str, partition: int) -> BrokerConnection:
    info = await cluster.topic(topic, auto_create=False)
    if partition not in info.leaders:
        raise AdminError(UnknownTopicOrPartitionError.code, f"{topic} has no partition {partition}")
    return await cluster.connection(info.leaders[partition])
