"""Kafka's transaction markers: the control batch a partition's leader appends when the
transaction coordinator ends a transaction that wrote there (WriteTxnMarkers).

A marker batch has the transactional and control attribute bits set, the producer's id
and epoch, no sequence (-1), and one record:

    key    int16 version (0), int16 type (0 ABORT, 1 COMMIT)
    value  int16 version (0), int32 coordinator epoch   (EndTransactionMarker)

Consumers never see control records; a read_committed consumer uses them to end a
producer's transaction, dropping its records when the marker says ABORT.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from partita.errors import CorruptRecordError
from partita.protocol.record_batch import NO_SEQUENCE, read_header
from partita.protocol.records import Record, build_batch, decode_records

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


def marker_batch(
    marker: TxnMarker, timestamp_ms: int, base_offset: int = 0, partition_leader_epoch: int = -1
) -> bytes:
    """The control batch that ends ``marker.producer_id``'s transaction on a partition."""
    record = Record(
        base_offset,
        timestamp_ms,
        _KEY.pack(0, COMMIT if marker.commit else ABORT),
        _VALUE.pack(0, marker.coordinator_epoch),
    )
    return build_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


def read_marker(batch: bytes | memoryview, pos: int = 0) -> TxnMarker:
    """The marker a control batch holds; CorruptRecordError for anything else."""
    header = read_header(batch, pos)
    if not (header.is_control and header.is_transactional):
        raise CorruptRecordError("not a transaction marker (not a control, transactional batch)")
    _header, records = decode_records(batch, pos)
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptRecordError("a transaction marker batch holds one record with a 4-byte key")
    version, kind = _KEY.unpack_from(records[0].key)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise CorruptRecordError(f"unknown control record (version {version}, type {kind})")
    value = records[0].value or b""
    if len(value) < _VALUE.size:
        raise CorruptRecordError("a transaction marker's value is shorter than 6 bytes")
    _version, coordinator_epoch = _VALUE.unpack_from(value)
    return TxnMarker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch)
