"""Splitting a TCP byte stream into Kafka frames (sans-IO).

Each frame is a 4-byte big-endian size followed by that many bytes. Two splitters, for
the two ways asyncio delivers bytes:

- ``FrameDecoder`` takes reads as they come (a stream reader's chunks): the broker's.
  A size that is negative or above ``socket.request.max.bytes`` cannot be trusted to
  resynchronise the stream, so the connection must be closed, as Kafka does.
- ``FrameReceiver`` hands out the buffer the next read goes into (a buffered protocol):
  the client's, where responses of megabytes are received straight into a buffer of
  their own size, so the kernel's copy is the only one.
"""

from __future__ import annotations

import struct

import numpy as np


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


_READ_BUFFER = 256 * 1024
# A frame at least this big gets a buffer of its own, received into directly.
_OWN_BUFFER_FROM = 64 * 1024


class FrameReceiver:
    """Frames received in place: ``buffer()`` is where the next read goes, ``received(n)``
    says how much it brought and returns the frames it completed.

    Small frames are cut (copied) out of one shared read buffer, which the next reads
    overwrite; a frame of ``_OWN_BUFFER_FROM`` bytes or more is received into a buffer of
    its own and handed out as it is."""

    def __init__(self) -> None:
        self._buffer = bytearray(_READ_BUFFER)
        self._start = 0  # the unconsumed bytes of _buffer are [_start, _end)
        self._end = 0
        self._frame: np.ndarray | None = None  # a big frame being received in place
        self._filled = 0

    def buffer(self) -> memoryview:
        if self._frame is not None:
            return self._frame.data[self._filled :]
        if self._end == len(self._buffer):  # full: move what is left to the front
            left = self._end - self._start
            self._buffer[:left] = self._buffer[self._start : self._end]
            self._start, self._end = 0, left
        return memoryview(self._buffer)[self._end :]

    def received(self, nbytes: int) -> list[memoryview]:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < len(self._frame):
                return []
            frame, self._frame = self._frame, None
            return [frame.data]
        self._end += nbytes
        frames: list[memoryview] = []
        view = memoryview(self._buffer)
        while self._end - self._start >= 4:
            (size,) = _SIZE.unpack_from(view, self._start)
            if size < 0:
                raise FrameTooLargeError(size, 2**31 - 1)
            begin = self._start + 4
            have = self._end - begin
            if have >= size:
                self._start = begin + size
                frames.append(memoryview(bytes(view[begin : begin + size])))
            elif size >= _OWN_BUFFER_FROM:
                # Not a bytearray: that would zero megabytes only to overwrite them.
                self._frame = np.empty(size, dtype=np.uint8)
                self._frame[:have] = view[begin : self._end]
                self._filled = have
                self._start = self._end = 0
                break
            else:
                break
        if self._start == self._end:
            self._start = self._end = 0
        return frames
