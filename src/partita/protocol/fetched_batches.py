"""The whole record batches in fetched bytes, from their headers alone.

A fetch response may end in a partial batch (the broker cuts at the byte limit): it is
left for the next fetch, which starts after the last whole batch. Nothing here decodes a
record, so it costs nothing to import and little to run.
"""

from __future__ import annotations

from collections.abc import Iterator

from partita.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, read_header


def whole_batches(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in ``data``, in order."""
    view = memoryview(data)
    pos = 0
    while len(view) - pos >= HEADER_SIZE:
        header = read_header(view, pos)
        size = LOG_OVERHEAD + header.batch_length
        if header.batch_length <= 0 or pos + size > len(view):
            return  # a partial batch at the end of a fetch: the next fetch gets it whole
        yield pos, header
        pos += size


def end_of_whole_batches(data: bytes | memoryview, position: int) -> int:
    """The offset after the last complete batch of fetched bytes: where the next fetch
    starts, known before anything is decoded."""
    end = position
    for _pos, header in whole_batches(data):
        end = max(end, header.base_offset + header.last_offset_delta + 1)
    return end
