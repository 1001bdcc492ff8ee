"""Kafka's compression codecs for record batches (attribute bits 0-2).

Compression is needed only where records must be looked at one by one (log compaction,
timestamp lookups, partita's own client); the produce and fetch paths leave compressed
batches untouched.
"""

from __future__ import annotations

import gzip
import struct
from enum import IntEnum

import cramjam

from partita.errors import CorruptRecordError


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression codec {name!r}; use none, gzip, snappy, lz4 or zstd"
            ) from None


# The Java client frames snappy the way xerial's SnappyOutputStream does; librdkafka
# writes raw snappy. Readers must accept both.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16


def compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return gzip.decompress(data)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as exc:
        raise CorruptRecordError(
            f"cannot decompress {Compression(codec).name} batch: {exc}"
        ) from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER_SIZE
    while pos < len(data):
        (chunk_len,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(data[pos : pos + chunk_len])
        pos += chunk_len
    return bytes(out)
