"""A bounded set of open segment files, so that descriptors follow use, not partitions.

Kafka keeps every segment's file open and asks operators to raise the descriptor limit;
a topic with more partitions than the limit then breaks the broker (EMFILE on the next
file, socket or checkpoint). Here a segment opens its log file when it is read or
written, and the process keeps at most ``capacity`` of them open, closing the least
recently used first (a CLOCK sweep: each use sets a bit, eviction passes over a file
whose bit is set once, clearing it). A maintenance pass also closes files unused since
the previous pass. Thousands of idle partitions then hold no descriptor at all.

A descriptor is never closed under someone using it: a ``SegmentFile`` is closed when
the last reference to it goes (CPython frees it at once), and everyone who uses the
number holds the object -- the segment while it is cached, a method while it runs, a
``FileRegion`` until the network has sent it. Eviction only drops the cache's and the
segment's references, so a region handed out before keeps reading the file it named,
and a descriptor number is never reused while anything may still read it.
"""

from __future__ import annotations

import logging
import os
import resource
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

# Descriptors left for everything but segment files: client connections, index and
# checkpoint writes, the metadata file, the interpreter's own. A fifth of the limit,
# at least 256, and never more than half of it.
_MIN_RESERVE = 256


def descriptor_limit() -> int:
    """The process's soft limit on open descriptors (RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1 << 20
    return soft


def default_capacity(limit: int | None = None) -> int:
    """Segment files kept open at most, for a descriptor limit (default: this
    process's): what is left after a reserve for sockets and short-lived files."""
    limit = descriptor_limit() if limit is None else limit
    reserve = min(max(_MIN_RESERVE, limit // 5), limit // 2)
    return max(1, limit - reserve)


class FileOwner(Protocol):
    def file_evicted(self, file: SegmentFile) -> None:
        """The cache let go of ``file``: drop it, and open anew on the next use."""


class SegmentFile:
    """One open descriptor of a segment's log file, closed when the last reference goes.

    ``used`` is the CLOCK bit: set by every use, cleared by a sweep.
    """

    __slots__ = ("_owner", "fd", "used")

    def __init__(self, fd: int, owner: FileOwner) -> None:
        self.fd = fd
        self.used = True
        # Weak: a segment dropped without closing must not be kept alive by the cache.
        self._owner = weakref.ref(owner)

    def evicted(self) -> None:
        owner = self._owner()
        if owner is not None:
            owner.file_evicted(self)

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # os.close bound at definition: at interpreter exit the module's globals may be
        # gone before the last files are freed.
        _close(self.fd)


class OpenSegmentFiles:
    """The process-wide cache of open segment files (thread-safe: appends and reads run
    on the event loop, retention and compaction on worker threads)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._files: OrderedDict[SegmentFile, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def open(self, path: Path, flags: int, owner: FileOwner) -> SegmentFile:
        """Open ``path`` and keep it among the cached files, letting go of the least
        recently used ones beyond capacity (their owners are told)."""
        file = SegmentFile(os.open(path, flags, 0o644), owner)
        with self._lock:
            self._files[file] = None
            while len(self._files) > self.capacity:
                self._evict_one()
        return file

    def release(self, file: SegmentFile) -> None:
        """The owner is done with ``file`` (it closed the segment)."""
        with self._lock:
            self._files.pop(file, None)

    def close_idle(self) -> int:
        """Let go of every file not used since the previous call; how many."""
        with self._lock:
            idle = []
            for file in self._files:
                if file.used:
                    file.used = False
                else:
                    idle.append(file)
            for file in idle:
                del self._files[file]
                file.evicted()
        return len(idle)

    def _evict_one(self) -> None:
        # Second chance: a file used since it was last passed goes to the back, once.
        while True:
            file, _ = self._files.popitem(last=False)
            if file.used:
                file.used = False
                self._files[file] = None
                continue
            file.evicted()
            return

    def resize(self, capacity: int) -> None:
        with self._lock:
            self.capacity = capacity
            while len(self._files) > capacity:
                self._evict_one()


OPEN_SEGMENT_FILES = OpenSegmentFiles(default_capacity())
