"""A broker's local image of the cluster metadata, kept current from the store's events.

Built by one range read and then fed every watched change in revision order, so it is a
faithful copy of the store as of ``revision``. Each broker answers Metadata from it and
reconciles its own partitions against it; the controller plans from it. Values that do
not follow the layout are logged and skipped (the key is treated as absent), never
allowed to crash the broker.

Sans-IO: ``load`` and ``apply`` take entries and events; nothing here talks to a store.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from partita.cluster.kv import Entry, Event
from partita.cluster.layout import (
    BadValueError,
    BrokerRegistration,
    Layout,
    QuotaEntity,
    TopicRecord,
    decode_acl,
    decode_broker,
    decode_broker_configs,
    decode_client_quota,
    decode_controller,
    decode_partition,
    decode_producer_ids,
    decode_scram_credential,
    decode_topic,
)
from partita.cluster.model import PartitionState, TopicState
from partita.security.acl import AclBinding
from partita.security.scram import ScramCredential

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Changes:
    """What one batch of events touched, so that a broker applies only that
    (``local_changes`` turns it into what it means for one broker)."""

    topics: set[str] = field(default_factory=set)  # a record or a partition of it changed
    # Partitions whose state changed, or that appeared (a new topic, added partitions).
    partitions: set[tuple[str, int]] = field(default_factory=set)
    reconfigured: set[str] = field(default_factory=set)  # topics whose configs changed
    deleted_topics: set[str] = field(default_factory=set)
    brokers: bool = False
    controller: bool = False
    acls: bool = False  # a binding was created or deleted
    quotas: bool = False  # a client quota was set or removed

    def merged(self, other: Changes) -> Changes:
        """What this batch and a later one touched together."""
        return Changes(
            self.topics | other.topics,
            self.partitions | other.partitions,
            self.reconfigured | other.reconfigured,
            self.deleted_topics | other.deleted_topics,
            self.brokers or other.brokers,
            self.controller or other.controller,
            self.acls or other.acls,
            self.quotas or other.quotas,
        )

    def __bool__(self) -> bool:
        return bool(self.topics or self.deleted_topics or self.brokers or self.controller)


class ClusterImage:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.revision = 0
        self.cluster_id = ""
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controller_id = -1
        self.controller_epoch = 0  # the controller key's create revision
        self.topics: dict[str, TopicState] = {}
        self.topic_revisions: dict[str, int] = {}
        self.partition_revisions: dict[tuple[uuid.UUID, int], int] = {}
        self.producer_ids_next = 0
        self.producer_ids_revision = 0
        self.broker_configs: dict[str, str] = {}
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = {}
        self.acls: dict[str, AclBinding] = {}  # by key
        self.client_quotas: dict[str, tuple[QuotaEntity, dict[str, float]]] = {}  # by key
        self._records: dict[str, TopicRecord] = {}
        self._partitions: dict[uuid.UUID, dict[int, PartitionState]] = {}
        self._names: dict[uuid.UUID, str] = {}

    # -- feeding -----------------------------------------------------------------

    def load(self, entries: Iterable[Entry], revision: int) -> Changes:
        """Replace everything with a fresh listing (at start, and after a lost watch)."""
        before = {name: topic.topic_id for name, topic in self.topics.items()}
        fresh = ClusterImage(self.layout)
        changes = fresh.apply(Event("put", e) for e in entries)
        # Every field at once: a field added to the image can't be forgotten here.
        vars(self).update(vars(fresh))
        self.revision = revision
        # A name now held by another topic id was deleted and created again meanwhile.
        changes.deleted_topics = {
            name
            for name, topic_id in before.items()
            if name not in self.topics or self.topics[name].topic_id != topic_id
        }
        changes.brokers = changes.controller = changes.acls = changes.quotas = True
        return changes

    def apply(self, events: Iterable[Event]) -> Changes:
        changes = Changes()
        for event in events:
            self.revision = max(self.revision, event.entry.mod_revision)
            try:
                self._apply_one(event, changes)
            except BadValueError as exc:
                log.error(
                    "ignoring a malformed cluster metadata value",
                    extra={"key": event.entry.key, "error": str(exc)},
                )
                # A key we cannot read is treated as absent; one whose very name is
                # malformed cannot even be removed, and is only skipped.
                if event.kind == "put":
                    with contextlib.suppress(BadValueError):
                        self._apply_one(Event("delete", event.entry), changes)
        return changes

    def _apply_one(self, event: Event, changes: Changes) -> None:
        key, raw = event.entry.key, event.entry.value
        put = event.kind == "put"
        layout = self.layout
        if key == layout.cluster:
            self.cluster_id = raw.decode("utf-8", "replace") if put else ""
        elif key == layout.controller:
            changes.controller = True
            self.controller_id = decode_controller(raw) if put else -1
            self.controller_epoch = event.entry.create_revision if put else 0
        elif key == layout.broker_configs:
            self.broker_configs = decode_broker_configs(raw) if put else {}
        elif key == layout.producer_ids:
            self.producer_ids_next = decode_producer_ids(raw) if put else 0
            self.producer_ids_revision = event.entry.mod_revision if put else 0
        elif key.startswith(layout.brokers):
            node = key.removeprefix(layout.brokers)
            if not node.isdigit():
                raise BadValueError(f"broker key {key!r} has no node id")
            changes.brokers = True
            if put:
                self.brokers[int(node)] = decode_broker(int(node), raw, event.entry.create_revision)
            else:
                self.brokers.pop(int(node), None)
        elif key.startswith(layout.topics):
            self._apply_topic(key.removeprefix(layout.topics), event, changes)
        elif key.startswith(layout.partitions):
            self._apply_partition(event, changes)
        elif key.startswith(layout.scram):
            mechanism, user = layout.parse_scram_key(key)
            if put:
                self.scram_credentials[(mechanism, user)] = decode_scram_credential(mechanism, raw)
            else:
                self.scram_credentials.pop((mechanism, user), None)
        elif key.startswith(layout.quotas):
            changes.quotas = True
            if put:
                self.client_quotas[key] = decode_client_quota(raw)
            else:
                self.client_quotas.pop(key, None)
        elif key.startswith(layout.acls):
            changes.acls = True
            if put:
                self.acls[key] = decode_acl(raw)
            else:
                self.acls.pop(key, None)

    def _apply_topic(self, name: str, event: Event, changes: Changes) -> None:
        old = self._records.pop(name, None)
        if old is not None:
            self._names.pop(old.topic_id, None)
            self.topics.pop(name, None)
            self.topic_revisions.pop(name, None)
        if event.kind == "delete":
            changes.deleted_topics.add(name)
            changes.topics.discard(name)
            changes.reconfigured.discard(name)
            changes.partitions = {tp for tp in changes.partitions if tp[0] != name}
            return
        record = decode_topic(name, event.entry.value)
        if old is not None and old.topic_id != record.topic_id:
            changes.deleted_topics.add(name)
        self._records[name] = record
        self._names[record.topic_id] = name
        self.topic_revisions[name] = event.entry.mod_revision
        partitions = self._partitions.get(record.topic_id, {})
        self.topics[name] = TopicState(
            name,
            record.topic_id,
            {p: s for p, s in partitions.items() if p < record.partitions},
            dict(record.configs),
        )
        changes.topics.add(name)
        if old is None or old.topic_id != record.topic_id or old.partitions != record.partitions:
            changes.partitions.update((name, p) for p in self.topics[name].partitions)
        if old is None or old.topic_id != record.topic_id or old.configs != record.configs:
            changes.reconfigured.add(name)

    def _apply_partition(self, event: Event, changes: Changes) -> None:
        topic_id, index = self.layout.parse_partition_key(event.entry.key)
        states = self._partitions.setdefault(topic_id, {})
        if event.kind == "delete":
            states.pop(index, None)
            self.partition_revisions.pop((topic_id, index), None)
            if not states:
                del self._partitions[topic_id]
        else:
            states[index] = decode_partition(event.entry.value)
            self.partition_revisions[(topic_id, index)] = event.entry.mod_revision
        name = self._names.get(topic_id)
        if name is None:
            return  # a topic being created, or the leftovers of a failed create
        topic = self.topics[name]
        if event.kind == "delete":
            topic.partitions.pop(index, None)
        elif index < self._records[name].partitions:
            topic.partitions[index] = states[index]
        else:
            return  # written before the topic's record counts it: visible with the record
        changes.topics.add(name)
        changes.partitions.add((name, index))

    # -- questions ---------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        return self._names.get(topic_id)

    def partition_count(self, name: str) -> int:
        record = self._records.get(name)
        return record.partitions if record else 0

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return dict(self.brokers)

    def electable(self) -> set[int]:
        """Brokers that may lead: registered, recovered, and not shutting down."""
        return {b for b, reg in self.brokers.items() if reg.electable}

    def offline_replicas(self) -> dict[tuple[uuid.UUID, int], set[int]]:
        """(topic id, partition) -> the brokers that report their replica of it offline."""
        offline: dict[tuple[uuid.UUID, int], set[int]] = {}
        for node_id, registration in self.brokers.items():
            for replica in registration.offline:
                offline.setdefault(replica, set()).add(node_id)
        return offline
