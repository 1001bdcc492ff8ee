"""DescribeClientQuotas and AlterClientQuotas: the client quotas kept in the cluster's
metadata (``cluster/layout.py``) and enforced by every broker (``server/quotas.py``),
so that ``kafka-configs --entity-type users|clients`` works as on Kafka."""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from partita.cluster.layout import MAX_QUOTA, QUOTA_ENTITY_TYPES, QUOTA_KEYS, QuotaEntity
from partita.errors import InvalidRequestError
from partita.protocol.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest
from partita.server.broker import Broker
from partita.server.request_context import RequestContext

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_Entry = DescribeClientQuotasResponse.EntryData
_Entity = _Entry.EntityData
_Value = _Entry.ValueData
_Altered = AlterClientQuotasResponse.EntryData
_AlteredEntity = _Altered.EntityData


class _InvalidEntryError(ValueError):
    pass


def _entity(parts: Any) -> QuotaEntity:
    """A request's entity, checked, in the canonical order (user before client-id)."""
    given: dict[str, str | None] = {}
    for part in parts:
        if part.entity_type not in QUOTA_ENTITY_TYPES:
            raise _InvalidEntryError(
                f"entity type {part.entity_type!r}: partita has user and client-id quotas"
            )
        if part.entity_type in given:
            raise _InvalidEntryError(f"entity type {part.entity_type} given twice")
        given[part.entity_type] = part.entity_name
    if not given:
        raise _InvalidEntryError("an entity names a user, a client id, or both")
    return tuple((kind, given[kind]) for kind in QUOTA_ENTITY_TYPES if kind in given)


def handle_describe_client_quotas(
    broker: Broker, _context: RequestContext, request: DescribeClientQuotasRequest
) -> Any:
    components = list(request.components)
    wanted: dict[str, tuple[int, str | None]] = {}
    for component in components:
        if component.entity_type not in QUOTA_ENTITY_TYPES or component.entity_type in wanted:
            return DescribeClientQuotasResponse(
                throttle_time_ms=0,
                error_code=InvalidRequestError.code,
                error_message=f"cannot filter on entity type {component.entity_type!r}",
                entries=[],
            )
        wanted[component.entity_type] = (component.match_type, component.match)

    def selected(entity: QuotaEntity) -> bool:
        names = dict(entity)
        if request.strict and set(names) != set(wanted):
            return False
        for kind, (match_type, match) in wanted.items():
            if kind not in names:
                return False
            name = names[kind]
            if match_type == MATCH_EXACT and name != match:
                return False
            if match_type == MATCH_DEFAULT and name is not None:
                return False
            if match_type == MATCH_SPECIFIED and name is None:
                return False
        return True

    entries = [
        _Entry(
            entity=[_Entity(entity_type=kind, entity_name=name) for kind, name in entity],
            values=[_Value(key=key, value=value) for key, value in sorted(values.items())],
        )
        for entity, values in sorted(
            broker.store.client_quotas().items(), key=lambda item: repr(item[0])
        )
        if selected(entity)
    ]
    return DescribeClientQuotasResponse(
        throttle_time_ms=0, error_code=0, error_message=None, entries=entries
    )


async def handle_alter_client_quotas(
    broker: Broker, context: RequestContext, request: AlterClientQuotasRequest
) -> Any:
    existing = broker.store.client_quotas()
    denied = context.access.cluster()
    changed: dict[QuotaEntity, dict[str, float]] = {}
    results = []
    for entry in request.entries:
        code, message = 0, None
        try:
            if denied:
                code, message = denied, "not authorized to alter client quotas"
                raise _InvalidEntryError(message)
            entity = _entity(entry.entity)
            values = dict(changed.get(entity, existing.get(entity, {})))
            for op in entry.ops:
                if op.key not in QUOTA_KEYS:
                    raise _InvalidEntryError(
                        f"quota {op.key!r}: partita has {', '.join(QUOTA_KEYS)}"
                    )
                if op.remove:
                    values.pop(op.key, None)
                elif not 0 < op.value <= MAX_QUOTA:
                    raise _InvalidEntryError(f"{op.key}={op.value} must be positive")
                else:
                    values[op.key] = float(op.value)
            changed[entity] = values
        except _InvalidEntryError as exc:
            code = code or InvalidRequestError.code
            message = str(exc)
        results.append(
            _Altered(
                error_code=code,
                error_message=message,
                entity=[
                    _AlteredEntity(entity_type=p.entity_type, entity_name=p.entity_name)
                    for p in entry.entity
                ],
            )
        )
    if changed and not request.validate_only:
        await broker.store.alter_client_quotas(changed)
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)
