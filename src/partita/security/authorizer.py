"""Kafka's ACL authorization (``StandardAuthorizer``), sans-IO: given the bindings, may a
principal at a host perform an operation on a resource?

The rules, in Kafka's order:
1. a super user may do anything;
2. the bindings that apply to the resource are the literal ones on its name, the literal
   wildcard ``*``, and the prefixed ones on any prefix of its name; if there are none,
   ``allow.everyone.if.no.acl.found`` decides;
3. a DENY for the principal (or ``User:*``), the host (or ``*``) and the operation (or
   ALL) refuses, whatever allows;
4. otherwise an ALLOW for the operation, for ALL, or for an operation implying it (READ,
   WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. nothing else does.

Finding a resource's bindings costs a few dictionary probes whatever the number of ACLs:
literal names are keys, and prefixed bindings are probed with the name's prefixes of the
lengths that some prefixed binding has (a hash-probed trie, not a scan). Answers are
cached per (principal, host, operation, resource) until the bindings change, so the
produce and fetch paths pay one dictionary lookup per topic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from partita.security.acl import (
    IMPLIES,
    OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

_CACHE_LIMIT = 100_000  # answers kept before the cache starts over
_CACHED_NAME_LIMIT = 255
Key = tuple[str, str, Operation, ResourceType, str]


class _TypeIndex:
    """The bindings of one resource type."""

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = defaultdict(list)
        self.prefixed: dict[str, list[AclBinding]] = defaultdict(list)
        self.prefix_lengths: list[int] = []

    def add(self, binding: AclBinding) -> None:
        if binding.pattern_type == PatternType.PREFIXED:
            self.prefixed[binding.resource_name].append(binding)
        else:
            self.literal[binding.resource_name].append(binding)

    def seal(self) -> None:
        self.prefix_lengths = sorted({len(prefix) for prefix in self.prefixed})

    def applying_to(self, name: str) -> list[AclBinding]:
        found: list[AclBinding] = []
        literal = self.literal
        if name in literal:
            found += literal[name]
        if WILDCARD in literal:
            found += literal[WILDCARD]
        prefixed = self.prefixed
        for length in self.prefix_lengths:
            if length > len(name):
                break
            bindings = prefixed.get(name[:length])
            if bindings:
                found += bindings
        return found


class Authorizer:
    def __init__(
        self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._cache: dict[Key, bool] = {}
        self.count = 0

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace every binding (the metadata image's, after a change)."""
        index: dict[ResourceType, _TypeIndex] = defaultdict(_TypeIndex)
        count = 0
        for binding in bindings:
            index[binding.resource_type].add(binding)
            count += 1
        for type_index in index.values():
            type_index.seal()
        self._index, self.count = dict(index), count
        self._cache = {}

    def authorize(
        self, principal: str, host: str, operation: Operation, resource: ResourceType, name: str
    ) -> bool:
        key = (principal, host, operation, resource, name)
        answer = self._cache.get(key)
        if answer is None:
            answer = self._decide(principal, host, operation, resource, name)
            # A name no real resource has (longer than any topic name) is not kept: a
            # client sending megabyte names must not fill the broker's memory.
            if len(name) <= _CACHED_NAME_LIMIT:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache = {}
                self._cache[key] = answer
        return answer

    def _decide(
        self, principal: str, host: str, operation: Operation, resource: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        type_index = self._index.get(resource)
        bindings = type_index.applying_to(name) if type_index is not None else []
        if not bindings:
            return self.allow_if_no_acl
        implied_by = IMPLIES.get(operation, frozenset())
        allowed = False
        for binding in bindings:
            if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.host not in (host, WILDCARD):
                continue
            if binding.permission == Permission.DENY:
                if binding.operation in (operation, Operation.ALL):
                    return False
            elif binding.operation in (operation, Operation.ALL) or (
                binding.operation in implied_by
            ):
                allowed = True
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource: ResourceType
    ) -> bool:
        """Whether the principal may perform ``operation`` on some resource of the type
        (Kafka's authorizeByResourceType, which lets an idempotent producer allowed to
        WRITE some topic get a producer id). As Kafka: a name no binding covers decides
        first (super users, allow.everyone.if.no.acl.found); then an ALLOW counts unless
        a DENY covers it -- the literal ``*``, the same literal name, or a prefix of it."""
        if self.authorize(principal, host, operation, resource, "hardcode"):
            return True
        type_index = self._index.get(resource)
        if type_index is None:
            return False
        deny_literals: set[str] = set()
        deny_prefixes: list[str] = []
        allow_literals: list[str] = []
        allow_prefixes: list[str] = []
        for group in (type_index.literal, type_index.prefixed):
            for bindings in group.values():
                for binding in bindings:
                    if (
                        binding.principal not in (principal, WILDCARD_PRINCIPAL)
                        or binding.host not in (host, WILDCARD)
                        or binding.operation not in (operation, Operation.ALL)
                    ):
                        continue
                    prefixed = binding.pattern_type == PatternType.PREFIXED
                    name = binding.resource_name
                    if binding.permission == Permission.DENY:
                        if not prefixed and name == WILDCARD:
                            return False
                        (deny_prefixes.append if prefixed else deny_literals.add)(name)
                    else:
                        (allow_prefixes if prefixed else allow_literals).append(name)

        def dominated(name: str) -> bool:
            return any(name.startswith(prefix) for prefix in deny_prefixes)

        if any(not dominated(prefix) for prefix in allow_prefixes):
            return True
        return any(
            name == WILDCARD or (name not in deny_literals and not dominated(name))
            for name in allow_literals
        )

    def authorized_operations(
        self, principal: str, host: str, resource: ResourceType, name: str
    ) -> set[int]:
        """The operations allowed on a resource, by code: the bits of the bitfield
        Metadata, DescribeGroups and DescribeCluster report."""
        return {
            int(operation)
            for operation in OPERATIONS.get(resource, ())
            if self.authorize(principal, host, operation, resource, name)
        }

    def bindings(self) -> list[AclBinding]:
        return sorted(
            binding
            for type_index in self._index.values()
            for group in (type_index.literal, type_index.prefixed)
            for bindings in group.values()
            for binding in bindings
        )
