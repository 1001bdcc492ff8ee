"""Splitting a TCP byte stream into Kafka request frames (sans-IO).

Each frame is a 4-byte big-endian size followed by that many bytes. A size that is
negative or above ``socket.request.max.bytes`` cannot be trusted to resynchronise the
stream, so the connection must be closed, as Kafka does.
"""

from __future__ import annotations

import struct


class FrameTooLargeError(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


_SIZE = struct.Struct(">i")
_SMALL_PIECE = 4096


class FrameDecoder:
    """Frames that a read holds whole are cut from it (the usual case for small
    requests); a frame spread over several reads is kept as the reads' own pieces and
    joined once complete, so each of its bytes is copied once (a 1 MB produce request
    arrives in several reads: growing a shared buffer and then cutting a copy out of it
    copied every byte two or three times). Memory grows with the bytes received, not
    with the size a client announces."""

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._head = bytearray()  # the first bytes of a size prefix that a read cut
        # The received pieces of an unfinished frame: slices of big reads, small reads
        # gathered in a bytearray (so a client dribbling a frame byte by byte costs a
        # byte a byte, not an object a byte).
        self._parts: list[memoryview | bytearray] = []
        self._missing = 0  # bytes the unfinished frame still needs
        self._error: FrameTooLargeError | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame they complete (without the size).

        A bad size prefix raises FrameTooLargeError, but only once the complete frames
        in front of it have been handed out: Kafka answers pipelined requests that came
        before the bad one. So the error may surface on the next call (``feed(b"")``).
        """
        if self._error is not None:
            raise self._error
        frames: list[bytes] = []
        # Not released at the end: the pieces of an unfinished frame are slices of it.
        view = memoryview(data)
        pos, end = 0, len(view)
        while True:
            if self._missing:
                take = min(self._missing, end - pos)
                if take >= _SMALL_PIECE:
                    self._parts.append(view[pos : pos + take])
                elif self._parts and isinstance(self._parts[-1], bytearray):
                    self._parts[-1] += view[pos : pos + take]
                else:
                    self._parts.append(bytearray(view[pos : pos + take]))
                self._missing -= take
                pos += take
                if self._missing:
                    break
                frames.append(b"".join(self._parts))
                self._parts.clear()
            if pos == end:
                break
            if not self._head and end - pos >= 4:
                (size,) = _SIZE.unpack_from(view, pos)
                pos += 4
            else:
                found = self._read_cut_size(view, pos, end)
                if found is None:
                    break
                size, pos = found
            if size < 0 or size > self.max_frame_bytes:
                self._error = FrameTooLargeError(size, self.max_frame_bytes)
                break
            if end - pos >= size:
                frames.append(bytes(view[pos : pos + size]))
                pos += size
            else:
                self._missing = size
        if self._error is not None and not frames:
            raise self._error
        return frames

    def _read_cut_size(self, view: memoryview, pos: int, end: int) -> tuple[int, int] | None:
        """A size prefix that reads cut: the size and the position after it, or None
        while the data ends inside it (its first bytes are kept for the next read)."""
        take = min(4 - len(self._head), end - pos)
        self._head += view[pos : pos + take]
        if len(self._head) < 4:
            return None
        (size,) = _SIZE.unpack(self._head)
        self._head.clear()
        return size, pos + take

    @property
    def buffered(self) -> int:
        return len(self._head) + sum(len(part) for part in self._parts)
