"""Primitives of Kafka's wire format that the request decoders share: unsigned varints and
tagged-field sections (KIP-482, the flexible versions), and the error for a frame that
cannot be understood."""

from __future__ import annotations


class MalformedRequestError(Exception):
    """The frame cannot be understood; the connection should be closed."""


def encode_uvarint(n: int) -> bytes:
    """An unsigned varint: the lengths and counts of flexible versions (KIP-482)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(view):
            raise MalformedRequestError("varint runs past the end of the frame")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise MalformedRequestError("varint is too long")


def skip_tagged_fields(view: memoryview, pos: int) -> int:
    """The position after a tagged-field section (KIP-482) starting at ``pos``."""
    count, pos = read_uvarint(view, pos)
    for _ in range(count):
        _, pos = read_uvarint(view, pos)
        size, pos = read_uvarint(view, pos)
        pos += size
    return pos
