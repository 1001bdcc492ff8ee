"""Sparse offset and time indexes beside each segment, in Kafka's file layout.

``.index`` holds 8-byte big-endian entries (offset relative to the segment's base, byte
position in the ``.log``); ``.timeindex`` holds 12-byte entries (timestamp, relative
offset). Both are sparse: one entry per ``index.interval.bytes`` of log. Entries are kept
in memory (a few bytes per 4 KiB of log) and appended to the file; Kafka pre-allocates and
mmaps instead, but a trimmed file, which is what Kafka leaves after a roll, reads the same.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class IndexCorruptError(Exception):
    """An index file fails its sanity checks and must be rebuilt from the log."""


class _IndexFile:
    """Shared plumbing: entries live in memory, and a flush appends to the file the
    ones it does not hold yet."""

    entry_size: int

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._written_entries = 0
        self._synced = False
        self._exists = False  # flush() creates the file even when there is no entry yet

    def _encode(self, start: int, stop: int) -> bytes:
        """Entries ``start`` to ``stop`` in the file's layout. Encoding at flush rather
        than at append keeps a pack off the append path, which adds an entry per 4 KiB."""
        raise NotImplementedError

    def flush(self, *, sync: bool = False) -> None:
        """Append unwritten entries to the file; with ``sync``, also fsync it, but only if
        something was written since the last sync (flush.messages=1 must stay cheap)."""
        count = len(self._offsets)
        unwritten = count > self._written_entries
        if not unwritten and (not sync or self._synced) and self._exists:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._exists = True
        try:
            if unwritten:
                payload = self._encode(self._written_entries, count)
                if os.write(fd, payload) != len(payload):
                    raise OSError(errno.ENOSPC, f"short write to {self.path.name}")
                self._written_entries = count
                self._synced = False
            if sync:
                os.fsync(fd)
                self._synced = True
        finally:
            os.close(fd)

    def _rewrite(self) -> None:
        """Replace the file with the entries in memory (after some were dropped)."""
        count = len(self._offsets)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(self._encode(0, count))
        os.replace(tmp, self.path)
        self._exists = True
        self._synced = False
        self._written_entries = count

    def delete_file(self) -> None:
        """Remove the file; the entries in memory stay, and the next flush writes them."""
        self._written_entries = 0
        self._exists = False
        self.path.unlink(missing_ok=True)

    # Both indexes keep one offset per entry (the key of an offset index entry, the
    # value of a time index entry).
    _offsets: array[int]

    @property
    def room(self) -> int:
        """How many more entries fit."""
        return self.max_entries - len(self._offsets)

    def __len__(self) -> int:
        return len(self._offsets)


class OffsetIndex(_IndexFile):
    entry_size = _OFFSET_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._offsets = array("q")
        self._positions = array("q")
        # In memory only: where the indexed batch ends (-1 if unknown, e.g. after a load).
        # It lets a lookup for the next batch skip the indexed one without reading it.
        self._ends = array("q")
        # In memory only: the indexed batch's base offset (-1 if unknown, as ends are).
        # With its end, a fetch that starts inside the batch needs no read to find it.
        self._bases = array("q")

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int, log_size: int) -> OffsetIndex:
        """Read an existing index; raise IndexCorruptError if it cannot be trusted."""
        index = cls(path, base_offset, max_entries)
        data = path.read_bytes()
        if len(data) % cls.entry_size:
            raise IndexCorruptError(f"{path.name}: size {len(data)} is not a multiple of 8")
        last_offset, last_position = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            if rel <= last_offset or pos <= last_position or pos >= log_size or rel < 0:
                raise IndexCorruptError(
                    f"{path.name}: entry ({rel}, {pos}) is out of order or past the log"
                )
            index._offsets.append(base_offset + rel)
            index._positions.append(pos)
            index._ends.append(-1)
            index._bases.append(-1)
            last_offset, last_position = rel, pos
        index._written_entries = len(index)
        index._exists = True
        return index

    def append(self, offset: int, position: int, end: int = -1, base: int = -1) -> None:
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            return
        self._offsets.append(offset)
        self._positions.append(position)
        self._ends.append(end)
        self._bases.append(base)

    def _encode(self, start: int, stop: int) -> bytes:
        base, pack = self.base_offset, _OFFSET_ENTRY.pack
        offsets, positions = self._offsets[start:stop], self._positions[start:stop]
        return b"".join(pack(o - base, p) for o, p in zip(offsets, positions, strict=True))

    def scan_start(self, offset: int) -> int:
        """The file position from which a forward scan finds the batch holding ``offset``."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return 0
        if self._offsets[i] < offset and self._ends[i] >= 0:
            return self._ends[i]  # the indexed batch ends before ``offset``: skip it
        return self._positions[i]

    def known_batch(self, offset: int) -> tuple[int, int, int] | None:
        """(base offset, position, size) of the first batch whose last offset is >=
        ``offset`` when the index alone tells: that batch is indexed, with its base offset
        and end known (entries added by an append or an index rebuild, not loaded from the
        file), and does not start after ``offset`` (so no unindexed batch before it can
        hold it). None means: scan the file."""
        i = bisect_right(self._offsets, offset - 1)
        if i >= len(self._offsets):
            return None
        base, end = self._bases[i], self._ends[i]
        if base < 0 or end < 0 or base > offset:
            return None
        position = self._positions[i]
        return base, position, end - position

    def learn(self, last_offset: int, base_offset: int, position: int, end: int) -> None:
        """Remember the base offset and end of the batch at ``position`` (whose last offset
        is ``last_offset``), read from its header, if the index holds that batch: entries
        loaded from the file know neither, and with them a later fetch there needs no
        header read (``known_batch``), as after an append."""
        i = bisect_left(self._offsets, last_offset)
        found = i < len(self._offsets) and self._offsets[i] == last_offset
        if found and self._positions[i] == position:
            self._bases[i] = base_offset
            self._ends[i] = end

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or before ``offset``: where a forward scan for it may begin."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop every entry for an offset >= ``offset``."""
        keep = bisect_right(self._offsets, offset - 1)
        if keep == len(self._offsets):
            return
        del self._offsets[keep:]
        del self._positions[keep:]
        del self._ends[keep:]
        del self._bases[keep:]
        self._rewrite()

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))


class TimeIndex(_IndexFile):
    entry_size = _TIME_ENTRY.size

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        super().__init__(path, base_offset, max_entries)
        self._timestamps = array("q")
        self._offsets = array("q")

    @classmethod
    def load(cls, path: Path, base_offset: int, max_entries: int) -> TimeIndex:
        index = cls(path, base_offset, max_entries)
        data = path.read_bytes()
        if len(data) % cls.entry_size:
            raise IndexCorruptError(f"{path.name}: size {len(data)} is not a multiple of 12")
        last_ts, last_rel = -(2**63), -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            # Entries are only ever added with a newer timestamp, so equal or older ones
            # (the zeros of a pre-allocated or torn file) mean damage.
            if ts <= last_ts or rel < last_rel or rel < 0:
                raise IndexCorruptError(f"{path.name}: entry ({ts}, {rel}) is out of order")
            index._timestamps.append(ts)
            index._offsets.append(base_offset + rel)
            last_ts, last_rel = ts, rel
        index._written_entries = len(index)
        index._exists = True
        return index

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record that offsets up to ``offset`` have timestamps up to ``timestamp``."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if self._offsets and offset < self._offsets[-1]:
            return
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def _encode(self, start: int, stop: int) -> bytes:
        base, pack = self.base_offset, _TIME_ENTRY.pack
        timestamps, offsets = self._timestamps[start:stop], self._offsets[start:stop]
        return b"".join(pack(t, o - base) for t, o in zip(timestamps, offsets, strict=True))

    def lookup_before(self, timestamp: int) -> int:
        """An offset at or before the first record whose timestamp is >= ``timestamp``."""
        i = bisect_right(self._timestamps, timestamp - 1) - 1
        if i < 0:
            return self.base_offset
        # Every offset up to this entry's offset has a timestamp < target.
        return self._offsets[i] + 1

    @property
    def last_entry(self) -> tuple[int, int] | None:
        if not self._timestamps:
            return None
        return self._timestamps[-1], self._offsets[-1]

    def truncate_to(self, offset: int) -> None:
        keep = bisect_right(self._offsets, offset - 1)
        if keep == len(self._offsets):
            return
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._rewrite()

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets, strict=True))
