"""The options of Spark's Kafka source and sink, parsed and checked before any I/O.

Names, defaults and refusals follow Spark's own Kafka connector (``KafkaSourceProvider``) so
that a job written for ``format("kafka")`` runs with ``format("partita")``. Everything here
is pure: a bad option fails at ``load()`` / ``save()`` with one clear message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

SubscriptionKind = Literal["subscribe", "subscribepattern", "assign"]

LATEST = -1
EARLIEST = -2

# Kafka consumer settings Spark refuses because the source manages them itself.
_REFUSED_CONSUMER_OPTIONS = {
    "group.id": None,  # Spark accepts it with a warning; partita reads without a group
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes; cast or decode them in the query",
    "value.deserializer": "values are always read as bytes; cast or decode them in the query",
    "enable.auto.commit": "the source does not commit offsets; progress lives in the checkpoint",
    "interceptor.classes": "interceptors are not supported",
}
_REFUSED_PRODUCER_OPTIONS = {
    "key.serializer": "write the key column as binary or string",
    "value.serializer": "write the value column as binary or string",
    "transactional.id": (
        "set deliveryGuarantee=exactly-once (and transactionalIdPrefix): each task needs "
        "an id of its own, which the sink derives"
    ),
}
# Producer settings a writer maps onto partita's producer.
_PRODUCER_OPTIONS = {
    "acks": "acks",
    "linger.ms": "linger_ms",
    "batch.size": "batch_size",
    "compression.type": "compression_type",
    "partitioner.class": "partitioner",
    "enable.idempotence": "enable_idempotence",
    "retries": "retries",
    "delivery.timeout.ms": "delivery_timeout_ms",
    "transaction.timeout.ms": "transaction_timeout_ms",
}
_SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
    "failondataloss",
    "includeheaders",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "kafkaconsumer.polltimeoutms",
    "groupidprefix",
}
# Options Spark itself passes to a source or sink along with the user's.
_ENGINE_OPTIONS = {"path", "checkpointlocation", "queryname"}
_SOURCE_OPTIONS |= _ENGINE_OPTIONS
_SINK_OPTIONS = {
    "topic",
    "includeheaders",
    "deliveryguarantee",
    "transactionalidprefix",
    "writeversion",
} | _ENGINE_OPTIONS


class OptionError(ValueError):
    """An option Spark's Kafka connector would refuse, or one that conflicts with another."""


# An offset spec: "earliest"/"latest" for every partition, or explicit per-partition numbers.
OffsetSpec = Literal["earliest", "latest"] | dict[tuple[str, int], int]
# A timestamp spec: one time for every partition, or per-partition times.
TimestampSpec = int | dict[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class Subscription:
    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribepattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)


# kafka.* settings that say how to reach a secured cluster (security.protocol, sasl.*,
# ssl.*): passed to every client the connector makes, driver and executors alike.
SECURITY_PREFIXES = ("security.", "sasl.", "ssl.")
Security = tuple[tuple[str, str], ...]  # sorted (name, value): hashable and picklable


@dataclass(frozen=True, slots=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: TimestampSpec | None = None
    ending_timestamp: TimestampSpec | None = None
    timestamp_not_found: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    # kafka.isolation.level: 1 reads only committed transactions, up to the last stable
    # offset; 0 (Spark's default, read_uncommitted) reads up to the high watermark.
    isolation: int = 0
    security: Security = field(default=(), repr=False)  # passwords


@dataclass(frozen=True, slots=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    producer: dict[str, Any] = field(default_factory=dict)
    security: Security = field(default=(), repr=False)  # passwords
    # deliveryGuarantee=exactly-once: each task's rows in one transaction (spark/exactly_once).
    exactly_once: bool = False
    # The writer's stable name (default: the streaming query's id, or one per batch job).
    transactional_id_prefix: str | None = None
    # The write's version (default: the micro-batch id, or 0 for a batch job).
    write_version: int | None = None


def _security(passed: dict[str, str]) -> Security:
    """The security settings among the kafka.* ones, checked now (one clear message
    at load()/save(), not a failed task)."""
    from partita.client.security import security_of  # noqa: PLC0415
    from partita.errors import KafkaError  # noqa: PLC0415

    chosen = tuple(sorted((k, v) for k, v in passed.items() if k.startswith(SECURITY_PREFIXES)))
    try:
        security_of(chosen)
    except KafkaError as exc:
        raise OptionError(f"kafka.* security settings: {exc.message}") from None
    return chosen


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark treats data source option names case-insensitively.
    return {k.lower(): v for k, v in options.items()}


def _bootstrap(options: dict[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers") or options.get("partita.bootstrap.servers")
    if not servers:
        raise OptionError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring the partita "
            "(Kafka) connection, e.g. .option('kafka.bootstrap.servers', '127.0.0.1:9092')"
        )
    return servers


def _client_options(
    options: dict[str, str], allowed: set[str], refused: Mapping[str, str | None], role: str
) -> dict[str, str]:
    """The ``kafka.*`` settings, after refusing the ones the connector owns."""
    passed: dict[str, str] = {}
    for name, value in options.items():
        if name.startswith(("kafka.", "partita.")):
            setting = name.split(".", 1)[1]
            if setting in refused and refused[setting] is not None:
                raise OptionError(
                    f"Kafka option '{setting}' is not supported by the {role}: {refused[setting]}"
                )
            passed[setting] = value
        elif name not in allowed:
            raise OptionError(
                f"Unknown option '{name}' for the partita {role}. Options are "
                f"{', '.join(sorted(allowed - _ENGINE_OPTIONS))} and kafka.* client settings."
            )
    return passed


def _int(options: dict[str, str], name: str, minimum: int = 1) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"Option '{name}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"Option '{name}' must be >= {minimum}, got {value}")
    return value


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(f"Option '{name}' must be true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def parse_duration_ms(raw: str) -> int:
    """Spark's time strings for ``maxTriggerDelay``: '15m', '30s', '500ms', '1h', or ms."""
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", raw.lower())
    if match is None:
        raise OptionError(f"Option 'maxTriggerDelay' must be a duration like '15m', got {raw!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
    return int(match.group(1)) * unit[match.group(2) or "ms"]


def _subscription(options: dict[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in options]
    if len(given) > 1:
        raise OptionError(
            "Only one of the following options can be specified for the partita source: "
            f"subscribe, subscribePattern, assign (got {', '.join(given)})"
        )
    if not given:
        raise OptionError(
            "One of the following options must be specified for the partita source: "
            "subscribe, subscribePattern, assign"
        )
    kind: SubscriptionKind = given[0]
    raw = options[kind]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(f"No topics to subscribe to in subscribe={raw!r}")
        return Subscription(kind, topics=topics)
    if kind == "subscribepattern":
        if not raw.strip():
            raise OptionError("Pattern to subscribe is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"subscribePattern {raw!r} is not a valid regex: {exc}") from None
        return Subscription(kind, pattern=raw)
    try:
        parsed = json.loads(raw)
        partitions = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f'assign must be JSON like {{"topicA":[0,1],"topicB":[2,4]}}, got {raw!r}'
        ) from None
    if not partitions:
        raise OptionError(f"No partitions to assign in assign={raw!r}")
    return Subscription(kind, partitions=partitions)


def _per_partition_json(raw: str, name: str) -> dict[tuple[str, int], int]:
    try:
        parsed = json.loads(raw)
        return {
            (str(topic), int(partition)): int(value)
            for topic, partitions in parsed.items()
            for partition, value in partitions.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise OptionError(
            f"{name} must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, got {raw!r}'
        ) from None


def _offset_spec(
    options: dict[str, str], name: str, default: Literal["earliest", "latest"]
) -> OffsetSpec:
    raw = options.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        return word  # type: ignore[return-value]
    return _per_partition_json(raw, name)


def _timestamp_spec(
    options: dict[str, str], single: str, per_partition: str
) -> TimestampSpec | None:
    # Spark's precedence: a global timestamp beats the per-partition JSON.
    if single in options:
        value = _int(options, single, minimum=0)
        assert value is not None
        return value
    if per_partition in options:
        return _per_partition_json(options[per_partition], per_partition)
    return None


def parse_source_options(options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
    """Parse and check a source's options; ``streaming=None`` checks only what batch and
    streaming reads share (used when Spark asks for the schema, before it says which)."""
    lowered = _lower(options)
    bootstrap = _bootstrap(lowered)
    passed = _client_options(lowered, _SOURCE_OPTIONS, _REFUSED_CONSUMER_OPTIONS, "source")
    security = _security(passed)
    isolation = _isolation(passed.get("isolation.level", "read_uncommitted"))
    subscription = _subscription(lowered)
    starting = _offset_spec(lowered, "startingoffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(lowered, "endingoffsets", "latest")
    starting_ts = _timestamp_spec(lowered, "startingtimestamp", "startingoffsetsbytimestamp")
    ending_ts = _timestamp_spec(lowered, "endingtimestamp", "endingoffsetsbytimestamp")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            f"startingOffsetsByTimestampStrategy must be 'error' or 'latest', got {strategy!r}"
        )

    if streaming is None:
        pass
    elif streaming:
        for batch_only in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if batch_only in lowered:
                raise OptionError(
                    f"Ending offset option '{batch_only}' is not valid in streaming queries"
                )
    else:
        for stream_only in ("maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay"):
            if stream_only in lowered:
                raise OptionError(f"Option '{stream_only}' is only valid in streaming queries")
        # A batch read has fixed ends: it cannot start at "latest" nor end at "earliest".
        for spec, side, refused, word in (
            (starting, "starting", LATEST, "latest"),
            (ending, "ending", EARLIEST, "earliest"),
        ):
            if spec == word:
                raise OptionError(f"{side} offset can't be {word} for batch queries on partita")
            for (topic, partition), offset in spec.items() if isinstance(spec, dict) else ():
                if offset == refused:
                    raise OptionError(
                        f"{side}Offsets for {topic}-{partition} can't be {word} for batch "
                        "queries on partita"
                    )
    for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
        if isinstance(spec, dict):
            for (topic, partition), offset in spec.items():
                if offset < EARLIEST:
                    raise OptionError(f"{name} for {topic}-{partition} is invalid: {offset}")
            if subscription.kind == "assign" and set(spec) != set(subscription.partitions):
                raise OptionError(
                    f"{name} names partitions {sorted(spec)} but assign is "
                    f"{sorted(subscription.partitions)}; they must be the same"
                )

    max_offsets = _int(lowered, "maxoffsetspertrigger")
    min_offsets = _int(lowered, "minoffsetspertrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise OptionError(
            f"minOffsetsPerTrigger ({min_offsets}) can't be greater than "
            f"maxOffsetsPerTrigger ({max_offsets})"
        )
    delay = lowered.get("maxtriggerdelay")
    return SourceOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_timestamp=starting_ts,
        ending_timestamp=ending_ts,
        timestamp_not_found=strategy,  # type: ignore[arg-type]
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=parse_duration_ms(delay) if delay else 15 * 60 * 1000,
        min_partitions=_int(lowered, "minpartitions"),
        max_records_per_partition=_int(lowered, "maxrecordsperpartition"),
        fail_on_data_loss=_bool(lowered, "failondataloss", True),
        include_headers=_bool(lowered, "includeheaders", False),
        poll_timeout_ms=_int(lowered, "kafkaconsumer.polltimeoutms") or 120_000,
        isolation=isolation,
        security=security,
    )


def _isolation(level: str) -> int:
    chosen = level.strip().lower()
    if chosen not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            f"kafka.isolation.level must be read_uncommitted or read_committed, not {level!r}"
        )
    return 1 if chosen == "read_committed" else 0


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    lowered = _lower(options)
    bootstrap = _bootstrap(lowered)
    passed = _client_options(lowered, _SINK_OPTIONS, _REFUSED_PRODUCER_OPTIONS, "sink")
    producer: dict[str, Any] = {}
    for setting, value in passed.items():
        if setting == "bootstrap.servers" or setting.startswith(SECURITY_PREFIXES):
            continue
        target = _PRODUCER_OPTIONS.get(setting)
        if target is None:
            raise OptionError(
                f"Kafka producer option '{setting}' is not supported by the partita sink; "
                f"supported: {', '.join(sorted(_PRODUCER_OPTIONS))}"
            )
        if target in (
            "linger_ms",
            "batch_size",
            "retries",
            "delivery_timeout_ms",
            "transaction_timeout_ms",
        ):
            try:
                producer[target] = int(value)
            except ValueError:
                raise OptionError(f"kafka.{setting} must be an integer, got {value!r}") from None
        elif target == "enable_idempotence":
            producer[target] = value.strip().lower() == "true"
        else:
            producer[target] = value
    # The sink encodes whole record sets at a time: big batches mean few round trips.
    # 1,000,000 bytes stays under the broker's default max.message.bytes (1,048,588).
    producer.setdefault("batch_size", 1_000_000)
    topic = lowered.get("topic")
    return SinkOptions(
        bootstrap_servers=bootstrap,
        topic=topic or None,
        producer=producer,
        security=_security(passed),
        **_delivery(lowered, producer),
    )


def _delivery(options: dict[str, str], producer: dict[str, Any]) -> dict[str, Any]:
    """The sink's delivery guarantee: at-least-once (Spark's) or exactly-once."""
    guarantee = options.get("deliveryguarantee", "at-least-once").strip().lower()
    if guarantee not in ("at-least-once", "exactly-once"):
        raise OptionError(
            f"deliveryGuarantee must be at-least-once or exactly-once, not {guarantee!r}"
        )
    exactly_once = guarantee == "exactly-once"
    prefix = options.get("transactionalidprefix")
    version = _int(options, "writeversion", minimum=0)
    if not exactly_once:
        for name in ("transactionalidprefix", "writeversion"):
            if name in options:
                raise OptionError(f"Option '{name}' needs deliveryGuarantee=exactly-once")
        return {}
    if producer.get("enable_idempotence") is False or str(producer.get("acks", "all")) not in (
        "all",
        "-1",
    ):
        raise OptionError("deliveryGuarantee=exactly-once needs acks=all and idempotence")
    if prefix is not None and not prefix.strip():
        raise OptionError("transactionalIdPrefix must not be empty")
    return {"exactly_once": True, "transactional_id_prefix": prefix, "write_version": version}
