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


class FrameDecoder:
    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._needed: int | None = None
        self._error: FrameTooLargeError | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame they complete (without the size).

        A bad size prefix raises FrameTooLargeError, but only once the complete frames
        in front of it have been handed out: Kafka answers pipelined requests that came
        before the bad one. So the error may surface on the next call (``feed(b"")``).
        """
        if self._error is not None:
            raise self._error
        if self._buffer:
            self._buffer += data
            buf: bytes | bytearray = self._buffer
        else:
            buf = data  # the common case: frames are cut straight from what was received
        frames: list[bytes] = []
        view = memoryview(buf)
        pos = 0
        while True:
            if self._needed is None:
                if len(buf) - pos < 4:
                    break
                (size,) = struct.unpack_from(">i", buf, pos)
                if size < 0 or size > self.max_frame_bytes:
                    self._error = FrameTooLargeError(size, self.max_frame_bytes)
                    break
                self._needed = size
                pos += 4
            if len(buf) - pos < self._needed:
                break
            end = pos + self._needed
            frames.append(
                buf
                if (pos == 0 and end == len(buf) and isinstance(buf, bytes))
                else bytes(view[pos:end])
            )
            pos = end
            self._needed = None
        view.release()
        if buf is self._buffer:
            if pos:
                del self._buffer[:pos]
        else:
            self._buffer += memoryview(buf)[pos:]
        if self._error is not None and not frames:
            raise self._error
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)
