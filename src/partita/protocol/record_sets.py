"""Record sets encoded ahead of time, and the producer batch built around one.

A bulk writer (``bulk_records``) encodes records straight into a buffer that keeps room
for the batch header in front, so that the producer can close the batch in place: the
header is written into that room and the CRC computed over the buffer, and the bytes sent
are the bytes the encoder wrote, never copied.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from partita.protocol.compression import Compression, compress
from partita.protocol.record_batch import (
    CRC_POS,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    TRANSACTIONAL_BIT,
    compute_crc,
)


@dataclass(frozen=True, slots=True)
class RecordSet:
    """Encoded records (offset deltas from 0) ready to become one batch.

    ``buffer`` holds ``HEADER_SIZE`` bytes of room for the batch header, then the records.
    """

    buffer: np.ndarray
    count: int
    first_row: int

    @classmethod
    def of(cls, body: bytes, count: int, first_row: int = 0) -> RecordSet:
        """A record set from already-encoded record bytes (one copy, behind the room)."""
        buffer = np.empty(HEADER_SIZE + len(body), dtype=np.uint8)
        buffer[HEADER_SIZE:] = np.frombuffer(body, dtype=np.uint8)
        return cls(buffer, count, first_row)

    @property
    def body(self) -> memoryview:
        return self.buffer.data[HEADER_SIZE:]


def build_producer_batch(
    records: RecordSet,
    *,
    timestamp: int,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> memoryview:
    """One v2 batch around an encoded record set, as a producer sends it.

    Uncompressed, the batch is the record set's own buffer with the header written into
    its room: build a record set once, since a second build rewrites the first's header.
    """
    if compression == Compression.NONE:
        batch = records.buffer.data
    else:
        payload = compress(compression, bytes(records.body))
        batch = memoryview(bytearray(HEADER_SIZE + len(payload)))
        batch[HEADER_SIZE:] = payload
    size = len(batch)
    HEADER_STRUCT.pack_into(
        batch,
        0,
        0,  # base offset: the broker assigns it
        size - LOG_OVERHEAD,
        NO_PARTITION_LEADER_EPOCH,
        MAGIC_V2,
        0,  # CRC: computed below, over what follows it
        int(compression) | (TRANSACTIONAL_BIT if transactional else 0),
        records.count - 1,
        timestamp,
        timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records.count,
    )
    struct.pack_into(">I", batch, CRC_POS, compute_crc(batch, 0, size))
    return batch
