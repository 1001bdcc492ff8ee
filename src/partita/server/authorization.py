"""Who may do what: the one table of which ACL each API needs (Kafka's checks in
``KafkaApis``/``AuthHelper``), applied where every request passes.

``network`` builds one ``Access`` per request from the API's ``Rule``: a refusal of the
whole request (a group API on a group the principal may not READ, a cluster API without
the cluster operation) is answered there, with the API's top-level error code, before any
handler runs. What a request names item by item (the topics of a Produce or a Fetch, the
resources of DescribeConfigs) the handler asks ``context.access`` about, item by item,
and reports in that item's error slot: the handler never names an operation, so which
operation an API needs is written only here.

With no authorizer configured (``authorizer.class.name`` empty, Kafka's default) every
request gets ``ALLOW_ALL``, which answers without looking anything up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from partita.cluster.image import Changes
from partita.cluster.store import MetadataStore
from partita.errors import InvalidConfigurationError
from partita.protocol.api import ApiKey
from partita.security.acl import Operation
from partita.security.authorizer import Authorizer
from partita.server.access import ALLOW_ALL, Access, Rule
from partita.server.config import BrokerConfig
from partita.server.request_context import fetch_replica_id

# Kafka's authorizer classes; partita's ACL authorizer stands in for each.
AUTHORIZER_CLASSES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "partita",
    }
)


def build_authorizer(config: BrokerConfig) -> Authorizer | None:
    name = config.get("authorizer.class.name").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise InvalidConfigurationError(
            f"authorizer.class.name={name!r} is not an authorizer partita has; use "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer (ACLs) or leave it empty"
        )
    super_users = [u.strip() for u in config.get("super.users").split(";") if u.strip()]
    for user in super_users:
        if ":" not in user:
            raise InvalidConfigurationError(
                f"super.users entry {user!r} is not a principal (User:NAME)"
            )
    return Authorizer(super_users, config.get_bool("allow.everyone.if.no.acl.found"))


def _group_id(operation: Operation) -> Rule:
    """A group API naming one group, refused whole when the group is."""
    return Rule(groups=operation, refuse=lambda access, request: access.group(request.group_id))


def _cluster(operation: Operation) -> Rule:
    """A cluster API, refused whole without the cluster operation."""
    return Rule(cluster=operation, refuse=lambda access, _request: access.cluster())


def _init_producer_id(access: Access, request: Any) -> int:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        return access.transactional_id(transactional_id)
    return access.idempotent_write()


_FOLLOWER = Rule(topics_via_cluster=Operation.CLUSTER_ACTION)
_CONSUMER_FETCH = Rule(topics=Operation.READ)

# API -> its rule, or a function of (request, version) for the APIs that brokers and
# clients both send (a follower's fetch needs CLUSTER_ACTION, a consumer's READ).
RULES: dict[ApiKey, Rule | Callable[[Any, int], Rule]] = {
    ApiKey.API_VERSIONS: Rule(),
    ApiKey.SASL_HANDSHAKE: Rule(),
    ApiKey.SASL_AUTHENTICATE: Rule(),
    # DESCRIBE on the cluster only decides whether its authorized operations are told.
    ApiKey.METADATA: Rule(topics=Operation.DESCRIBE, cluster=Operation.DESCRIBE),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Rule(topics=Operation.DESCRIBE),
    # Never refused (Kafka Connect finds the cluster id with it); without DESCRIBE on the
    # cluster its authorized operations are 0.
    ApiKey.DESCRIBE_CLUSTER: Rule(cluster=Operation.DESCRIBE),
    # A transactional produce also needs WRITE on its transactional id (the handler).
    ApiKey.PRODUCE: Rule(topics=Operation.WRITE, transactional_ids=Operation.WRITE),
    ApiKey.FETCH: lambda request, version: (
        _FOLLOWER if fetch_replica_id(request, version) >= 0 else _CONSUMER_FETCH
    ),
    ApiKey.LIST_OFFSETS: Rule(topics=Operation.DESCRIBE),
    # A follower's CLUSTER_ACTION or the topic's DESCRIBE, whoever asks (as Kafka).
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rule(
        topics=Operation.DESCRIBE, topics_via_cluster=Operation.CLUSTER_ACTION
    ),
    ApiKey.DELETE_RECORDS: Rule(topics=Operation.DELETE),
    ApiKey.CREATE_TOPICS: Rule(topics=Operation.CREATE, topics_via_cluster=Operation.CREATE),
    ApiKey.DELETE_TOPICS: Rule(topics=Operation.DELETE, topics_via_cluster=Operation.DELETE),
    ApiKey.CREATE_PARTITIONS: Rule(topics=Operation.ALTER),
    ApiKey.DESCRIBE_CONFIGS: Rule(
        topics=Operation.DESCRIBE_CONFIGS, cluster=Operation.DESCRIBE_CONFIGS
    ),
    ApiKey.ALTER_CONFIGS: Rule(topics=Operation.ALTER_CONFIGS, cluster=Operation.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Rule(
        topics=Operation.ALTER_CONFIGS, cluster=Operation.ALTER_CONFIGS
    ),
    ApiKey.INIT_PRODUCER_ID: Rule(
        cluster=Operation.IDEMPOTENT_WRITE,
        transactional_ids=Operation.WRITE,
        refuse=_init_producer_id,
    ),
    # Versions 1-2 have no top-level error: the handler answers with no directories.
    ApiKey.DESCRIBE_LOG_DIRS: Rule(cluster=Operation.DESCRIBE),
    # Version 0 has no top-level error: the handler refuses partition by partition.
    ApiKey.ELECT_LEADERS: Rule(cluster=Operation.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Operation.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Operation.DESCRIBE),
    ApiKey.FIND_COORDINATOR: Rule(groups=Operation.DESCRIBE, transactional_ids=Operation.DESCRIBE),
    ApiKey.JOIN_GROUP: _group_id(Operation.READ),
    ApiKey.SYNC_GROUP: _group_id(Operation.READ),
    ApiKey.HEARTBEAT: _group_id(Operation.READ),
    ApiKey.LEAVE_GROUP: _group_id(Operation.READ),
    # No top-level error: every partition carries GROUP_AUTHORIZATION_FAILED instead.
    ApiKey.OFFSET_COMMIT: Rule(groups=Operation.READ, topics=Operation.READ),
    ApiKey.OFFSET_FETCH: Rule(groups=Operation.DESCRIBE, topics=Operation.DESCRIBE),
    # Every group for DESCRIBE on the cluster, else those the principal may DESCRIBE.
    ApiKey.LIST_GROUPS: Rule(cluster=Operation.DESCRIBE, groups=Operation.DESCRIBE),
    ApiKey.DESCRIBE_GROUPS: Rule(groups=Operation.DESCRIBE),
    ApiKey.DELETE_GROUPS: Rule(groups=Operation.DELETE),
    ApiKey.OFFSET_DELETE: Rule(
        groups=Operation.DELETE,
        topics=Operation.READ,
        refuse=lambda access, request: access.group(request.group_id),
    ),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Operation.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Rule(cluster=Operation.ALTER),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Operation.DESCRIBE_CONFIGS),
    # No top-level error: every entry carries the refusal.
    ApiKey.ALTER_CLIENT_QUOTAS: Rule(cluster=Operation.ALTER_CONFIGS),
    ApiKey.DESCRIBE_ACLS: _cluster(Operation.DESCRIBE),
    ApiKey.CREATE_ACLS: Rule(cluster=Operation.ALTER),
    ApiKey.DELETE_ACLS: Rule(cluster=Operation.ALTER),
    # v0-3 have no top-level error: the handler answers every partition.
    ApiKey.ADD_PARTITIONS_TO_TXN: Rule(topics=Operation.WRITE, transactional_ids=Operation.WRITE),
    ApiKey.ADD_OFFSETS_TO_TXN: Rule(
        groups=Operation.READ,
        transactional_ids=Operation.WRITE,
        refuse=lambda access, request: access.transactional_id(request.transactional_id),
    ),
    ApiKey.END_TXN: Rule(
        transactional_ids=Operation.WRITE,
        refuse=lambda access, request: access.transactional_id(request.transactional_id),
    ),
    # Brokers only; no top-level error: the handler answers every partition.
    ApiKey.WRITE_TXN_MARKERS: Rule(cluster=Operation.CLUSTER_ACTION),
    # The handlers answer per id, per partition; ListTransactions lists what may be seen.
    ApiKey.DESCRIBE_TRANSACTIONS: Rule(
        transactional_ids=Operation.DESCRIBE, topics=Operation.DESCRIBE
    ),
    ApiKey.LIST_TRANSACTIONS: Rule(transactional_ids=Operation.DESCRIBE),
    ApiKey.DESCRIBE_PRODUCERS: Rule(topics=Operation.READ),
    # No top-level error: the handler refuses every partition.
    ApiKey.TXN_OFFSET_COMMIT: Rule(
        groups=Operation.READ, topics=Operation.READ, transactional_ids=Operation.WRITE
    ),
}


class Authorization:
    """The broker's authorizer (None: off), kept current with the cluster's ACLs (the
    metadata image's, reloaded whenever a binding is created or deleted), and the
    per-request ``Access`` built from it."""

    def __init__(self, authorizer: Authorizer | None, store: MetadataStore) -> None:
        self.authorizer = authorizer
        self.store = store
        if authorizer is not None:
            store.subscribe(self._changed)

    def _changed(self, changes: Changes) -> None:
        if changes.acls and self.authorizer is not None:
            self.authorizer.load(self.store.acls())

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def access(self, api: ApiKey, request: Any, version: int, principal: str, host: str) -> Access:
        if self.authorizer is None:
            return ALLOW_ALL
        rule = RULES[api]
        if not isinstance(rule, Rule):
            rule = rule(request, version)
        return Access(self.authorizer, principal, host, rule)
