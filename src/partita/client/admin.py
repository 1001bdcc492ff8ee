"""partita's asyncio admin client: topics, partitions, configs, records, groups."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import (
    AlterPartitionReassignmentsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)

from partita.client import group_admin
from partita.client.cluster import (
    UNKNOWN_TOPIC_OR_PARTITION,
    Cluster,
    metadata_request,
    topic_error,
)
from partita.client.error_names import describe_error_code
from partita.client.group_admin import GroupDescription, GroupListing
from partita.client.security import ClientSecurity
from partita.errors import KafkaError

TOPIC_RESOURCE = 2
OP_SET, OP_DELETE = 0, 1


NOT_CONTROLLER = 41


class AdminError(KafkaError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    error_code: int
    offline: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller: int
    brokers: list[BrokerDescription]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionDescription]


def check_answer(code: int, message: str | None, what: str) -> None:
    """Raise AdminError for a non-zero error code: ``what`` failed, and why (the broker's
    message, else the code's meaning)."""
    if code:
        if not message:
            missing = code == UNKNOWN_TOPIC_OR_PARTITION
            message = "it does not exist" if missing else describe_error_code(code)
        raise AdminError(code, f"{what}: {message}")


class AsyncAdmin:
    def __init__(
        self,
        bootstrap_servers: str | list[str] = "127.0.0.1:9092",
        client_id: str = "partita-admin",
        security: ClientSecurity | Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = Cluster(bootstrap_servers, client_id, security=security)

    async def start(self) -> None:
        await self.cluster.refresh([])

    async def stop(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> AsyncAdmin:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()

    async def _request(self, message: Any) -> Any:
        connection = await self.cluster.any_connection()
        return await connection.request(message)

    async def create_topic(
        self,
        name: str,
        partitions: int = -1,
        replication: int = -1,
        configs: dict[str, str] | None = None,
    ) -> None:
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=replication,
            assignments=[],
            configs=[
                CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                for k, v in (configs or {}).items()
            ],
        )
        response = await self._request(
            CreateTopicsRequest(version=7, topics=[topic], timeout_ms=30_000, validate_only=False)
        )
        result = response.topics[0]
        check_answer(result.error_code, result.error_message, f"cannot create topic {name!r}")

    async def delete_topic(self, name: str) -> None:
        response = await self._request(
            DeleteTopicsRequest(
                version=6,
                topics=[DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=None)],
                timeout_ms=30_000,
            )
        )
        result = response.responses[0]
        check_answer(result.error_code, result.error_message, f"cannot delete topic {name!r}")

    async def describe_topics(
        self, names: list[str] | None = None, *, skip_errors: bool = False
    ) -> list[TopicDescription]:
        """Topics, partitions, leaders, replicas, ISRs. A topic answered with an error
        (being deleted, not yet ready) raises, or with ``skip_errors`` is left out."""
        response = await self._request(metadata_request(names))
        out = []
        for t in response.topics:
            if t.error_code and skip_errors:
                continue
            if t.error_code:
                raise AdminError(t.error_code, topic_error(t.name, t.error_code).message)
            out.append(
                TopicDescription(
                    t.name,
                    str(t.topic_id),
                    bool(t.is_internal),
                    [
                        PartitionDescription(
                            p.partition_index,
                            p.leader_id,
                            p.leader_epoch,
                            list(p.replica_nodes),
                            list(p.isr_nodes),
                            p.error_code,
                            list(p.offline_replicas or []),
                        )
                        for p in sorted(t.partitions, key=lambda p: p.partition_index)
                    ],
                )
            )
        return sorted(out, key=lambda d: d.name)

    async def add_partitions(self, name: str, total: int) -> None:
        response = await self._request(
            CreatePartitionsRequest(
                version=3,
                topics=[
                    CreatePartitionsRequest.CreatePartitionsTopic(
                        name=name, count=total, assignments=None
                    )
                ],
                timeout_ms=30_000,
                validate_only=False,
            )
        )
        result = response.results[0]
        check_answer(result.error_code, result.error_message, f"cannot grow topic {name!r}")

    async def describe_configs(self, topic: str) -> dict[str, tuple[str | None, int]]:
        """Config name -> (value, source) for a topic."""
        response = await self._request(
            DescribeConfigsRequest(
                version=4,
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=TOPIC_RESOURCE, resource_name=topic, configuration_keys=None
                    )
                ],
                include_synonyms=False,
                include_documentation=False,
            )
        )
        result = response.results[0]
        check_answer(result.error_code, result.error_message, f"cannot describe topic {topic!r}")
        return {c.name: (c.value, c.config_source) for c in result.configs}

    async def alter_configs(
        self, topic: str, set_: dict[str, str], delete: list[str] | None = None
    ) -> None:
        entry = IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig
        changes = [entry(name=k, config_operation=OP_SET, value=v) for k, v in set_.items()]
        changes += [entry(name=k, config_operation=OP_DELETE, value=None) for k in delete or []]
        response = await self._request(
            IncrementalAlterConfigsRequest(
                version=1,
                resources=[
                    IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=TOPIC_RESOURCE, resource_name=topic, configs=changes
                    )
                ],
                validate_only=False,
            )
        )
        result = response.responses[0]
        check_answer(result.error_code, result.error_message, f"cannot change topic {topic!r}")

    async def delete_records(self, topic: str, before: dict[int, int]) -> dict[int, int]:
        """Delete records below the given offset per partition; returns new start offsets."""
        response = await self._request(
            DeleteRecordsRequest(
                version=2,
                topics=[
                    DeleteRecordsRequest.DeleteRecordsTopic(
                        name=topic,
                        partitions=[
                            DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                                partition_index=p, offset=o
                            )
                            for p, o in before.items()
                        ],
                    )
                ],
                timeout_ms=30_000,
            )
        )
        out = {}
        for p in response.topics[0].partitions:
            check_answer(
                p.error_code, None, f"cannot delete records of {topic}-{p.partition_index}"
            )
            out[p.partition_index] = p.low_watermark
        return out

    # -- consumer groups -----------------------------------------------------------

    async def list_groups(self) -> list[GroupListing]:
        return await group_admin.list_groups(self.cluster)

    async def describe_group(self, group_id: str) -> GroupDescription:
        return await group_admin.describe_group(self.cluster, group_id)

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        return await group_admin.delete_groups(self.cluster, group_ids)

    async def group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return await group_admin.group_offsets(self.cluster, group_id)

    async def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        await group_admin.alter_group_offsets(self.cluster, group_id, offsets)

    async def describe_cluster(self) -> ClusterDescription:
        """The live brokers (with racks) and the active controller, from Metadata."""
        response = await self._request(metadata_request([]))
        return ClusterDescription(
            response.cluster_id or "",
            response.controller_id,
            [
                BrokerDescription(b.node_id, b.host, b.port, b.rack)
                for b in sorted(response.brokers, key=lambda b: b.node_id)
            ],
        )

    async def describe_log_dirs(self, node_id: int) -> dict[tuple[str, int], int]:
        """Bytes on disk of every partition replica on broker ``node_id``."""
        connection = await self.cluster.connection(node_id)
        response = await connection.request(DescribeLogDirsRequest(version=1, topics=None))
        sizes: dict[tuple[str, int], int] = {}
        for result in response.results:
            for topic in result.topics:
                for p in topic.partitions:
                    sizes[(topic.name, p.partition_index)] = p.partition_size
        return sizes

    # -- the controller's requests ---------------------------------------------------

    async def _to_controller(self, message: Any) -> Any:
        """Send to the active controller; on NOT_CONTROLLER (it moved) look again."""
        for _attempt in range(10):
            controller = (await self.describe_cluster()).controller
            if controller < 0:
                await asyncio.sleep(0.2)
                continue
            connection = await self.cluster.connection(controller)
            response = await connection.request(message)
            if getattr(response, "error_code", 0) != NOT_CONTROLLER:
                return response
            await asyncio.sleep(0.2)
        raise AdminError(NOT_CONTROLLER, "no broker would act as the controller")

    async def elect_leaders(
        self, preferred: bool = True, partitions: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """ElectLeaders: (error code, message) per partition; 0 when leadership moved."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions or []:
            by_topic.setdefault(topic, []).append(index)
        response = await self._to_controller(
            ElectLeadersRequest(
                version=1,
                election_type=0 if preferred else 1,
                topic_partitions=None
                if partitions is None
                else [
                    ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
                timeout_ms=30_000,
            )
        )
        check_answer(response.error_code, None, "cannot elect leaders")
        return {
            (r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in response.replica_election_results
            for p in r.partition_result
        }

    async def alter_partition_reassignments(
        self, targets: dict[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """Start moves (a replica list) or cancel them (None)."""
        by_topic: dict[str, list[Any]] = {}
        for (topic, index), replicas in targets.items():
            by_topic.setdefault(topic, []).append(
                AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                    partition_index=index, replicas=replicas
                )
            )
        response = await self._to_controller(
            AlterPartitionReassignmentsRequest(
                version=0,
                timeout_ms=30_000,
                topics=[
                    AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
            )
        )
        check_answer(response.error_code, response.error_message, "cannot reassign partitions")
        return {
            (t.name, p.partition_index): (p.error_code, p.error_message)
            for t in response.responses
            for p in t.partitions
        }

    async def list_partition_reassignments(
        self,
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """Moves in progress: (replicas, adding, removing) per partition."""
        response = await self._to_controller(
            ListPartitionReassignmentsRequest(version=0, timeout_ms=30_000, topics=None)
        )
        check_answer(response.error_code, response.error_message, "cannot list reassignments")
        return {
            (t.name, p.partition_index): (
                list(p.replicas),
                list(p.adding_replicas),
                list(p.removing_replicas),
            )
            for t in response.topics
            for p in t.partitions
        }

    async def set_replication_throttle(self, bytes_per_second: int) -> None:
        """The cluster-wide replication throttle for moving replicas (0: none)."""
        op, value = (0, str(bytes_per_second)) if bytes_per_second > 0 else (1, None)
        entries = [
            IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
                name=name, config_operation=op, value=value
            )
            for name in ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
        ]
        response = await self._request(
            IncrementalAlterConfigsRequest(
                version=1,
                resources=[
                    IncrementalAlterConfigsRequest.AlterConfigsResource(
                        resource_type=4, resource_name="", configs=entries
                    )
                ],
                validate_only=False,
            )
        )
        result = response.responses[0]
        check_answer(result.error_code, result.error_message, "cannot set the replication throttle")
