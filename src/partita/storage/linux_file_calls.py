"""The two Linux file calls the active segment uses that Python's ``os`` lacks.

**Blocks reserved past the end** (``fallocate(FALLOC_FL_KEEP_SIZE)``). A buffered
``write(2)`` that extends a file on ext4 reserves delayed-allocation blocks and records
them in the extent-status tree on every call; into blocks that already exist it skips
that work. Bare 16 KiB writes use 0.14-0.15 CPU s per 512 MiB instead of 0.18-0.19 on
this machine's ext4 and run 12-15% faster. ``KEEP_SIZE`` leaves the file's size alone,
so readers, recovery and retention see exactly the bytes written; the reservation only
shows in ``st_blocks`` until it is given back. Unlike Kafka's ``preallocate`` (which
sizes the file to ``segment.bytes`` and must cut it back), nothing on disk changes from
the format's point of view, and after a crash a leftover reservation is just blocks
past the end of a file.

**Writeback started early** (``sync_file_range(SYNC_FILE_RANGE_WRITE)``). Left alone,
the kernel writes dirty pages back only once they pass ``dirty_background_ratio`` (GBs
on a large machine), so a whole segment can still be dirty when it rolls and the roll's
fsync, which runs on the append path, writes all of it. Starting writeback of each
finished window as soon as it is written keeps that fsync (and any ``flush.ms`` /
``flush.messages`` fsync) down to the last window, and lets the disk work while the
broker does. It only starts I/O: durability is still decided by fsync.

Both are advice: a file system or platform that cannot do them costs nothing but the
gain, and neither can fail an append.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from collections.abc import Callable

_FALLOC_FL_KEEP_SIZE = 1
_SYNC_FILE_RANGE_WRITE = 2

# Errors that mean this file system (or platform) cannot do the call at all: stop
# asking for the segment. Anything else (ENOSPC above all) just skips this time.
_UNSUPPORTED = frozenset({errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV, errno.ESPIPE})

_Call = Callable[[int, int, int, int], int]


def _libc_function(name: str, argtypes: list[type[ctypes._SimpleCData[int]]]) -> _Call | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


# (fd, mode, offset, length) and (fd, offset, nbytes, flags), 64-bit offsets.
_fallocate = _libc_function(
    "fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
)
_sync_file_range = _libc_function(
    "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
)


def _outcome(result: int) -> bool | None:
    if result == 0:
        return True
    return None if ctypes.get_errno() in _UNSUPPORTED else False


def reserve(fd: int, start: int, length: int) -> bool | None:
    """Reserve ``length`` bytes of blocks from ``start`` without changing the size.

    True when reserved, False when skipped this time (a full disk), None when this file
    system cannot reserve at all.
    """
    if _fallocate is None:
        return None
    return _outcome(_fallocate(fd, _FALLOC_FL_KEEP_SIZE, start, length))


def release(fd: int, size: int) -> None:
    """Give back the blocks past ``size`` and keep the file's times.

    ``ftruncate`` to the current size frees what lies past it, but Linux stamps the
    file's mtime even when the size does not change, and a segment whose records carry
    no timestamps is aged by its mtime.
    """
    before = os.fstat(fd)
    os.ftruncate(fd, size)
    os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))


def start_writeback(fd: int, start: int, length: int) -> bool | None:
    """Start writing ``length`` dirty bytes from ``start`` back to disk; do not wait.

    True when started, False when it failed this time, None when unsupported here.
    """
    if _sync_file_range is None:
        return None
    return _outcome(_sync_file_range(fd, start, length, _SYNC_FILE_RANGE_WRITE))
