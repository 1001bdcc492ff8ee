"""Kafka's ACL rules (security/authorizer.py) and the table of what each API needs
(server/authorization.py), without sockets."""

from __future__ import annotations

import time

import pytest

from partita.cluster.layout import BadValueError, Layout, decode_acl, encode_acl
from partita.protocol.api import SUPPORTED, ApiKey
from partita.security.acl import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from partita.security.authorizer import Authorizer
from partita.server.access import Access, Rule
from partita.server.authorization import RULES
from partita.server.dispatch import HANDLERS

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
READ, WRITE, DESCRIBE, ALL = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALL


def acl(
    name: str,
    operation: Operation = READ,
    permission: Permission = ALLOW,
    principal: str = "User:alice",
    pattern: PatternType = LITERAL,
    resource: ResourceType = TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, host, operation, permission).validate()


def authorizer(*bindings: AclBinding, **kwargs: object) -> Authorizer:
    a = Authorizer(**kwargs)  # type: ignore[arg-type]
    a.load(bindings)
    return a


def may(a: Authorizer, operation: Operation, name: str, principal: str = "User:alice") -> bool:
    return a.authorize(principal, "10.0.0.1", operation, TOPIC, name)


def test_no_binding_refuses_unless_allow_everyone_is_set() -> None:
    assert not may(authorizer(), READ, "t")
    assert may(authorizer(allow_everyone_if_no_acl_found=True), READ, "t")
    # A resource with any binding at all is decided by its bindings, not the default.
    a = authorizer(acl("t", principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert not may(a, READ, "t")
    assert may(a, READ, "other")


def test_allow_names_principal_operation_and_resource() -> None:
    a = authorizer(acl("t"))
    assert may(a, READ, "t")
    assert not may(a, WRITE, "t")
    assert not may(a, READ, "u")
    assert not may(a, READ, "t", principal="User:bob")


def test_read_write_delete_alter_imply_describe_and_alter_configs_describe_configs() -> None:
    for operation in (READ, WRITE, Operation.DELETE, Operation.ALTER):
        assert may(authorizer(acl("t", operation)), DESCRIBE, "t"), operation
    a = authorizer(acl("t", Operation.ALTER_CONFIGS))
    assert may(a, Operation.DESCRIBE_CONFIGS, "t")
    # ... but not the other way round, and DESCRIBE implies nothing.
    assert not may(authorizer(acl("t", DESCRIBE)), READ, "t")


def test_deny_beats_allow_and_a_denied_describe_leaves_read() -> None:
    a = authorizer(acl("t", ALL), acl("t", WRITE, DENY))
    assert may(a, READ, "t")
    assert not may(a, WRITE, "t")
    a = authorizer(acl("*", READ), acl("t", ALL, DENY))
    assert not may(a, READ, "t")
    assert may(a, READ, "u")
    # Kafka: a DENY on DESCRIBE does not take back a READ (implication allows only).
    a = authorizer(acl("t", READ), acl("t", DESCRIBE, DENY))
    assert may(a, READ, "t")
    assert not may(a, DESCRIBE, "t")


def test_wildcards_for_resource_principal_and_host() -> None:
    a = authorizer(acl("*", principal="User:*"))
    assert may(a, READ, "anything", principal="User:zed")
    a = authorizer(acl("t", host="10.0.0.2"))
    assert not may(a, READ, "t")  # asked from 10.0.0.1
    assert a.authorize("User:alice", "10.0.0.2", READ, TOPIC, "t")


def test_prefixed_bindings_match_every_name_they_start() -> None:
    a = authorizer(acl("orders-", pattern=PREFIXED), acl("orders-eu-", WRITE, pattern=PREFIXED))
    assert may(a, READ, "orders-us")
    assert may(a, WRITE, "orders-eu-1")
    assert not may(a, WRITE, "orders-us")
    assert not may(a, READ, "order")
    assert not may(a, READ, "xorders-us")
    a = authorizer(acl("orders-", pattern=PREFIXED), acl("orders-secret", READ, DENY))
    assert not may(a, READ, "orders-secret")
    assert may(a, READ, "orders-secretive")  # the literal DENY names only itself


def test_super_users_may_do_anything_even_when_denied() -> None:
    a = authorizer(acl("t", ALL, DENY, principal="User:*"), super_users=["User:admin"])
    assert may(a, WRITE, "t", principal="User:admin")
    assert not may(a, WRITE, "t")


def test_answers_follow_a_reload() -> None:
    a = authorizer(acl("t"))
    assert may(a, READ, "t")  # cached now
    a.load([])
    assert not may(a, READ, "t")


def test_by_resource_type_for_idempotent_producers() -> None:
    a = authorizer(acl("t", WRITE))
    assert a.authorize_any("User:alice", "h", WRITE, TOPIC)
    assert not a.authorize_any("User:bob", "h", WRITE, TOPIC)
    assert not authorizer(acl("t", WRITE), acl("t", WRITE, DENY)).authorize_any(
        "User:alice", "h", WRITE, TOPIC
    )
    assert not authorizer(acl("t", WRITE), acl("*", ALL, DENY)).authorize_any(
        "User:alice", "h", WRITE, TOPIC
    )
    # A prefixed DENY covers every ALLOW under it (Kafka's authorizeByResourceType).
    covered = authorizer(acl("foo-bar", WRITE), acl("foo", WRITE, DENY, pattern=PREFIXED))
    assert not covered.authorize_any("User:alice", "h", WRITE, TOPIC)
    outside = authorizer(acl("bar", WRITE), acl("foo", WRITE, DENY, pattern=PREFIXED))
    assert outside.authorize_any("User:alice", "h", WRITE, TOPIC)
    # A name no binding covers decides first: allow.everyone.if.no.acl.found, super users.
    everyone = authorizer(acl("other", READ), allow_everyone_if_no_acl_found=True)
    assert everyone.authorize_any("User:bob", "h", WRITE, TOPIC)
    assert authorizer(super_users=["User:root"]).authorize_any("User:root", "h", WRITE, TOPIC)


def test_huge_names_are_answered_but_not_cached() -> None:
    a = authorizer(acl("x", pattern=PREFIXED))
    assert may(a, READ, "x" * 1_000_000)
    assert all(len(key[4]) <= 255 for key in a._cache)


def test_bindings_kafka_refuses_to_store() -> None:
    bad = [
        AclBinding(ResourceType.ANY, "t", LITERAL, "User:a", "*", READ, ALLOW),
        AclBinding(TOPIC, "t", PatternType.MATCH, "User:a", "*", READ, ALLOW),
        AclBinding(TOPIC, "t", LITERAL, "alice", "*", READ, ALLOW),
        AclBinding(TOPIC, "t", LITERAL, "User:a", "*", Operation.ANY, ALLOW),
        AclBinding(TOPIC, "t", LITERAL, "User:a", "*", READ, Permission.ANY),
        AclBinding(CLUSTER, "other", LITERAL, "User:a", "*", Operation.ALTER, ALLOW),
        AclBinding(TOPIC, "*", PREFIXED, "User:a", "*", READ, ALLOW),
        AclBinding(TOPIC, "", LITERAL, "User:a", "*", READ, ALLOW),
    ]
    for binding in bad:
        with pytest.raises(InvalidAclError):
            binding.validate()


def test_filters_select_as_describe_and_delete_do() -> None:
    literal, prefixed, star = acl("orders-1"), acl("orders-", pattern=PREFIXED), acl("*")
    everything = [literal, prefixed, star]
    assert [b for b in everything if AclFilter().matches(b)] == everything
    exact = AclFilter(TOPIC, "orders-1", LITERAL)
    assert [b for b in everything if exact.matches(b)] == [literal]
    match = AclFilter(TOPIC, "orders-1", PatternType.MATCH)
    assert [b for b in everything if match.matches(b)] == everything
    assert not AclFilter(principal="User:bob").matches(literal)
    assert not AclFilter(operation=WRITE).matches(literal)
    with pytest.raises(InvalidAclError):
        AclFilter(operation=Operation.UNKNOWN).validate()


def test_a_stored_binding_round_trips_and_a_hostile_one_is_refused() -> None:
    binding = acl("orders-", WRITE, DENY, pattern=PREFIXED, host="10.0.0.9")
    assert decode_acl(encode_acl(binding)) == binding
    assert Layout("p").acl(binding) == Layout("p").acl(binding)
    assert Layout("p").acl(binding) != Layout("p").acl(acl("orders-"))
    for raw in (
        b"[]",
        b'{"resource_type": "TOPIC"}',
        encode_acl(binding).replace(b"DENY", b"MAYBE"),
        encode_acl(binding).replace(b'"WRITE"', b"4"),
        encode_acl(binding).replace(b"PREFIXED", b"MATCH"),
    ):
        with pytest.raises(BadValueError):
            decode_acl(raw)


def test_every_api_served_has_a_rule() -> None:
    assert set(HANDLERS) <= set(RULES)


def test_a_whole_request_refusal_has_a_top_level_error_in_every_version() -> None:
    """The seam answers a refused request with the response's top-level error code:
    each API given such a refusal must have one in every version partita serves."""
    for key, rule in RULES.items():
        rules = [rule] if isinstance(rule, Rule) else []
        if not any(r.refuse for r in rules):
            continue
        spec = SUPPORTED[int(key)]
        for version in range(spec.min_version, spec.max_version + 1):
            response = spec.response(version=version, error_code=31)
            encoded = response.encode(version=version)
            decoded = spec.response.decode(encoded, version=version)
            assert decoded.error_code == 31, (key.name, version)


def test_access_answers_with_the_rules_operation() -> None:
    a = authorizer(acl("t", WRITE), acl("g", READ, resource=GROUP))
    produce = RULES[ApiKey.PRODUCE]
    assert isinstance(produce, Rule)
    access = Access(a, "User:alice", "h", produce)
    assert access.topic("t") == 0
    assert access.topic("u") == 29
    assert access.group("g") == 30  # Produce names no group: asking refuses
    follower = RULES[ApiKey.FETCH]
    assert not isinstance(follower, Rule)

    class FollowerFetch:
        replica_id = 2

    rule = follower(FollowerFetch(), 12)
    assert Access(a, "User:alice", "h", rule).topic("t") == 29  # needs CLUSTER_ACTION
    broker = authorizer(acl("kafka-cluster", Operation.CLUSTER_ACTION, resource=CLUSTER))
    assert Access(broker, "User:alice", "h", rule).topic("t") == 0


def test_a_check_costs_little_at_ten_thousand_acls() -> None:
    """Not a benchmark (that is benchmarks/authz_bench.py): a bound that a scan of the
    bindings per check would miss by far."""
    bindings = [acl(f"topic-{i}", principal=f"User:u{i % 100}") for i in range(5000)]
    bindings += [acl(f"team-{i}-", pattern=PREFIXED, principal="User:u1") for i in range(5000)]
    a = authorizer(*bindings)
    names = [f"team-{i}-orders" for i in range(2000)]
    started = time.perf_counter()
    for name in names:  # uncached: every name is new
        assert may(a, READ, name, principal="User:u1")
    per_check = (time.perf_counter() - started) / len(names)
    assert per_check < 200e-6, per_check
