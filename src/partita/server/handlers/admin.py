"""Topic administration and configs: CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs, IncrementalAlterConfigs; and InitProducerId."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.producer import InitProducerIdResponse

from partita.cluster.layout import DYNAMIC_BROKER_CONFIGS
from partita.errors import (
    InvalidConfigurationError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    TopicAuthorizationFailedError,
    UnknownServerError,
)
from partita.protocol.messages import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
)
from partita.server.access import Access
from partita.server.broker import Broker
from partita.server.config import BROKER_DEFAULTS, BROKER_TO_TOPIC, is_sensitive
from partita.server.request_context import RequestContext
from partita.storage.config import LogConfig

log = logging.getLogger(__name__)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

_TYPE_BOOLEAN, _TYPE_STRING, _TYPE_INT, _TYPE_LONG, _TYPE_DOUBLE, _TYPE_LIST = 1, 2, 3, 5, 6, 7
_INT_CONFIGS = {
    "segment.bytes",
    "segment.index.bytes",
    "index.interval.bytes",
    "max.message.bytes",
    "min.insync.replicas",
}
_TOPIC_FOR_BROKER = {topic: broker for broker, topic in BROKER_TO_TOPIC.items()}

# Broker settings whose Kafka default is null: Kafka's default sits on a coarser synonym
# (log.retention.hours=168, log.roll.hours=168, ...), and its synonym list starts at the
# first entry named after the topic config's own broker setting, so an unset one lists
# no broker synonym at all (ConfigHelper.configSynonyms' dropWhile). Ours neither.
_NO_KAFKA_DEFAULT = {
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.retention.ms",
    "log.flush.interval.ms",
}


def _config_type(name: str) -> int:
    if name in _INT_CONFIGS:
        return _TYPE_INT
    if name == "cleanup.policy" or name.endswith(".throttled.replicas"):
        return _TYPE_LIST
    if name == "min.cleanable.dirty.ratio":
        return _TYPE_DOUBLE
    if name == "unclean.leader.election.enable":
        return _TYPE_BOOLEAN
    if name in ("message.timestamp.type", "compression.type"):
        return _TYPE_STRING
    return _TYPE_LONG


def _code_and_message(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    log.exception("admin request failed", exc_info=exc)
    return UnknownServerError.code, f"{type(exc).__name__}: {exc}"


# -- topics --------------------------------------------------------------------------

_CTResult = CreateTopicsResponse.CreatableTopicResult
_CTConfig = _CTResult.CreatableTopicConfigs


def _topic_config_entries(broker: Broker, name: str) -> list[tuple[str, str, int]]:
    """(name, value, source) for every topic config, as DescribeConfigs reports them."""
    overrides = broker.store.topics[name].configs if name in broker.store.topics else {}
    values = broker.topic_admin.log_config(name).to_kafka()
    out = []
    for key, value in sorted(values.items()):
        if key in overrides:
            source = SOURCE_DYNAMIC_TOPIC
        elif _TOPIC_FOR_BROKER.get(key) in broker.config.overridden:
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        out.append((key, value, source))
    return out


async def handle_create_topics(
    broker: Broker, context: RequestContext, request: CreateTopicsRequest
) -> Any:
    results = []
    for topic in request.topics:
        try:
            context.access.require_topic(topic.name)
            partitions, replication = topic.num_partitions, topic.replication_factor
            assignment = None
            if topic.assignments:
                if partitions != -1 or replication != -1:
                    raise InvalidRequestError(
                        "give either replica assignments or partition count and replication "
                        "factor, not both"
                    )
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
                if sorted(assignment) != list(range(len(assignment))):
                    raise InvalidReplicaAssignmentError(
                        "replica assignments must name partitions 0 to n-1"
                    )
            configs = {c.name: c.value for c in topic.configs}
            state = await broker.topic_admin.create(
                topic.name,
                partitions,
                replication,
                configs,
                assignment=assignment,
                validate_only=request.validate_only,
            )
            entries = (
                [
                    _CTConfig(name=k, value=v, read_only=False, config_source=s, is_sensitive=False)
                    for k, v, s in _topic_config_entries(broker, topic.name)
                ]
                if not request.validate_only
                else []
            )
            results.append(
                _CTResult(
                    name=topic.name,
                    topic_id=state.topic_id,
                    error_code=0,
                    error_message=None,
                    num_partitions=len(state.partitions),
                    replication_factor=len(state.partitions[0].replicas),
                    configs=entries,
                )
            )
        except Exception as exc:
            code, message = _code_and_message(exc)
            results.append(
                _CTResult(
                    name=topic.name,
                    error_code=code,
                    error_message=message,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=None,
                )
            )
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


_DTResult = DeleteTopicsResponse.DeletableTopicResult


async def handle_delete_topics(
    broker: Broker, context: RequestContext, request: DeleteTopicsRequest
) -> Any:
    wanted: list[tuple[str | None, uuid.UUID | None]]
    if context.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for given_name, topic_id in wanted:
        name = given_name
        try:
            if name is None:
                resolved = broker.replicas.name_for_id(topic_id or uuid.UUID(int=0))
                if context.access.topic(resolved):
                    # Asked by id: the name is not told to whom may not see the topic.
                    raise TopicAuthorizationFailedError("not authorized to delete this topic")
                name = resolved
            context.access.require_topic(name)
            state = await broker.topic_admin.delete(name)
            results.append(
                _DTResult(name=name, topic_id=state.topic_id, error_code=0, error_message=None)
            )
        except Exception as exc:
            code, message = _code_and_message(exc)
            results.append(
                _DTResult(name=name, topic_id=topic_id, error_code=code, error_message=message)
            )
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def handle_create_partitions(
    broker: Broker, context: RequestContext, request: CreatePartitionsRequest
) -> Any:
    results = []
    for topic in request.topics:
        try:
            context.access.require_topic(topic.name)
            assignment = None
            if topic.assignments is not None:
                assignment = {i: list(a.broker_ids) for i, a in enumerate(topic.assignments)}
            await broker.topic_admin.add_partitions(
                topic.name, topic.count, assignment=assignment, validate_only=request.validate_only
            )
            results.append(
                CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=topic.name, error_code=0, error_message=None
                )
            )
        except Exception as exc:
            code, message = _code_and_message(exc)
            results.append(
                CreatePartitionsResponse.CreatePartitionsTopicResult(
                    name=topic.name, error_code=code, error_message=message
                )
            )
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


# -- configs -------------------------------------------------------------------------

_DCResult = DescribeConfigsResponse.DescribeConfigsResult
_DCEntry = _DCResult.DescribeConfigsResourceResult
_DCSynonym = _DCEntry.DescribeConfigsSynonym


def _describe_topic(broker: Broker, name: str, keys: list[str] | None, synonyms: bool) -> list[Any]:
    broker.topic_admin.topic(name)  # raises UNKNOWN_TOPIC_OR_PARTITION
    overrides = broker.store.topics[name].configs
    entries = []
    for key, value, source in _topic_config_entries(broker, name):
        if keys is not None and key not in keys:
            continue
        synonym_list = []
        if synonyms:
            if key in overrides:
                synonym_list.append(
                    _DCSynonym(name=key, value=overrides[key], source=SOURCE_DYNAMIC_TOPIC)
                )
            broker_key = _TOPIC_FOR_BROKER.get(key)
            if broker_key is not None:
                if broker_key in broker.config.overridden:
                    synonym_list.append(
                        _DCSynonym(
                            name=broker_key,
                            value=broker.config.get(broker_key),
                            source=SOURCE_STATIC_BROKER,
                        )
                    )
                if broker_key not in _NO_KAFKA_DEFAULT:
                    synonym_list.append(
                        _DCSynonym(
                            name=broker_key,
                            value=BROKER_DEFAULTS[broker_key],
                            source=SOURCE_DEFAULT,
                        )
                    )
        entries.append(
            _config_entry(key, value, source, synonym_list, _config_type(key), read_only=False)
        )
    return entries


def _config_entry(
    key: str,
    value: str | None,
    source: int,
    synonyms: list[Any],
    config_type: int,
    *,
    read_only: bool,
) -> Any:
    sensitive = is_sensitive(key)
    return _DCEntry(
        name=key,
        value=None if sensitive else value,  # Kafka never sends a password-type value
        read_only=read_only,
        config_source=source,
        is_default=source == SOURCE_DEFAULT,
        is_sensitive=sensitive,
        synonyms=synonyms,
        config_type=config_type,
        documentation=None,
    )


def _describe_broker(broker: Broker, resource_name: str, keys: list[str] | None) -> list[Any]:
    if resource_name not in ("", str(broker.node_id)):
        raise InvalidRequestError(f"this is broker {broker.node_id}, not {resource_name!r}")
    entries = []
    for key, value in sorted(broker.config.values.items()):
        if keys is not None and key not in keys:
            continue
        source = SOURCE_STATIC_BROKER if key in broker.config.overridden else SOURCE_DEFAULT
        entries.append(_config_entry(key, value, source, [], _TYPE_STRING, read_only=True))
    return entries


def handle_describe_configs(
    broker: Broker, context: RequestContext, request: DescribeConfigsRequest
) -> Any:
    results = []
    for resource in request.resources:
        keys = list(resource.configuration_keys) if resource.configuration_keys else None
        try:
            if resource.resource_type == TOPIC_RESOURCE:
                context.access.require_topic(resource.resource_name)
                configs = _describe_topic(
                    broker, resource.resource_name, keys, bool(request.include_synonyms)
                )
            elif resource.resource_type == BROKER_RESOURCE:
                context.access.require_cluster()
                configs = _describe_broker(broker, resource.resource_name, keys)
            else:
                raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            results.append(
                _DCResult(
                    error_code=0,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs,
                )
            )
        except Exception as exc:
            code, message = _code_and_message(exc)
            results.append(
                _DCResult(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=[],
                )
            )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _incremental(
    current: dict[str, str], defaults: LogConfig, changes: list[Any]
) -> dict[str, str]:
    updated = dict(current)
    default_values = defaults.to_kafka()
    for change in changes:
        name, op, value = change.name, change.config_operation, change.value
        if op == OP_SET:
            if value is None:
                raise InvalidRequestError(f"SET of {name} needs a value")
            updated[name] = value
        elif op == OP_DELETE:
            updated.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if name != "cleanup.policy":
                raise InvalidRequestError(f"{name} is not a list; APPEND/SUBTRACT need a list")
            items = [x for x in updated.get(name, default_values[name]).split(",") if x]
            given = [x.strip() for x in (value or "").split(",") if x.strip()]
            if op == OP_APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            updated[name] = ",".join(items)
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return updated


async def _alter_broker(broker: Broker, resource: Any, incremental: bool, dry: bool) -> None:
    """Kafka's dynamic broker configs, cluster-wide (resource name ""), for the settings
    partita can change while running: the replication throttles. The rest are static."""
    if resource.resource_name and not resource.resource_name.isdigit():
        raise InvalidRequestError(f"broker {resource.resource_name!r} is not a broker id")
    # partita keeps dynamic broker configs cluster-wide: a change named for one broker
    # (kafka-reassign-partitions sets its throttles broker by broker) applies to all.
    current = dict(broker.store.dynamic_broker_configs)
    for c in resource.configs:
        if c.name not in DYNAMIC_BROKER_CONFIGS:
            raise InvalidRequestError(
                f"broker config {c.name} is static in partita: set it with --set or --config "
                f"and restart (dynamic: {', '.join(sorted(DYNAMIC_BROKER_CONFIGS))})"
            )
        op = c.config_operation if incremental else 0
        if op == 1 or c.value is None:
            current.pop(c.name, None)
        elif op == 0:
            if not str(c.value).isdigit():
                raise InvalidConfigurationError(f"{c.name} must be bytes/s, got {c.value!r}")
            current[c.name] = str(c.value)
        else:
            raise InvalidRequestError(f"{c.name} is not a list: APPEND/SUBTRACT do not apply")
    if not dry:
        await broker.store.set_dynamic_broker_configs(current)


async def _alter(
    broker: Broker, access: Access, request: Any, response_cls: Any, incremental: bool
) -> Any:
    responses = []
    for resource in request.resources:
        try:
            if resource.resource_type == BROKER_RESOURCE:
                access.require_cluster()
                await _alter_broker(broker, resource, incremental, request.validate_only)
                responses.append(
                    response_cls.AlterConfigsResourceResponse(
                        error_code=0,
                        error_message=None,
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
                continue
            if resource.resource_type != TOPIC_RESOURCE:
                raise InvalidRequestError(f"unsupported resource type {resource.resource_type}")
            name = resource.resource_name
            access.require_topic(name)
            state = broker.topic_admin.topic(name)
            if incremental:
                configs = _incremental(
                    state.configs, broker.config.topic_defaults(), list(resource.configs)
                )
            else:
                configs = {}
                for c in resource.configs:
                    if c.value is None:
                        raise InvalidConfigurationError(f"config {c.name} has no value")
                    configs[c.name] = c.value
            await broker.topic_admin.set_configs(name, configs, validate_only=request.validate_only)
            responses.append(
                response_cls.AlterConfigsResourceResponse(
                    error_code=0,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        except Exception as exc:
            code, message = _code_and_message(exc)
            responses.append(
                response_cls.AlterConfigsResourceResponse(
                    error_code=code,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
    return response_cls(throttle_time_ms=0, responses=responses)


async def handle_alter_configs(
    broker: Broker, context: RequestContext, request: AlterConfigsRequest
) -> Any:
    return await _alter(broker, context.access, request, AlterConfigsResponse, incremental=False)


async def handle_incremental_alter_configs(
    broker: Broker, context: RequestContext, request: IncrementalAlterConfigsRequest
) -> Any:
    return await _alter(
        broker, context.access, request, IncrementalAlterConfigsResponse, incremental=True
    )


# -- producer ids ------------------------------------------------------------------------

MAX_PRODUCER_EPOCH = 32767


async def handle_init_producer_id(
    broker: Broker, context: RequestContext, request: InitProducerIdRequest
) -> Any:
    try:
        if request.transactional_id is not None:
            # The coordinator's: a new id, or the epoch bumped (fencing), an open
            # transaction aborted first (#29, transaction version 1).
            error, new_id, new_epoch = await broker.transactions.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms
            )
            return InitProducerIdResponse(
                throttle_time_ms=0, error_code=error, producer_id=new_id, producer_epoch=new_epoch
            )
        producer_id = request.producer_id if context.api_version >= 3 else -1
        epoch = request.producer_epoch if context.api_version >= 3 else -1
        if producer_id >= 0 and 0 <= epoch < MAX_PRODUCER_EPOCH - 1:
            new_id, new_epoch = producer_id, epoch + 1  # KIP-360: bump the epoch
        else:
            new_id, new_epoch = await broker.store.allocate_producer_id(), 0
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=0, producer_id=new_id, producer_epoch=new_epoch
        )
    except Exception as exc:
        code, _message = _code_and_message(exc)
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1
        )
