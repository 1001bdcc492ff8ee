"""The cluster metadata model: topics, their partitions and where each replica lives."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class PartitionState:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    # Bumped by every change (leader, ISR or replicas), as Kafka's partition epoch is;
    # the leader epoch moves only when the leader does.
    partition_epoch: int = 0
    # A reassignment in progress (KIP-455): ``replicas`` is then the target plus the
    # replicas leaving; ``adding`` catch up as followers, ``removing`` go once they have.
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing]

    @property
    def original_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.adding]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "replicas": self.replicas,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "isr": self.isr,
            "partition_epoch": self.partition_epoch,
        }
        if self.reassigning:
            out["adding"] = self.adding
            out["removing"] = self.removing
        return out


@dataclass(slots=True)
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str  # the inter-broker listener's address
    port: int
    rack: str | None = None
    # Every listener's advertised address: (listener name, host, port).
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where a client of ``listener`` reaches this broker (Metadata answers with the
        listener the request came in on); None if it has no such listener. A registration
        without endpoints has one listener, at host:port."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


def valid_topic_name(name: str) -> str | None:
    """Kafka's rules; returns the reason a name is invalid, or None."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > 249:
        return "topic name is longer than 249 characters"
    allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    if not set(name) <= allowed:
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'"
    return None
