"""One request's authorization: what its principal may do to the resources it names,
under its API's ``Rule`` (the table is ``server/authorization.py``). Handlers ask it item
by item and report the code it answers; they never name an operation."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from partita.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from partita.security.acl import CLUSTER_NAME, OPERATIONS, Operation, ResourceType
from partita.security.authorizer import Authorizer

log = logging.getLogger(__name__)

_ERRORS: dict[int, type[KafkaError]] = {
    error.code: error
    for error in (
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
    )
}
TOPIC_DENIED = TopicAuthorizationFailedError.code
GROUP_DENIED = GroupAuthorizationFailedError.code
CLUSTER_DENIED = ClusterAuthorizationFailedError.code
TRANSACTIONAL_ID_DENIED = TransactionalIdAuthorizationFailedError.code


@dataclass(frozen=True, slots=True)
class Rule:
    """What one API needs. Each field is the operation asked of that kind of resource
    when the handler asks about one; None: the API names none of that kind (asking
    refuses, so that a handler can never be more permissive than its rule)."""

    topics: Operation | None = None
    groups: Operation | None = None
    cluster: Operation | None = None
    transactional_ids: Operation | None = None
    # A topic is also allowed when the cluster allows this (CreateTopics' CREATE on the
    # cluster; a follower's CLUSTER_ACTION instead of anything on the topic).
    topics_via_cluster: Operation | None = None
    topic_code: int = TOPIC_DENIED
    # A refusal of the whole request, answered with the response's top-level error code;
    # only for APIs whose every supported version has one (checked by a unit test).
    refuse: Callable[[Access, Any], int] | None = None


class Access:
    """One request's authorization: the principal, its address and its API's rule.
    Methods answer 0 (allowed) or the Kafka error code to report."""

    __slots__ = ("authorizer", "host", "principal", "rule")

    def __init__(self, authorizer: Authorizer | None, principal: str, host: str, rule: Rule):
        self.authorizer = authorizer
        self.principal = principal
        self.host = host
        self.rule = rule

    def _allows(
        self,
        operation: Operation | None,
        resource: ResourceType,
        name: str,
        log_denied: bool = True,
    ) -> bool:
        if self.authorizer is None:
            return True
        if operation is not None and self.authorizer.authorize(
            self.principal, self.host, operation, resource, name
        ):
            return True
        if log_denied:
            # Kafka's authorizer log line: who, from where, what, on which resource. Not
            # for the checks that only filter what a listing shows (Kafka's
            # logIfDenied=false), or a restricted client's every refresh would log.
            log.info(
                "authorization denied",
                extra={
                    "principal": self.principal,
                    "host": self.host,
                    "operation": operation.name if operation is not None else "NONE",
                    "resource": f"{resource.name}:{name[:255]}",
                },
            )
        return False

    def topic(self, name: str, *, log_denied: bool = True) -> int:
        if self.authorizer is None:
            return 0
        rule = self.rule
        if rule.topics_via_cluster is not None and self._allows(
            rule.topics_via_cluster, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False
        ):
            return 0
        allowed = self._allows(rule.topics, ResourceType.TOPIC, name, log_denied)
        return 0 if allowed else rule.topic_code

    def visible_topic(self, name: str) -> bool:
        """Whether a listing of every topic shows this one (no log line if not)."""
        return not self.topic(name, log_denied=False)

    def require_topic(self, name: str) -> None:
        """``topic`` for handlers whose per-partition answers come from a KafkaError."""
        code = self.topic(name)
        if code:
            raise _ERRORS[code](f"not authorized to access topic {name[:255]}")

    def group(self, name: str | None, *, log_denied: bool = True) -> int:
        # kafka-python decodes a null string as None, even where the schema forbids it.
        allowed = self._allows(self.rule.groups, ResourceType.GROUP, name or "", log_denied)
        return 0 if allowed else GROUP_DENIED

    def cluster(self, *, log_denied: bool = True) -> int:
        allowed = self._allows(self.rule.cluster, ResourceType.CLUSTER, CLUSTER_NAME, log_denied)
        return 0 if allowed else CLUSTER_DENIED

    def require_cluster(self) -> None:
        code = self.cluster()
        if code:
            raise _ERRORS[code]("not authorized to access the cluster")

    def transactional_id(self, name: str, *, log_denied: bool = True) -> int:
        allowed = self._allows(
            self.rule.transactional_ids, ResourceType.TRANSACTIONAL_ID, name, log_denied
        )
        return 0 if allowed else TRANSACTIONAL_ID_DENIED

    def may_create_topic(self, name: str) -> bool:
        """Metadata's auto-creation: CREATE on the cluster or on the topic (Kafka's)."""
        return self._allows(
            Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False
        ) or self._allows(Operation.CREATE, ResourceType.TOPIC, name)

    def idempotent_write(self) -> int:
        """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or
        WRITE on some topic (KIP-679's relaxation, as Kafka 3+ does)."""
        if self.authorizer is None or self._allows(
            Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False
        ):
            return 0
        if self.authorizer.authorize_any(
            self.principal, self.host, Operation.WRITE, ResourceType.TOPIC
        ):
            return 0
        return CLUSTER_DENIED

    def authorized_operations(self, resource: ResourceType, name: str) -> set[int]:
        """The bitfield Metadata, DescribeGroups and DescribeCluster report when asked.
        For the cluster, 0 unless the principal may DESCRIBE it (as Kafka)."""
        if self.authorizer is None:
            return {int(op) for op in OPERATIONS.get(resource, ())}
        if resource == ResourceType.CLUSTER and not self._allows(
            Operation.DESCRIBE, resource, name, log_denied=False
        ):
            return set()
        return self.authorizer.authorized_operations(self.principal, self.host, resource, name)


ALLOW_ALL = Access(None, "", "", Rule())
