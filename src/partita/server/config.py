"""Broker settings under Kafka's names and defaults, from ``--set k=v`` and
``server.properties`` files, and the broker-to-topic config mapping Kafka uses."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from partita.errors import InvalidConfigurationError
from partita.storage.config import LogConfig, parse_value
from partita.storage.open_files import default_capacity

# Broker setting -> topic setting it supplies the default for (Kafka's config synonyms).
BROKER_TO_TOPIC: dict[str, str] = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.message.timestamp.type": "message.timestamp.type",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
}

# Kafka also accepts coarser units for some settings; the finest one given wins.
_UNIT_ALIASES: dict[str, tuple[str, int]] = {
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 3_600_000),
}

_TOPIC_DEFAULTS = LogConfig().to_kafka()

BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "0",
    "broker.rack": "",
    # Where clients are told to connect (Metadata, FindCoordinator); empty: the listener.
    "advertised.listeners": "",
    # NAME://HOST:PORT,...; empty: PLAINTEXT on --listen.
    "listeners": "",
    "inter.broker.listener.name": "",  # empty: the PLAINTEXT listener, else the first
    # The inter-broker listener's SASL mechanism; the broker logs in with the username and
    # password of that mechanism's JAAS config (listener.name.<l>.<mech>.sasl.jaas.config).
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    ),
    "sasl.enabled.mechanisms": "GSSAPI",
    "connection.failed.authentication.delay.ms": "100",
    "connections.max.reauth.ms": "0",
    "sasl.server.max.receive.size": "524288",
    # ACL authorization (#28): Kafka's authorizer class names turn it on; empty: off,
    # every request allowed (Kafka's default).
    "authorizer.class.name": "",
    "super.users": "",  # User:alice;User:bob -- allowed everything
    "allow.everyone.if.no.acl.found": "false",
    # Client quotas' sampled rates (Kafka's): windows kept, and each one's length.
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
    # A secured etcd (partita's own settings; Kafka has no etcd): the CA of etcd's
    # certificate, a client certificate and key (etcd --client-cert-auth), the name in
    # etcd's certificate if not the host, and a user of etcd's own authentication.
    "etcd.ssl.ca.location": "",
    "etcd.ssl.certificate.location": "",
    "etcd.ssl.key.location": "",
    "etcd.ssl.server.name": "",
    "etcd.username": "",
    "etcd.password": "",
    "num.partitions": "1",
    # Partition replicas this broker may hold (KIP-578's name; Kafka has no such limit),
    # checked before a create or CreatePartitions records anything (POLICY_VIOLATION;
    # server/partition_limit.py says why that error). Default: as many as can keep their
    # active segment open at once within the descriptor limit (RLIMIT_NOFILE less a
    # reserve, storage/open_files.py): 16,000 at 20,000 descriptors, 768 at 1,024. More
    # may be set; descriptors stay bounded, files are then reopened as they are used.
    "max.broker.partitions": str(default_capacity()),
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "socket.request.max.bytes": str(100 * 1024 * 1024),
    # Kafka's defaults (-1: the system's, autotuned). They are not only memory: with the
    # send buffer autotuned to megabytes, a 1 MB fetch response lands in a consumer's
    # socket at once and librdkafka read 1 KB records 15-20% slower than with 100 KB
    # in flight at a time (measured, docs/performance.md).
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "log.retention.check.interval.ms": "300000",
    "log.flush.scheduler.interval.ms": str(2**63 - 1),
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "offsets.topic.num.partitions": "50",
    # Kafka's default; a cluster of fewer brokers replicates on all of them.
    "offsets.topic.replication.factor": "3",
    "offsets.retention.minutes": "10080",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "producer.id.expiration.ms": "86400000",
    "replica.lag.time.max.ms": "30000",
    # A cluster member's etcd lease. Kafka's KRaft default is 9000; partita's is 3000 so
    # that a dead broker's partitions fail over in about 3.5 s (etcd's minimum TTL is 2 s,
    # and the broker loop's worst stall measured under load is 35 ms).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "1000",
    # How long a SIGTERM waits for the controller to move this broker's leaderships away.
    "controlled.shutdown.timeout.ms": "10000",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    # KIP-392: org.apache.kafka.common.replica.RackAwareReplicaSelector (or "rack-aware")
    # tells consumers with a client.rack to fetch from an in-sync replica in their rack.
    "replica.selector.class": "",
    # Reassignment throttles, bytes/s (KIP-73); 0: none.
    "leader.replication.throttled.rate": "0",
    "follower.replication.throttled.rate": "0",
    "queued.max.requests": "500",
    **{broker: _TOPIC_DEFAULTS[topic] for broker, topic in BROKER_TO_TOPIC.items()},
}
# message.max.bytes and max.message.bytes share their default.
BROKER_DEFAULTS["log.cleanup.policy"] = "delete"


def read_properties(path: Path) -> dict[str, str]:
    """Kafka's properties syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    a line ending in ``\\`` continued on the next (how a long sasl.jaas.config is
    written). An error names the line, never its text: it may hold a password."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise InvalidConfigurationError(f"cannot read {path}: {reason}") from None
    out: dict[str, str] = {}
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        first = number + 1
        line = lines[number].strip()
        number += 1
        if not line or line.startswith(("#", "!")):
            continue
        while line.endswith("\\") and number < len(lines):
            line = line[:-1] + lines[number].strip()
            number += 1
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise InvalidConfigurationError(f"{path}:{first}: expected key=value")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


_KEY_CHARS = re.compile(r"[A-Za-z0-9._-]*")


def parse_assignments(items: Iterable[str], option: str = "--set") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # Only what can be a key: the text may be 'sasl.password:secret'.
            shown = _KEY_CHARS.match(item.strip())
            named = shown.group(0)[:60] if shown else ""
            raise InvalidConfigurationError(f"{option} expects key=value, got {named!r}...")
        out[key.strip()] = value.strip()
    return out


def is_sensitive(key: str) -> bool:
    """Kafka's PASSWORD-type settings (a JAAS config holds users' passwords; SSL key and
    store passwords): DescribeConfigs reports them as sensitive, with no value."""
    return key.endswith(("sasl.jaas.config", ".password", "ssl.keystore.key"))


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One of ``listeners``: its name, security protocol and address to bind."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(slots=True)
class BrokerConfig:
    values: dict[str, str]
    overridden: set[str]

    @classmethod
    def from_sources(cls, *sources: Mapping[str, str]) -> BrokerConfig:
        values = dict(BROKER_DEFAULTS)
        overridden: set[str] = set()
        for source in sources:
            for given_key, given_value in source.items():
                key, value = given_key, given_value
                if given_key in _UNIT_ALIASES:
                    key, factor = _UNIT_ALIASES[given_key]
                    if key in overridden:
                        continue  # the finer unit was given explicitly
                    try:
                        value = str(int(given_value) * factor)
                    except ValueError:
                        raise InvalidConfigurationError(
                            f"{given_key}={given_value!r} is not a number"
                        ) from None
                values[key] = value
                overridden.add(key)
        config = cls(values, overridden)
        config.validate()
        return config

    def listeners(self, host: str, port: int) -> list[ListenerSpec]:
        """The broker's listeners: ``listeners`` (Kafka's NAME://HOST:PORT,...; each
        protocol from listener.security.protocol.map) when set, else PLAINTEXT on the
        given address."""
        value = self.values.get("listeners", "").strip()
        if not value:
            return [ListenerSpec("PLAINTEXT", "PLAINTEXT", host, port)]
        protocols = dict(
            (key.strip().upper(), protocol.strip().upper())
            for key, _, protocol in (
                pair.partition(":")
                for pair in self.values["listener.security.protocol.map"].split(",")
                if ":" in pair
            )
        )
        specs: list[ListenerSpec] = []
        for entry in (e.strip() for e in value.split(",") if e.strip()):
            name, sep, address = entry.partition("://")
            given_host, colon, given_port = address.rpartition(":")
            if not sep or not name or not colon or not given_port.isdigit():
                raise InvalidConfigurationError(
                    f"listeners={value!r}: expected NAME://HOST:PORT[,NAME://HOST:PORT...]"
                )
            name = name.upper()
            protocol = protocols.get(name)
            if protocol is None:
                raise InvalidConfigurationError(
                    f"listener {name} is not in listener.security.protocol.map"
                )
            if protocol not in SECURITY_PROTOCOLS:
                raise InvalidConfigurationError(
                    f"listener {name}: security protocol {protocol} is not one of "
                    f"{', '.join(SECURITY_PROTOCOLS)}"
                )
            if any(spec.name == name for spec in specs):
                raise InvalidConfigurationError(f"listeners={value!r}: {name} is given twice")
            specs.append(ListenerSpec(name, protocol, given_host or host, int(given_port)))
        return specs

    def advertised(self, listeners: list[ListenerSpec]) -> dict[str, tuple[str, int]]:
        """Where clients are told to reach each listener: ``advertised.listeners``
        (NAME://HOST:PORT per listener; a bare HOST:PORT is the first listener's), else
        the listener's own address."""
        out = {spec.name: (spec.host, spec.port) for spec in listeners}
        value = self.values.get("advertised.listeners", "").strip()
        for entry in (e.strip() for e in value.split(",") if e.strip()):
            name, sep, address = entry.partition("://")
            if not sep:
                name, address = listeners[0].name, entry
            host, colon, port = address.rpartition(":")
            if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise InvalidConfigurationError(
                    f"advertised.listeners={value!r}: expected NAME://HOST:PORT"
                )
            if name.upper() not in out:
                raise InvalidConfigurationError(
                    f"advertised.listeners names {name}, which is not in listeners"
                )
            out[name.upper()] = (host, int(port))
        return out

    def inter_broker_listener(self, listeners: list[ListenerSpec]) -> ListenerSpec:
        """The listener brokers reach each other on: ``inter.broker.listener.name``,
        else the one named PLAINTEXT, else the first."""
        wanted = self.values.get("inter.broker.listener.name", "").strip().upper()
        by_name = {spec.name: spec for spec in listeners}
        if wanted:
            if wanted not in by_name:
                raise InvalidConfigurationError(
                    f"inter.broker.listener.name={wanted} is not in listeners"
                )
            return by_name[wanted]
        return by_name.get("PLAINTEXT", listeners[0])

    def validate(self) -> None:
        listeners = self.listeners("127.0.0.1", 0)
        self.advertised(listeners)
        self.inter_broker_listener(listeners)
        for broker_key, topic_key in BROKER_TO_TOPIC.items():
            parse_value(topic_key, self.values[broker_key])
        for key in (
            "node.id",
            "num.partitions",
            "default.replication.factor",
            "socket.request.max.bytes",
            "socket.send.buffer.bytes",
            "socket.receive.buffer.bytes",
            "offsets.topic.num.partitions",
            "max.broker.partitions",
        ):
            self.get_int(key)
        for key in ("num.partitions", "max.broker.partitions"):
            if self.get_int(key) < 1:
                raise InvalidConfigurationError(f"{key} must be at least 1")

    def get(self, key: str) -> str:
        return self.values[key]

    def get_int(self, key: str) -> int:
        try:
            return int(self.values[key])
        except ValueError:
            raise InvalidConfigurationError(
                f"{key}={self.values[key]!r} is not an integer"
            ) from None

    def get_bool(self, key: str) -> bool:
        return self.values[key].strip().lower() == "true"

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    def topic_defaults(self) -> LogConfig:
        """The LogConfig a topic gets when it overrides nothing."""
        return LogConfig().with_overrides(
            {topic: self.values[broker] for broker, topic in BROKER_TO_TOPIC.items()}
        )

    def topic_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return self.topic_defaults().with_overrides(overrides)
