"""Per-topic log settings, under Kafka's names and with Kafka's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from partita.errors import InvalidConfigurationError

LONG_MAX = 2**63 - 1

# Kafka config name -> (attribute, kind). The attribute names are the Kafka names with
# dots turned into underscores, so code reads like the documentation.
_KNOWN: dict[str, str] = {
    "segment.bytes": "int",
    "segment.ms": "int",
    "segment.jitter.ms": "int",
    "segment.index.bytes": "int",
    "index.interval.bytes": "int",
    "retention.ms": "int",
    "retention.bytes": "int",
    "max.message.bytes": "int",
    "cleanup.policy": "policy",
    "delete.retention.ms": "int",
    "min.cleanable.dirty.ratio": "float",
    "min.compaction.lag.ms": "int",
    "max.compaction.lag.ms": "int",
    "flush.messages": "int",
    "flush.ms": "int",
    "file.delete.delay.ms": "int",
    "message.timestamp.type": "timestamp_type",
    "min.insync.replicas": "int",
    "unclean.leader.election.enable": "bool",
    "compression.type": "compression",
    # Which replicas a reassignment throttles (kafka-reassign-partitions --throttle sets
    # them). partita throttles every replica a reassignment adds, whatever they say; they
    # are accepted and kept so that Kafka's tools work unchanged.
    "leader.replication.throttled.replicas": "replicas",
    "follower.replication.throttled.replicas": "replicas",
}

_MINIMUMS: dict[str, int] = {
    "segment.bytes": 14,  # Kafka's floor: one batch header must fit
    "segment.ms": 1,
    "segment.index.bytes": 8,
    "index.interval.bytes": 0,
    "retention.ms": -1,
    "retention.bytes": -1,
    "max.message.bytes": 0,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
    "flush.messages": 1,
    "flush.ms": 0,
    "file.delete.delay.ms": 0,
    "min.insync.replicas": 1,
    "segment.jitter.ms": 0,
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    cleanup_policy: tuple[str, ...] = ("delete",)
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """A copy with Kafka-named string settings applied; unknown names are refused."""
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            changes[name.replace(".", "_")] = parse_value(name, raw)
        return replace(self, **changes)

    def to_kafka(self) -> dict[str, str]:
        """Every setting under its Kafka name, as the string a client would see."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = str(value).lower()
            out[f.name.replace("_", ".")] = str(value)
        return out


def is_known(name: str) -> bool:
    return name in _KNOWN


def parse_value(name: str, raw: str) -> Any:
    kind = _KNOWN.get(name)
    if kind is None:
        raise InvalidConfigurationError(f"unknown topic config {name!r}")
    text = str(raw).strip()
    try:
        if kind == "int":
            value: Any = int(text)
            floor = _MINIMUMS.get(name)
            if floor is not None and value < floor:
                raise InvalidConfigurationError(f"{name}={value} is below the minimum {floor}")
            return value
        if kind == "float":
            ratio = float(text)
            if not 0.0 <= ratio <= 1.0:
                raise InvalidConfigurationError(f"{name}={ratio} must be between 0 and 1")
            return ratio
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise InvalidConfigurationError(f"{name}={text!r} must be true or false")
            return text.lower() == "true"
    except ValueError:
        raise InvalidConfigurationError(f"{name}={text!r} is not a valid {kind}") from None
    if kind == "replicas":
        # "", "*", or partition:broker pairs, as Kafka accepts them.
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        if text not in ("", "*") and not all(
            len(pair.split(":")) == 2 and all(x.isdigit() for x in pair.split(":"))
            for pair in pairs
        ):
            raise InvalidConfigurationError(
                f"{name}={text!r} must be '*' or partition:broker pairs, e.g. 0:1,0:2"
            )
        return ",".join(pairs) if text != "*" else "*"
    if kind == "policy":
        policies = tuple(sorted({p.strip().lower() for p in text.split(",") if p.strip()}))
        if not policies or not set(policies) <= {"compact", "delete"}:
            raise InvalidConfigurationError(
                f"cleanup.policy={text!r}: use delete, compact or compact,delete"
            )
        return policies
    if kind == "timestamp_type":
        if text not in ("CreateTime", "LogAppendTime"):
            raise InvalidConfigurationError(
                f"message.timestamp.type={text!r}: use CreateTime or LogAppendTime"
            )
        return text
    if kind == "compression":
        if text not in ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"):
            raise InvalidConfigurationError(f"compression.type={text!r} is not a codec")
        return text
    raise InvalidConfigurationError(f"unhandled config kind for {name}")
