"""Appending to an active segment through a shared map of disk space reserved ahead
(the topic config ``preallocate``).

Why: on this kind of machine every ``write(2)`` pays a fixed cost in the page cache and
the filesystem (block reservation and buffer bookkeeping per call, small page-cache
folios for small writes), so one call per 16 KB batch reaches only about two thirds of
the disk's sequential speed. Copying the batch into a mapping of blocks that were
reserved in bulk skips that per-call work: the page cache is the same, so the data is
exactly as visible (readers, ``sendfile``) and as durable (survives the process, needs
``fsync`` to survive the machine) as after a ``write``.

How:

- The file grows a *window* at a time: ``posix_fallocate`` reserves the window's blocks
  (so no later page fault can run out of space), the window is mapped ``MAP_SHARED`` and
  pre-faulted with ``MADV_POPULATE_WRITE`` (so an error surfaces here as an ``OSError``
  rather than as a ``SIGBUS`` in the middle of a copy). Windows start at 1 MiB and
  double up to 32 MiB while a partition keeps appending: mapping and reserving cost
  about a millisecond each, which small windows would pay too often.
- The file is therefore longer than the log while a window is open. ``release`` unmaps
  and cuts the file back to the log's size; the segment calls it before any ``write``,
  truncation, roll or close. After a crash the reserved space reads as zeros, which
  recovery recognises and cuts (see ``LogSegment.recover``).
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Sequence

MIN_WINDOW = 1024 * 1024
MAX_WINDOW = 32 * 1024 * 1024
_PAGE = mmap.ALLOCATIONGRANULARITY
# Not exported by the mmap module on every Python; the value is Linux's (5.14+).
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


class MappedTail:
    """The writable end of one segment file. Not thread-safe: the log's lock covers it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._map: mmap.mmap | None = None
        self._map_start = 0  # file position of the map's first byte (page aligned)
        self._map_end = 0  # file position just past the map (the reserved end)
        self._next_window = MIN_WINDOW
        self._populate = True

    @property
    def reserved_end(self) -> int:
        """The file's length while the tail is open (0 when nothing is mapped)."""
        return self._map_end if self._map is not None else 0

    def write(self, buffers: Sequence[bytes | memoryview], position: int, total: int) -> None:
        """Copy ``buffers`` (``total`` bytes) to the file at ``position``, the log's end."""
        end = position + total
        if self._map is None or end > self._map_end:
            self._open_window(position, total)
        window = self._map
        assert window is not None
        at = position - self._map_start
        for buffer in buffers:
            n = len(buffer)
            window[at : at + n] = buffer
            at += n

    def _open_window(self, position: int, total: int) -> None:
        self._unmap()
        start = position - position % _PAGE
        needed = -(-(position + total - start) // _PAGE) * _PAGE
        length = max(needed, self._next_window)
        try:
            os.posix_fallocate(self._fd, start, length)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or length == needed:
                raise
            # A nearly full disk: reserve just this append, so the log fills the disk
            # as far as plain writes would.
            length = needed
            self._next_window = MIN_WINDOW
            os.posix_fallocate(self._fd, start, length)
        window = mmap.mmap(self._fd, length, offset=start)
        try:
            if self._populate:
                window.madvise(_MADV_POPULATE_WRITE)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # a kernel without populate: pages fault on use
                window.close()
                raise
            self._populate = False
        self._map, self._map_start, self._map_end = window, start, start + length
        if length > needed:
            self._next_window = min(MAX_WINDOW, self._next_window * 2)

    def release(self, size: int) -> None:
        """Unmap and cut the file back to ``size`` (the log's end): no reserved space
        is left behind, so plain writes can follow."""
        mapped = self._map is not None
        self._unmap()
        self._next_window = MIN_WINDOW
        if mapped or os.fstat(self._fd).st_size > size:
            os.ftruncate(self._fd, size)

    def close(self) -> None:
        """Unmap only, for a file that is no longer this segment's to cut."""
        self._unmap()

    def _unmap(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
            self._map_end = 0
