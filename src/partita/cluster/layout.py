"""Where cluster metadata lives in the store, and how each value is written and checked.

    <prefix>/cluster                          the cluster id
    <prefix>/brokers/<id>                     a live broker (on its lease): host, port, rack
    <prefix>/controller                       the active controller (on its lease)
    <prefix>/topics/<name>                    topic id, partition count, configs
    <prefix>/partitions/<topic id>/<n>        replicas, leader, epochs, ISR
    <prefix>/producer-ids                     the next unallocated producer id
    <prefix>/scram/<mechanism>/<user>         a SCRAM credential: salt, iterations, keys
    <prefix>/acls/<digest>                    one ACL binding, keyed by a digest of itself
    <prefix>/quotas/<digest>                  one client-quota entity and its quotas

Partition keys sit under the topic *id*, not its name: a topic deleted and created again
never sees the old one's partitions, and a create that fails half-way leaves keys under
an id nothing refers to.

Every value is JSON and is checked on the way in: a malformed or hostile value (wrong
types, negative ids, absurd sizes) raises ``BadValueError`` and the image skips and logs
it, so a bad write to etcd can never crash a broker.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from partita.cluster.model import PartitionState, valid_topic_name
from partita.security.acl import (
    AclBinding,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from partita.security.scram import HASHES as SCRAM_MECHANISMS
from partita.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential

MAX_NODE_ID = 2**31 - 1
MAX_REPLICAS = 1_000


class BadValueError(ValueError):
    """A metadata value that does not follow the layout."""


def advertised(
    host: str, port: int, endpoints: tuple[tuple[str, str, int], ...]
) -> set[tuple[str, int]]:
    """Every (host, port) a broker advertises, on any listener (a registration without
    endpoints has one listener, at host:port)."""
    return {(h, p) for _name, h, p in endpoints} or {(host, port)}


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    host: str
    port: int
    rack: str | None
    epoch: int  # the registration key's create revision: new on every start
    state: str = "running"  # starting -> running -> shutting_down
    # Replicas this broker holds but cannot serve (their log went offline, a full disk):
    # the controller takes them out of the ISR and away from leadership, as Kafka's
    # controller does with a broker's failed log directory.
    offline: frozenset[tuple[uuid.UUID, int]] = frozenset()
    endpoints: tuple[tuple[str, str, int], ...] = ()  # every listener: name, host, port

    @property
    def electable(self) -> bool:
        return self.state == "running"

    @property
    def addresses(self) -> set[tuple[str, int]]:
        return advertised(self.host, self.port, self.endpoints)


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]


class Layout:
    def __init__(self, prefix: str = "partita") -> None:
        self.root = "/" + prefix.strip("/") + "/"
        self.cluster = self.root + "cluster"
        self.controller = self.root + "controller"
        self.producer_ids = self.root + "producer-ids"
        self.broker_configs = self.root + "configs/brokers"
        self.brokers = self.root + "brokers/"
        self.topics = self.root + "topics/"
        self.partitions = self.root + "partitions/"
        self.scram = self.root + "scram/"
        self.acls = self.root + "acls/"
        self.quotas = self.root + "quotas/"

    def broker(self, node_id: int) -> str:
        return f"{self.brokers}{node_id}"

    def topic(self, name: str) -> str:
        return self.topics + name

    def topic_partitions(self, topic_id: uuid.UUID) -> str:
        return f"{self.partitions}{topic_id}/"

    def partition(self, topic_id: uuid.UUID, index: int) -> str:
        return f"{self.partitions}{topic_id}/{index}"

    def scram_credential(self, mechanism: str, user: str) -> str:
        # User names may hold any character: quoted, so a "/" cannot make another key.
        return f"{self.scram}{mechanism}/{quote(user, safe='')}"

    def parse_scram_key(self, key: str) -> tuple[str, str]:
        mechanism, sep, user = key.removeprefix(self.scram).partition("/")
        if not sep or mechanism not in SCRAM_MECHANISMS or not user:
            raise BadValueError(f"SCRAM key {key!r} names no mechanism and user")
        return mechanism, unquote(user)

    def acl(self, binding: AclBinding) -> str:
        # One key per binding, named by its content: creating the same binding twice is
        # one key (Kafka keeps a set), and concurrent creates never compare-and-swap.
        digest = hashlib.sha256(encode_acl(binding)).hexdigest()[:32]
        return f"{self.acls}{digest}"

    def client_quota(self, entity: QuotaEntity) -> str:
        digest = hashlib.sha256(_dump([list(part) for part in entity])).hexdigest()[:32]
        return f"{self.quotas}{digest}"

    def parse_partition_key(self, key: str) -> tuple[uuid.UUID, int]:
        rest = key.removeprefix(self.partitions)
        topic_id, _, index = rest.partition("/")
        if not index.isdigit():
            raise BadValueError(f"partition key {key!r} has no partition number")
        try:
            return uuid.UUID(topic_id), int(index)
        except ValueError as exc:
            raise BadValueError(f"partition key {key!r} has no topic id") from exc


# -- values --------------------------------------------------------------------------


def _load(raw: bytes) -> Any:
    if len(raw) > 1_000_000:
        raise BadValueError(f"value of {len(raw)} bytes is too large")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadValueError(f"not JSON: {exc}") from exc


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _int(data: dict[str, Any], name: str, low: int, high: int) -> int:
    value = data.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise BadValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _node_list(data: dict[str, Any], name: str) -> list[int]:
    value = data.get(name)
    if not isinstance(value, list) or len(value) > MAX_REPLICAS:
        raise BadValueError(f"{name} must be a list of broker ids, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise BadValueError(f"{name} must hold broker ids, got {value!r}")
    if len(set(value)) != len(value):
        raise BadValueError(f"{name} names a broker twice: {value!r}")
    return list(value)


def _object(raw: bytes) -> dict[str, Any]:
    data = _load(raw)
    if not isinstance(data, dict):
        raise BadValueError("value is not a JSON object")
    return data


BROKER_STATES = ("starting", "running", "shutting_down")


MAX_OFFLINE_REPLICAS = 1_000_000


def encode_broker(
    host: str,
    port: int,
    rack: str | None,
    state: str,
    offline: frozenset[tuple[uuid.UUID, int]] = frozenset(),
    endpoints: tuple[tuple[str, str, int], ...] = (),
) -> bytes:
    assert state in BROKER_STATES
    value: dict[str, Any] = {"host": host, "port": port, "rack": rack, "state": state}
    if endpoints:
        value["listeners"] = [list(e) for e in endpoints]
    if offline:
        value["offline"] = sorted([str(topic_id), index] for topic_id, index in offline)
    return _dump(value)


def _offline(value: object) -> frozenset[tuple[uuid.UUID, int]]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or len(value) > MAX_OFFLINE_REPLICAS:
        raise BadValueError(f"broker offline replicas must be a list, got {value!r:.100}")
    replicas = set()
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], int)
            or isinstance(entry[1], bool)
            or not 0 <= entry[1] < 2**31
        ):
            raise BadValueError(f"an offline replica is [topic id, partition], got {entry!r:.100}")
        try:
            replicas.add((uuid.UUID(entry[0]), entry[1]))
        except ValueError as exc:
            raise BadValueError(f"bad topic id in offline replicas: {entry[0]!r:.100}") from exc
    return frozenset(replicas)


def decode_broker(node_id: int, raw: bytes, epoch: int) -> BrokerRegistration:
    data = _object(raw)
    host = data.get("host")
    if not isinstance(host, str) or not host or len(host) > 255:
        raise BadValueError(f"broker host must be a name, got {host!r}")
    rack = data.get("rack")
    if rack is not None and (not isinstance(rack, str) or len(rack) > 255):
        raise BadValueError(f"broker rack must be a string, got {rack!r}")
    return BrokerRegistration(
        node_id,
        host,
        _int(data, "port", 1, 65535),
        rack or None,
        epoch,
        _state(data.get("state")),
        _offline(data.get("offline")),
        _endpoints(data.get("listeners")),
    )


MAX_LISTENERS = 32


def _endpoints(value: object) -> tuple[tuple[str, str, int], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_LISTENERS:
        raise BadValueError(f"broker listeners must be a list, got {value!r:.100}")
    out = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not all(isinstance(part, str) and 0 < len(part) <= 255 for part in entry[:2])
            or not isinstance(entry[2], int)
            or isinstance(entry[2], bool)
            or not 0 < entry[2] < 65536
        ):
            raise BadValueError(f"a broker listener is [name, host, port], got {entry!r:.100}")
        out.append((entry[0], entry[1], entry[2]))
    return tuple(out)


def _state(value: object) -> str:
    if value not in BROKER_STATES:
        raise BadValueError(f"broker state must be one of {BROKER_STATES}, got {value!r}")
    assert isinstance(value, str)
    return value


def encode_controller(node_id: int) -> bytes:
    return _dump({"broker_id": node_id})


def decode_controller(raw: bytes) -> int:
    return _int(_object(raw), "broker_id", 0, MAX_NODE_ID)


def encode_topic(record: TopicRecord) -> bytes:
    return _dump(
        {
            "topic_id": str(record.topic_id),
            "partitions": record.partitions,
            "configs": record.configs,
        }
    )


def decode_topic(name: str, raw: bytes) -> TopicRecord:
    reason = valid_topic_name(name)
    if reason:
        raise BadValueError(reason)
    data = _object(raw)
    try:
        topic_id = uuid.UUID(str(data.get("topic_id")))
    except ValueError as exc:
        raise BadValueError(f"topic id is not a UUID: {data.get('topic_id')!r}") from exc
    configs = data.get("configs", {})
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        raise BadValueError("topic configs must map names to strings")
    return TopicRecord(name, topic_id, _int(data, "partitions", 1, 1_000_000), dict(configs))


def encode_partition(state: PartitionState) -> bytes:
    return _dump(state.to_json())


def decode_partition(raw: bytes) -> PartitionState:
    data = _object(raw)
    replicas = _node_list(data, "replicas")
    isr = _node_list(data, "isr")
    if not replicas:
        raise BadValueError("a partition needs at least one replica")
    if not set(isr) <= set(replicas):
        raise BadValueError(f"ISR {isr} holds brokers that are not replicas {replicas}")
    leader = _int(data, "leader", -1, MAX_NODE_ID)
    if leader != -1 and leader not in isr:
        raise BadValueError(f"leader {leader} is not in the ISR {isr}")
    adding = _node_list(data, "adding") if "adding" in data else []
    removing = _node_list(data, "removing") if "removing" in data else []
    if not (set(adding) | set(removing)) <= set(replicas) or set(adding) & set(removing):
        raise BadValueError(f"reassignment {adding} / {removing} does not fit {replicas}")
    return PartitionState(
        replicas,
        leader,
        _int(data, "leader_epoch", 0, 2**31 - 1),
        isr,
        _int(data, "partition_epoch", 0, 2**31 - 1),
        adding,
        removing,
    )


def encode_producer_ids(next_id: int) -> bytes:
    return _dump({"next": next_id})


def decode_producer_ids(raw: bytes) -> int:
    return _int(_object(raw), "next", 0, 2**63 - 1)


# Broker settings that may change while the cluster runs (Kafka's dynamic broker configs,
# cluster-wide defaults); everything else is static, given at start.
DYNAMIC_BROKER_CONFIGS = frozenset(
    {
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
        # Kafka's tools set and clear it with the throttles; partita has one log
        # directory per broker, so it is kept and has no effect.
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)


def encode_broker_configs(configs: dict[str, str]) -> bytes:
    return _dump(configs)


def decode_broker_configs(raw: bytes) -> dict[str, str]:
    data = _object(raw)
    out = {}
    for key, value in data.items():
        if key not in DYNAMIC_BROKER_CONFIGS or not isinstance(value, str):
            raise BadValueError(f"{key}={value!r} is not a dynamic broker config")
        if not value.isdigit():
            raise BadValueError(f"{key} must be a number of bytes/s, got {value!r}")
        out[key] = value
    return out


def encode_scram_credential(credential: ScramCredential) -> bytes:
    return _dump(
        {
            "salt": base64.b64encode(credential.salt).decode("ascii"),
            "iterations": credential.iterations,
            "stored_key": base64.b64encode(credential.stored_key).decode("ascii"),
            "server_key": base64.b64encode(credential.server_key).decode("ascii"),
        }
    )


def decode_scram_credential(mechanism: str, raw: bytes) -> ScramCredential:
    data = _object(raw)

    def b64(name: str) -> bytes:
        value = data.get(name)
        try:
            decoded = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadValueError(f"{name} is not base64") from exc
        if not isinstance(value, str) or not 0 < len(decoded) <= 128:
            raise BadValueError(f"{name} must be 1 to 128 bytes of base64")
        return decoded

    return ScramCredential(
        mechanism,
        b64("salt"),
        _int(data, "iterations", MIN_ITERATIONS, MAX_ITERATIONS),
        b64("stored_key"),
        b64("server_key"),
    )


MAX_ACL_FIELD = 1_000  # characters in a resource name, principal or host


def encode_acl(binding: AclBinding) -> bytes:
    return _dump(
        {
            "resource_type": binding.resource_type.name,
            "resource_name": binding.resource_name,
            "pattern_type": binding.pattern_type.name,
            "principal": binding.principal,
            "host": binding.host,
            "operation": binding.operation.name,
            "permission": binding.permission.name,
        }
    )


def decode_acl(raw: bytes) -> AclBinding:
    data = _object(raw)

    def text(name: str) -> str:
        value = data.get(name)
        if not isinstance(value, str) or not 0 < len(value) <= MAX_ACL_FIELD:
            raise BadValueError(f"{name} must be a string of 1 to {MAX_ACL_FIELD} characters")
        return value

    try:
        binding = AclBinding(
            ResourceType[text("resource_type")],
            text("resource_name"),
            PatternType[text("pattern_type")],
            text("principal"),
            text("host"),
            Operation[text("operation")],
            Permission[text("permission")],
        )
        return binding.validate()
    except (KeyError, InvalidAclError) as exc:
        raise BadValueError(f"not an ACL binding: {exc}") from exc


# A client-quota entity, Kafka's: (type, name) pairs, type "user" or "client-id" (in
# that order), name None for the type's default ("<default>" in Kafka's tools).
QuotaEntity = tuple[tuple[str, str | None], ...]
QUOTA_ENTITY_TYPES = ("user", "client-id")
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
MAX_QUOTA = 1e18


def encode_client_quota(entity: QuotaEntity, quotas: dict[str, float]) -> bytes:
    return _dump({"entity": [list(part) for part in entity], "quotas": quotas})


def decode_client_quota(raw: bytes) -> tuple[QuotaEntity, dict[str, float]]:
    data = _object(raw)
    parts = data.get("entity")
    if not isinstance(parts, list) or not 0 < len(parts) <= len(QUOTA_ENTITY_TYPES):
        raise BadValueError("a quota entity is a list of [type, name] pairs")
    entity: list[tuple[str, str | None]] = []
    for part in parts:
        if (
            not isinstance(part, list)
            or len(part) != 2
            or part[0] not in QUOTA_ENTITY_TYPES
            or not (part[1] is None or (isinstance(part[1], str) and len(part[1]) <= 1000))
        ):
            raise BadValueError(f"a quota entity part is [type, name], got {part!r:.100}")
        entity.append((part[0], part[1]))
    if [t for t, _ in entity] != [t for t in QUOTA_ENTITY_TYPES if t in dict(entity)]:
        raise BadValueError("a quota entity names each type once, user before client-id")
    quotas = data.get("quotas")
    if not isinstance(quotas, dict) or not quotas:
        raise BadValueError("quotas must be a non-empty object")
    out: dict[str, float] = {}
    for key, value in quotas.items():
        if (
            key not in QUOTA_KEYS
            or not isinstance(value, int | float)
            or isinstance(value, bool)
            or not 0 < value <= MAX_QUOTA
        ):
            raise BadValueError(f"quota {key}={value!r} is not one partita has")
        out[key] = float(value)
    return tuple(entity), out
