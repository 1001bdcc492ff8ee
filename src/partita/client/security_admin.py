"""The admin client's security calls: ACLs (Create/Describe/DeleteAcls), SCRAM users
(Alter/DescribeUserScramCredentials) and client quotas (Alter/DescribeClientQuotas).
Functions over an ``AsyncAdmin``, as ``group_admin`` is, so that ``admin`` keeps to
topics and the cluster."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeUserScramCredentialsRequest,
)

from partita.client.error_names import describe_error_code
from partita.errors import KafkaError
from partita.security.acl import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from partita.security.scram import HASHES, MIN_ITERATIONS

if TYPE_CHECKING:
    from partita.client.admin import AsyncAdmin

MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
QuotaEntity = tuple[tuple[str, str | None], ...]


class SecurityAdminError(KafkaError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        raise SecurityAdminError(code, f"{what}: {message or describe_error_code(code)}")


# -- ACLs -------------------------------------------------------------------------------


async def create_acls(admin: AsyncAdmin, bindings: list[AclBinding]) -> None:
    creation = CreateAclsRequest.AclCreation
    response = await admin._request(
        CreateAclsRequest(
            version=3,
            creations=[
                creation(
                    resource_type=int(b.resource_type),
                    resource_name=b.resource_name,
                    resource_pattern_type=int(b.pattern_type),
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ],
        )
    )
    for binding, result in zip(bindings, response.results, strict=True):
        _check(result.error_code, result.error_message, f"cannot create {binding}")


def _filter_fields(selection: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(selection.resource_type),
        "resource_name_filter": selection.resource_name,
        "pattern_type_filter": int(selection.pattern_type),
        "principal_filter": selection.principal,
        "host_filter": selection.host,
        "operation": int(selection.operation),
        "permission_type": int(selection.permission),
    }


async def describe_acls(admin: AsyncAdmin, selection: AclFilter) -> list[AclBinding]:
    response = await admin._request(DescribeAclsRequest(version=3, **_filter_fields(selection)))
    _check(response.error_code, response.error_message, "cannot list ACLs")
    return [
        AclBinding(
            ResourceType(resource.resource_type),
            resource.resource_name,
            PatternType(resource.pattern_type),
            acl.principal,
            acl.host,
            Operation(acl.operation),
            Permission(acl.permission_type),
        )
        for resource in response.resources
        for acl in resource.acls
    ]


async def delete_acls(admin: AsyncAdmin, selection: AclFilter) -> list[AclBinding]:
    response = await admin._request(
        DeleteAclsRequest(
            version=3, filters=[DeleteAclsRequest.DeleteAclsFilter(**_filter_fields(selection))]
        )
    )
    (result,) = response.filter_results
    _check(result.error_code, result.error_message, "cannot remove ACLs")
    return [
        AclBinding(
            ResourceType(m.resource_type),
            m.resource_name,
            PatternType(m.pattern_type),
            m.principal,
            m.host,
            Operation(m.operation),
            Permission(m.permission_type),
        )
        for m in result.matching_acls
    ]


# -- SCRAM users ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScramUser:
    name: str
    mechanisms: list[tuple[str, int]]  # (mechanism, iterations)


async def upsert_scram_user(
    admin: AsyncAdmin,
    user: str,
    password: str,
    mechanism: str = "SCRAM-SHA-512",
    iterations: int = 8192,
) -> None:
    """Create or change a user's SCRAM credential. Only the salted password crosses the
    wire (Kafka's AlterUserScramCredentials), never the password."""
    if mechanism not in MECHANISM_TYPES:
        raise ValueError(f"mechanism {mechanism!r}: expected {', '.join(MECHANISM_TYPES)}")
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {MIN_ITERATIONS}")
    salt = secrets.token_bytes(32)
    salted = hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)
    upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
        name=user,
        mechanism=MECHANISM_TYPES[mechanism],
        iterations=iterations,
        salt=salt,
        salted_password=salted,
    )
    response = await admin._request(
        AlterUserScramCredentialsRequest(version=0, deletions=[], upsertions=[upsertion])
    )
    for result in response.results:
        _check(result.error_code, result.error_message, f"cannot set user {user!r}")


async def delete_scram_user(admin: AsyncAdmin, user: str, mechanism: str) -> None:
    deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion(
        name=user, mechanism=MECHANISM_TYPES.get(mechanism, 0)
    )
    response = await admin._request(
        AlterUserScramCredentialsRequest(version=0, deletions=[deletion], upsertions=[])
    )
    for result in response.results:
        _check(result.error_code, result.error_message, f"cannot remove user {user!r}")


async def describe_scram_users(admin: AsyncAdmin) -> list[ScramUser]:
    response = await admin._request(DescribeUserScramCredentialsRequest(version=0, users=None))
    _check(response.error_code, response.error_message, "cannot list users")
    names = {number: name for name, number in MECHANISM_TYPES.items()}
    return sorted(
        (
            ScramUser(
                result.user,
                [
                    (names.get(c.mechanism, str(c.mechanism)), c.iterations)
                    for c in result.credential_infos
                ],
            )
            for result in response.results
            if not result.error_code
        ),
        key=lambda u: u.name,
    )


# -- client quotas ------------------------------------------------------------------------


async def alter_client_quotas(
    admin: AsyncAdmin, entity: QuotaEntity, values: dict[str, float], remove: list[str]
) -> None:
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        version=1,
        entries=[
            entry(
                entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[entry.OpData(key=k, value=float(v), remove=False) for k, v in values.items()]
                + [entry.OpData(key=k, value=0.0, remove=True) for k in remove],
            )
        ],
        validate_only=False,
    )
    response = await admin._request(request)
    for result in response.entries:
        _check(result.error_code, result.error_message, "cannot set quotas")


async def describe_client_quotas(
    admin: AsyncAdmin, entity: QuotaEntity | None = None
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """Quotas of ``entity`` (a None name: the default), or of every entity."""
    component = DescribeClientQuotasRequest.ComponentData
    components = [
        component(entity_type=t, match_type=0 if n is not None else 1, match=n)
        for t, n in (entity or ())
    ]
    response = await admin._request(
        DescribeClientQuotasRequest(version=1, components=components, strict=entity is not None)
    )
    _check(response.error_code, response.error_message, "cannot list quotas")
    return [
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            {v.key: v.value for v in entry.values},
        )
        for entry in response.entries or ()
    ]
