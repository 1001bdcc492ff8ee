"""What the broker asks of its metadata store, whichever backend runs.

One implementation serves every broker: ``ClusterMetadataStore``, over etcd for a
cluster and over a file-backed KV of the data directory for a broker alone, so one
decoder checks every value and one image holds the state. The rest of the broker reads
the image (``topics``, ``brokers()``, ``controller_id``) and makes changes through the
async writes; it learns of every change, its own included, through the listeners it
subscribed. Unit tests may run it over the in-memory KV.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Protocol

from partita.cluster.image import Changes
from partita.cluster.layout import QuotaEntity
from partita.cluster.model import BrokerInfo, PartitionState, TopicState
from partita.security.acl import AclBinding
from partita.security.scram import ScramCredential

Listener = Callable[[Changes], None]


class MetadataStore(Protocol):
    @property
    def topics(self) -> dict[str, TopicState]: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, if it exists."""
        ...

    def brokers(self) -> list[BrokerInfo]:
        """The brokers clients may use, in id order."""
        ...

    def placement_brokers(self) -> dict[int, str | None]:
        """Brokers new replicas may be placed on, with their racks."""
        ...

    def isr_eligible(self, node_id: int) -> bool:
        """Whether a broker's replicas may join an ISR now: registered and running (not
        starting, not shutting down), as the controller requires of ISR members."""
        ...

    def offline_replicas(self) -> dict[tuple[uuid.UUID, int], set[int]]:
        """(topic id, partition) -> the brokers that report their replica of it offline."""
        ...

    def subscribe(self, listener: Listener) -> None: ...

    async def create_topic(self, state: TopicState) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def add_partitions(self, name: str, new: dict[int, PartitionState]) -> None: ...

    async def set_configs(self, name: str, configs: dict[str, str]) -> None: ...

    async def allocate_producer_id(self) -> int: ...

    @property
    def dynamic_broker_configs(self) -> dict[str, str]:
        """Cluster-wide broker settings changed at run time (replication throttles)."""
        ...

    async def set_dynamic_broker_configs(self, configs: dict[str, str]) -> None: ...

    async def alter_isr(self, topic: str, index: int, leader_epoch: int, isr: list[int]) -> bool:
        """A leader's compare-and-swap of its partition's ISR; False if the state moved."""
        ...

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None: ...

    def scram_users(self) -> dict[str, list[ScramCredential]]:
        """User -> their SCRAM credentials (DescribeUserScramCredentials)."""
        ...

    async def alter_scram_credentials(
        self, upsert: list[tuple[str, ScramCredential]], delete: list[tuple[str, str]]
    ) -> None:
        """Write (user, credential)s and remove (mechanism, user)s, in one transaction."""
        ...

    def acls(self) -> list[AclBinding]:
        """Every ACL binding of the cluster."""
        ...

    async def alter_acls(self, create: list[AclBinding], delete: list[AclBinding]) -> None:
        """Store and remove bindings; visible in this broker's image on return."""
        ...

    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        """Every client-quota entity and its quotas (kafka-configs --entity-type users)."""
        ...

    async def alter_client_quotas(self, quotas: dict[QuotaEntity, dict[str, float]]) -> None:
        """Set each entity's quotas (an empty dict removes it); in the image on return."""
        ...

    async def report_offline_replicas(self, replicas: frozenset[tuple[uuid.UUID, int]]) -> bool:
        """Publish the (topic id, partition) replicas this broker can no longer serve;
        False when that is already what was published."""
        ...
