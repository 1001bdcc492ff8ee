"""Splitting a TCP byte stream into Kafka frames (sans-IO).

Each frame is a 4-byte big-endian size followed by that many bytes. ``FrameReceiver``
hands out the buffer the next read goes into (an asyncio buffered protocol fills it), so
that a frame of megabytes (a produce request, a fetch response) is received straight into
a buffer of its own size and the kernel's copy is the only one. Broker and client both
split with it; the broker gives it ``socket.request.max.bytes``.

A size that is negative or above the limit cannot be trusted to resynchronise the stream:
the receiver stops there, after handing out the complete frames in front of it (Kafka
answers requests pipelined before a bad one), and the connection must be closed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any


def uninitialized(size: int) -> Any:
    """A buffer of ``size`` bytes that is not zeroed first: a bytearray would zero
    megabytes only to overwrite them. numpy is loaded on the first big frame."""
    import numpy as np  # noqa: PLC0415

    return np.empty(size, dtype=np.uint8)


class FrameTooLargeError(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request of {size} bytes exceeds socket.request.max.bytes={limit}")
        self.size = size
        self.limit = limit


_SIZE = struct.Struct(">i")
_READ_BUFFER = 256 * 1024
# A frame at least this big gets a buffer of its own, received into directly.
_OWN_BUFFER_FROM = 64 * 1024


class FrameReceiver:
    """Frames received in place: ``buffer()`` is where the next read goes, ``received(n)``
    says how much it brought and returns the frames it completed.

    Small frames are cut (copied) out of one shared read buffer, which the next reads
    overwrite; a frame of ``_OWN_BUFFER_FROM`` bytes or more is received into a buffer of
    its own and handed out as it is."""

    def __init__(
        self, max_frame_bytes: int = 2**31 - 1, allocate: Callable[[int], Any] = uninitialized
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.allocate = allocate  # the buffer of a big frame
        # Set at a size prefix that is negative or above the limit; nothing after it is
        # read, and the frames before it have been handed out.
        self.error: FrameTooLargeError | None = None
        self._buffer = bytearray(_READ_BUFFER)
        self._start = 0  # the unconsumed bytes of _buffer are [_start, _end)
        self._end = 0
        self._frame: Any = None  # a big frame being received in place
        self._filled = 0

    def buffer(self) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        if self._end == len(self._buffer):  # full: move what is left to the front
            left = self._end - self._start
            self._buffer[:left] = self._buffer[self._start : self._end]
            self._start, self._end = 0, left
        return memoryview(self._buffer)[self._end :]

    def received(self, nbytes: int) -> list[memoryview]:
        if self.error is not None:
            return []
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < len(self._frame):
                return []
            frame, self._frame = self._frame, None
            return [memoryview(frame)]
        self._end += nbytes
        frames: list[memoryview] = []
        view = memoryview(self._buffer)
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(view, self._start)
            if size < 0 or size > self.max_frame_bytes:
                self.error = FrameTooLargeError(size, self.max_frame_bytes)
                break
            begin = self._start + 4
            have = self._end - begin
            if have >= size:
                self._start = begin + size
                # Writable, like the big frames: the log assigns offsets in place.
                frames.append(memoryview(bytearray(view[begin : begin + size])))
            elif size >= _OWN_BUFFER_FROM:
                self._frame = self.allocate(size)
                self._frame[:have] = view[begin : self._end]
                self._filled = have
                self._start = self._end = 0
                break
            else:
                break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received that no complete frame has taken yet."""
        return self._filled if self._frame is not None else self._end - self._start
