"""What a batch of metadata changes means for one broker (Kafka's
``TopicsDelta.localChanges``): the partitions it now leads, those it follows, those it
held and lost, the topics deleted and the topics reconfigured -- so that the broker
applies only these, not whole topics.

Sans-IO: a function of the image's ``Changes``, the topics as the image has them after
the changes, the broker's id and the partitions it holds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from partita.cluster.image import Changes
from partita.cluster.model import PartitionState, TopicState

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class LocalChanges:
    deleted_topics: set[str] = field(default_factory=set)
    leads: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    follows: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    # Held here, and the partition's state names other replicas (a reassignment moved it).
    lost: set[TopicPartition] = field(default_factory=set)
    reconfigured: set[str] = field(default_factory=set)


def local_changes(
    changes: Changes,
    topics: Mapping[str, TopicState],
    node_id: int,
    held: Collection[TopicPartition],
) -> LocalChanges:
    local = LocalChanges(deleted_topics=set(changes.deleted_topics))
    for tp in changes.partitions:
        topic = topics.get(tp[0])
        state = topic.partitions.get(tp[1]) if topic is not None else None
        if state is None:
            # Unreadable (the image skipped a malformed value) or going with its topic:
            # never a reason to delete a replica's data here.
            continue
        if node_id in state.replicas:
            (local.leads if state.leader == node_id else local.follows)[tp] = state
        elif tp in held:
            local.lost.add(tp)
    local.reconfigured = {name for name in changes.reconfigured if name in topics}
    return local


def everything(topics: Mapping[str, TopicState]) -> Changes:
    """Changes naming every partition: what a broker applies once its logs are up."""
    return Changes(
        topics=set(topics),
        partitions={(name, p) for name, t in topics.items() for p in t.partitions},
        reconfigured=set(topics),
    )
