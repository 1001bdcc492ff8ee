"""Kafka's access control list model: who (principal, host) may or may not (permission)
do what (operation) to which resources (type, name, pattern), and the filters that
DescribeAcls and DeleteAcls select bindings with.

The numeric codes are the wire's (``AclOperation``, ``ResourceType``, ``PatternType``,
``AclPermissionType`` in Kafka's clients). Sans-IO: nothing here reads a store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # a LITERAL resource name, a principal's name or a host matching any
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type
    MATCH = 2  # filters only: every binding that would apply to the name
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these also allows DESCRIBE (DESCRIBE_CONFIGS for the config ones),
# as in Kafka: a consumer allowed to READ a topic may see it in Metadata.
IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}

# The operations each resource type has (Kafka's ResourceType/AclOperation pairs), for
# the authorized-operations bitfields of Metadata, DescribeGroups and DescribeCluster.
OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.ALTER,
        Operation.DESCRIBE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}


class InvalidAclError(ValueError):
    """A binding that cannot be stored (Kafka answers INVALID_REQUEST)."""


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """This binding, or InvalidAclError saying what Kafka would refuse."""
        concrete = (
            ResourceType.TOPIC,
            ResourceType.GROUP,
            ResourceType.CLUSTER,
            ResourceType.TRANSACTIONAL_ID,
            ResourceType.DELEGATION_TOKEN,
            ResourceType.USER,
        )
        if self.resource_type not in concrete:
            raise InvalidAclError(f"resource type {self.resource_type.name} cannot be stored")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"pattern type {self.pattern_type.name} cannot be stored")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidAclError(f"operation {self.operation.name} cannot be stored")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidAclError(f"permission {self.permission.name} cannot be stored")
        if not self.resource_name:
            raise InvalidAclError("the resource name is empty")
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            raise InvalidAclError(f"the cluster resource is named {CLUSTER_NAME!r}")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAclError(f"principal {self.principal!r} is not TYPE:NAME")
        if not self.host:
            raise InvalidAclError("the host is empty (use '*' for any host)")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            # Kafka refuses it too: a prefixed "*" matches names starting with a star.
            raise InvalidAclError("a PREFIXED pattern cannot be '*'; use LITERAL '*'")
        return self


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' selection: None or ANY fields match anything; MATCH
    selects the bindings that apply to ``resource_name`` (literal, wildcard, prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for field, value in (
            ("resource type", self.resource_type),
            ("pattern type", self.pattern_type),
            ("operation", self.operation),
            ("permission", self.permission),
        ):
            if value == 0:
                raise InvalidAclError(f"the filter's {field} is UNKNOWN")
        return self

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if not self._matches_pattern(binding):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (Operation.ANY, binding.operation):
            return False
        return self.permission in (Permission.ANY, binding.permission)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == PatternType.MATCH:
            if name is None:
                return True
            if binding.pattern_type == PatternType.PREFIXED:
                return name.startswith(binding.resource_name)
            return binding.resource_name in (name, WILDCARD)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return name is None or name == binding.resource_name
