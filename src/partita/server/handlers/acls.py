"""CreateAcls, DescribeAcls and DeleteAcls: the cluster's ACL bindings, kept in its
metadata (``cluster/layout.py``) and enforced by every broker's authorizer
(``server/authorization.py``) once its image has them.

As in Kafka, a broker without an authorizer answers SECURITY_DISABLED: bindings that no
broker would enforce are not silently stored.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from partita.errors import InvalidRequestError, SecurityDisabledError
from partita.protocol.messages import (
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DescribeAclsRequest,
)
from partita.security.acl import (
    AclBinding,
    AclFilter,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

_NO_AUTHORIZER = "No Authorizer is configured on the broker"
_Created = CreateAclsResponse.AclCreationResult
_Resource = DescribeAclsResponse.DescribeAclsResource
_Description = _Resource.AclDescription
_Deleted = DeleteAclsResponse.DeleteAclsFilterResult
_Matching = _Deleted.DeleteAclsMatchingAcl


def _enum(kind: type[Any], value: int, what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InvalidAclError(f"unknown {what} {value}") from None


def _binding(creation: Any) -> AclBinding:
    return AclBinding(
        _enum(ResourceType, creation.resource_type, "resource type"),
        creation.resource_name,
        _enum(PatternType, creation.resource_pattern_type, "pattern type"),
        creation.principal,
        creation.host,
        _enum(Operation, creation.operation, "operation"),
        _enum(Permission, creation.permission_type, "permission"),
    ).validate()


def _filter(request: DescribeAclsRequest | DeleteAclsRequestDeleteAclsFilter) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, request.resource_type_filter, "resource type"),
        request.resource_name_filter,
        _enum(PatternType, request.pattern_type_filter, "pattern type"),
        request.principal_filter,
        request.host_filter,
        _enum(Operation, request.operation, "operation"),
        _enum(Permission, request.permission_type, "permission"),
    ).validate()


async def handle_create_acls(
    broker: Broker, context: RequestContext, request: CreateAclsRequest
) -> Any:
    results: list[Any] = []
    accepted: list[AclBinding] = []
    denied = context.access.cluster()
    for creation in request.creations:
        if not broker.authorization.enabled:
            results.append(
                _Created(error_code=SecurityDisabledError.code, error_message=_NO_AUTHORIZER)
            )
            continue
        if denied:
            results.append(_Created(error_code=denied, error_message=None))
            continue
        try:
            accepted.append(_binding(creation))
        except InvalidAclError as exc:
            results.append(_Created(error_code=InvalidRequestError.code, error_message=str(exc)))
            continue
        results.append(_Created(error_code=0, error_message=None))
    if accepted:
        await broker.store.alter_acls(accepted, [])
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def handle_describe_acls(
    broker: Broker, _context: RequestContext, request: DescribeAclsRequest
) -> Any:
    if not broker.authorization.enabled:
        return DescribeAclsResponse(
            throttle_time_ms=0,
            error_code=SecurityDisabledError.code,
            error_message=_NO_AUTHORIZER,
            resources=[],
        )
    try:
        selection = _filter(request)
    except InvalidAclError as exc:
        return DescribeAclsResponse(
            throttle_time_ms=0,
            error_code=InvalidRequestError.code,
            error_message=str(exc),
            resources=[],
        )
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = defaultdict(list)
    for binding in sorted(broker.store.acls(), key=_by_resource):
        if selection.matches(binding):
            key = (binding.resource_type, binding.resource_name, binding.pattern_type)
            by_resource[key].append(binding)
    resources = [
        _Resource(
            resource_type=int(resource_type),
            resource_name=name,
            pattern_type=int(pattern_type),
            acls=[
                _Description(
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ],
        )
        for (resource_type, name, pattern_type), bindings in by_resource.items()
    ]
    return DescribeAclsResponse(
        throttle_time_ms=0, error_code=0, error_message=None, resources=resources
    )


def _by_resource(binding: AclBinding) -> tuple[int, int, str, AclBinding]:
    """Resources grouped, in a stable order (Kafka's tools print them as they group them)."""
    return (binding.resource_type, binding.pattern_type, binding.resource_name, binding)


async def handle_delete_acls(
    broker: Broker, context: RequestContext, request: DeleteAclsRequest
) -> Any:
    results: list[Any] = []
    doomed: dict[AclBinding, None] = {}  # in order, each once
    denied = context.access.cluster()
    existing = sorted(broker.store.acls())
    for wanted in request.filters:
        if not broker.authorization.enabled:
            results.append(_failed(SecurityDisabledError.code, _NO_AUTHORIZER))
            continue
        if denied:
            results.append(_failed(denied, None))
            continue
        try:
            selection = _filter(wanted)
        except InvalidAclError as exc:
            results.append(_failed(InvalidRequestError.code, str(exc)))
            continue
        matching = [b for b in existing if selection.matches(b)]
        doomed.update(dict.fromkeys(matching))
        results.append(
            _Deleted(
                error_code=0,
                error_message=None,
                matching_acls=[_matching(b) for b in matching],
            )
        )
    if doomed:
        await broker.store.alter_acls([], list(doomed))
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _failed(code: int, message: str | None) -> Any:
    return _Deleted(error_code=code, error_message=message, matching_acls=[])


def _matching(binding: AclBinding) -> Any:
    return _Matching(
        error_code=0,
        error_message=None,
        resource_type=int(binding.resource_type),
        resource_name=binding.resource_name,
        pattern_type=int(binding.pattern_type),
        principal=binding.principal,
        host=binding.host,
        operation=int(binding.operation),
        permission_type=int(binding.permission),
    )
