"""A broker applies only what a batch of metadata changes means for it (Kafka's
``TopicsDelta.localChanges``): sans-IO, over a real image fed the layout's values.

- A new topic: the partitions this broker leads and those it follows, nothing else.
- One partition's leader moves: that partition alone, from follows to leads.
- A reassignment that takes a replica away: lost here, untouched elsewhere.
- A config change: the topic reconfigured, no partition's state re-applied.
- A deleted topic: deleted, none of its partitions applied.
"""

from __future__ import annotations

import itertools
import uuid

from partita.cluster.image import ClusterImage
from partita.cluster.kv import Entry, Event
from partita.cluster.layout import Layout, TopicRecord, encode_partition, encode_topic
from partita.cluster.local_changes import everything, local_changes
from partita.cluster.model import PartitionState

ME = 1
LAYOUT = Layout("partita")
_revisions = itertools.count(10)


def _put(key: str, value: bytes) -> Event:
    revision = next(_revisions)
    return Event("put", Entry(key, value, revision, revision))


def _delete(key: str) -> Event:
    return Event("delete", Entry(key, b"", 0, next(_revisions)))


def _topic(name: str, topic_id: uuid.UUID, count: int, configs: dict[str, str]) -> Event:
    return _put(LAYOUT.topic(name), encode_topic(TopicRecord(name, topic_id, count, configs)))


def _partition(topic_id: uuid.UUID, index: int, state: PartitionState) -> Event:
    return _put(LAYOUT.partition(topic_id, index), encode_partition(state))


def _orders(image: ClusterImage) -> uuid.UUID:
    topic_id = uuid.uuid4()
    image.apply(
        [
            _partition(topic_id, 0, PartitionState([1, 2], 1, 0, [1, 2])),
            _partition(topic_id, 1, PartitionState([2, 1], 2, 0, [2, 1])),
            _partition(topic_id, 2, PartitionState([2, 3], 2, 0, [2, 3])),
            _topic("orders", topic_id, 3, {}),
        ]
    )
    return topic_id


def test_a_new_topic_is_what_this_broker_leads_and_follows() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = uuid.uuid4()
    changes = image.apply(
        [
            _partition(topic_id, 0, PartitionState([1, 2], 1, 0, [1, 2])),
            _partition(topic_id, 1, PartitionState([2, 1], 2, 0, [2, 1])),
            _partition(topic_id, 2, PartitionState([2, 3], 2, 0, [2, 3])),
            _topic("orders", topic_id, 3, {}),
        ]
    )
    local = local_changes(changes, image.topics, ME, held=set())
    assert set(local.leads) == {("orders", 0)}
    assert set(local.follows) == {("orders", 1)}
    assert not local.lost and local.reconfigured == {"orders"}


def test_a_leader_change_is_that_partition_alone() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    changes = image.apply([_partition(topic_id, 1, PartitionState([2, 1], 1, 1, [1]))])
    local = local_changes(changes, image.topics, ME, held={("orders", 0), ("orders", 1)})
    assert local.leads == {("orders", 1): PartitionState([2, 1], 1, 1, [1])}
    assert not local.follows and not local.lost and not local.reconfigured


def test_a_replica_moved_away_is_lost_here() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    changes = image.apply([_partition(topic_id, 0, PartitionState([2, 3], 2, 1, [2, 3]))])
    local = local_changes(changes, image.topics, ME, held={("orders", 0), ("orders", 1)})
    assert local.lost == {("orders", 0)}
    assert not local.leads and not local.follows
    # Another broker holding nothing of it has nothing to do.
    assert not local_changes(changes, image.topics, 4, held=set()).lost


def test_a_config_change_reapplies_no_partition() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    changes = image.apply([_topic("orders", topic_id, 3, {"retention.ms": "1000"})])
    local = local_changes(changes, image.topics, ME, held={("orders", 0), ("orders", 1)})
    assert local.reconfigured == {"orders"}
    assert not local.leads and not local.follows and not local.lost


def test_added_partitions_appear_with_the_record_that_counts_them() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    early = image.apply([_partition(topic_id, 3, PartitionState([1], 1, 0, [1]))])
    assert not local_changes(early, image.topics, ME, held=set()).leads  # not counted yet
    grown = image.apply([_topic("orders", topic_id, 4, {})])
    assert ("orders", 3) in local_changes(grown, image.topics, ME, held=set()).leads


def test_a_deleted_topic_is_deleted_and_nothing_of_it_applied() -> None:
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    changes = image.apply([_delete(LAYOUT.topic("orders")), _delete(LAYOUT.partition(topic_id, 0))])
    local = local_changes(changes, image.topics, ME, held={("orders", 0), ("orders", 1)})
    assert local.deleted_topics == {"orders"}
    assert not local.leads and not local.follows


def test_everything_names_every_partition_once_logs_are_up() -> None:
    image = ClusterImage(LAYOUT)
    _orders(image)
    local = local_changes(everything(image.topics), image.topics, ME, held=set())
    assert set(local.leads) | set(local.follows) == {("orders", 0), ("orders", 1)}


def test_an_unreadable_partition_value_never_deletes_a_replica_here() -> None:
    """The image treats a value it cannot decode as absent; the replica's data stays."""
    image = ClusterImage(LAYOUT)
    topic_id = _orders(image)
    changes = image.apply([_put(LAYOUT.partition(topic_id, 0), b'{"replicas": "nonsense"}')])
    local = local_changes(changes, image.topics, ME, held={("orders", 0), ("orders", 1)})
    assert not local.lost and not local.leads and not local.follows


def test_a_relist_sees_a_topic_deleted_and_created_again_under_its_name() -> None:
    image = ClusterImage(LAYOUT)
    _orders(image)
    new_id = uuid.uuid4()
    fresh = [
        _partition(new_id, 0, PartitionState([1], 1, 0, [1])).entry,
        _topic("orders", new_id, 1, {}).entry,
    ]
    changes = image.load(fresh, revision=next(_revisions))
    assert changes.deleted_topics == {"orders"}
    local = local_changes(changes, image.topics, ME, held={("orders", 0)})
    assert local.deleted_topics == {"orders"} and set(local.leads) == {("orders", 0)}


def test_a_malformed_key_is_skipped_not_fatal() -> None:
    """A key whose very name cannot be read (here a SCRAM key naming no mechanism) is
    skipped; the image goes on with the events after it."""
    image = ClusterImage(LAYOUT)
    topic_id = uuid.uuid4()
    changes = image.apply(
        [
            _put(LAYOUT.scram + "NOT-A-MECHANISM/alice", b"{}"),
            _partition(topic_id, 0, PartitionState([1], 1, 0, [1])),
            _topic("orders", topic_id, 1, {}),
        ]
    )
    assert changes.partitions == {("orders", 0)} and not image.scram_credentials
