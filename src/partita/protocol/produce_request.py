"""The producer's ProduceRequest (v9) framed by hand, record sets left where they are.

kafka-python's encoder builds the whole request in one new buffer, copying each record
set (a megabyte per partition when batches are full) before the socket copies it again.
This one writes the few fields around the record sets and hands out the frame as chunks:
small ``bytes`` between the record sets, which are passed through as they are.

Layout (Kafka's ProduceRequest.json; v9 is the first flexible version): request header
v2 (api key, version, correlation id, client id as an int16-length string, no tagged
fields), then transactional id (compact nullable string), acks, timeout, and compact
arrays of topics and partitions, each struct ending with an empty tagged-field section.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from partita.protocol.wire import encode_uvarint

_HEADER = struct.Struct(">ihhih")  # frame size, api key, version, correlation id, id length
_ACKS_TIMEOUT = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_NO_TAGS = b"\x00"

Records = bytes | bytearray | memoryview


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return encode_uvarint(len(data) + 1) + data


def _as_bytes(records: Records) -> Records:
    """A view of wider items (a numpy array's, say) as bytes: lengths count bytes, and
    so does the transport that writes them. No copy."""
    if isinstance(records, memoryview) and records.format != "B":
        return records.cast("B")
    return records


class ProduceRequestV9:
    """One produce request: ``topics`` maps a topic to its (partition, record set) pairs.

    ``BrokerConnection.send`` writes ``frame_chunks`` in order instead of encoding it, and
    reads the answer with kafka-python's ProduceResponse of ``API_VERSION``."""

    API_KEY = 0
    API_VERSION = 9

    def __init__(
        self,
        acks: int,
        timeout_ms: int,
        topics: Sequence[tuple[str, Sequence[tuple[int, Records]]]],
        transactional_id: str | None = None,
    ) -> None:
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics
        self.transactional_id = transactional_id

    def frame_chunks(self, correlation_id: int, client_id: str | None) -> list[Records]:
        """The whole frame, size prefix first, as chunks to write one after another."""
        client = b"" if client_id is None else client_id.encode()
        pending = bytearray()
        chunks: list[Records] = []
        pending += _NO_TAGS  # request header v2: tagged fields
        # transactional id: a compact nullable string (0 is null)
        pending += (
            b"\x00" if self.transactional_id is None else _compact_string(self.transactional_id)
        )
        pending += _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms)
        pending += encode_uvarint(len(self.topics) + 1)
        for name, partitions in self.topics:
            pending += _compact_string(name)
            pending += encode_uvarint(len(partitions) + 1)
            for index, given in partitions:
                records = _as_bytes(given)
                pending += _I32.pack(index)
                pending += encode_uvarint(len(records) + 1)
                chunks.append(bytes(pending))
                chunks.append(records)
                pending = bytearray(_NO_TAGS)  # the partition's tagged fields
            pending += _NO_TAGS  # the topic's
        pending += _NO_TAGS  # the request's
        chunks.append(bytes(pending))
        body = sum(len(c) for c in chunks)
        id_length = -1 if client_id is None else len(client)
        head = _HEADER.pack(
            _HEADER.size - 4 + len(client) + body,
            self.API_KEY,
            self.API_VERSION,
            correlation_id,
            id_length,
        )
        chunks[0] = head + client + chunks[0]
        return chunks
