"""Kafka's ``__transaction_state`` record layouts, and which partition holds an id.

Keys and values start with an int16 version, then fields in Kafka's classic encoding
(int16-length strings, big-endian integers), as ``kafka-dump-log
--transaction-log-decoder`` reads them:

    TransactionLogKey   v0: transactional id
    TransactionLogValue v0: producer id, producer epoch, transaction timeout (ms),
                            state code, partitions (topic, [partition]) or null,
                            last update (ms), transaction start (ms)

A null value is a tombstone: the compacted topic then forgets the id. Kafka 4 writes
value version 1 (the same fields, flexible, with transaction version 2's extra producer
ids as tagged fields); partita writes and reads version 0, which Kafka 4 still reads.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from partita.coordinator.offset_records import group_partition
from partita.coordinator.transaction_machine import TxnMetadata, TxnState
from partita.errors import CorruptRecordError

TRANSACTION_TOPIC = "__transaction_state"


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``:
    the same rule that places a group."""
    return group_partition(transactional_id, partitions)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">h", len(data)) + data


def transaction_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def transaction_value(metadata: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(metadata.partitions):
        by_topic[topic].append(partition)
    parts = [
        struct.pack(
            ">hqhib",
            0,
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.timeout_ms,
            int(metadata.state),
        )
    ]
    if metadata.state == TxnState.EMPTY and not by_topic:
        parts.append(struct.pack(">i", -1))  # Kafka writes null for an empty id
    else:
        parts.append(struct.pack(">i", len(by_topic)))
        for topic, numbers in by_topic.items():
            parts.append(_string(topic) + struct.pack(f">i{len(numbers)}i", len(numbers), *numbers))
    parts.append(struct.pack(">qq", metadata.last_update_ms, metadata.start_ms))
    return b"".join(parts)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple[int, ...]:
        try:
            values = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error:
            raise CorruptRecordError("a __transaction_state record ends early") from None
        self.pos += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (length,) = self.take(">h")
        if length < 0 or self.pos + length > len(self.data):
            raise CorruptRecordError("a __transaction_state record has a bad string")
        text = self.data[self.pos : self.pos + length].decode("utf-8", errors="replace")
        self.pos += length
        return text


def read_transaction_key(key: bytes) -> str:
    reader = _Reader(key)
    (version,) = reader.take(">h")
    if version != 0:
        raise CorruptRecordError(f"unknown __transaction_state key version {version}")
    return reader.string()


def read_transaction_value(transactional_id: str, value: bytes | None) -> TxnMetadata | None:
    """The state a value holds; None for a tombstone."""
    if value is None:
        return None
    reader = _Reader(value)
    version, producer_id, epoch, timeout_ms, code = reader.take(">hqhib")
    if version != 0:
        raise CorruptRecordError(f"unknown __transaction_state value version {version}")
    try:
        state = TxnState(code)
    except ValueError:
        raise CorruptRecordError(f"unknown transaction state code {code}") from None
    partitions: set[tuple[str, int]] = set()
    (topics,) = reader.take(">i")
    for _ in range(max(topics, 0)):
        topic = reader.string()
        (count,) = reader.take(">i")
        if count < 0 or count > len(value):
            raise CorruptRecordError("a __transaction_state record has a bad partition count")
        partitions.update((topic, p) for p in reader.take(f">{count}i"))
    last_update_ms, start_ms = reader.take(">qq")
    return TxnMetadata(
        transactional_id, producer_id, epoch, timeout_ms, state, frozenset(partitions),
        start_ms, last_update_ms,
    )  # fmt: skip
