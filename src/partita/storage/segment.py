"""One segment of a partition log: ``<base>.log`` with its ``.index`` and ``.timeindex``,
and ``.txnindex`` once a transaction is aborted in it (storage/txn_index.py).

The segment never decodes records on the append or read path. It scans batch headers
(reading a window of the file at a time) only to translate an offset into a file
position, and validates CRCs only when recovering after an unclean shutdown.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from partita.errors import CorruptRecordError
from partita.protocol.file_region import FileRegion
from partita.protocol.record_batch import HEADER_SIZE, BatchHeader, check_crc, read_header
from partita.protocol.records import decode_records
from partita.storage import linux_file_calls
from partita.storage.indexes import IndexCorruptError, OffsetIndex, TimeIndex
from partita.storage.open_files import OPEN_SEGMENT_FILES, SegmentFile
from partita.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex
from partita.storage.writeback import WRITEBACK

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
CORRUPT_SUFFIX = ".corrupt"

_SCAN_WINDOW = 16 * 1024
_RECOVERY_WINDOW = 4 * 1024 * 1024
_IOV_MAX = 1024

# Blocks reserved past an active segment's end at a time (the log caps it at
# segment.bytes). Bare 16 KiB writes gained as much with 1 MiB windows as with 8 or
# 64 MiB, and a broker with many partitions holds one window per active segment.
RESERVE_WINDOW = 1024 * 1024
# Dirty bytes of the active segment handed to writeback at a time (linux_file_calls
# says why; storage/writeback.py makes the call off the append path). Measured with
# 16 KiB writes + fsync of 512 MiB: 2 and 8 MiB windows both ran at 2.7-3.0 GB/s
# against 1.7-1.9 with none.
WRITEBACK_WINDOW = 4 * 1024 * 1024


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class BatchInfo(NamedTuple):
    """What the segment needs to know about a batch it appends (from its header).

    A NamedTuple rather than a dataclass: one is built per appended batch, and tuple
    construction is several times cheaper on this hot path.
    """

    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    batches: int
    epochs: list[tuple[int, int]]  # (leader epoch, first offset) as found in the batches
    error: str | None


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_entries: int,
        created_ms: int,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_entries = max_index_entries
        self.created_ms = created_ms
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.time_index_path = directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX)
        txn_index_path = directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
        self.txn_index = TransactionIndex(txn_index_path)
        # Open while the process-wide cache keeps it (open_files.py); None otherwise.
        self._file: SegmentFile | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp: int | None = None
        self.bytes_since_last_index_entry = 0
        self.indexes_full = False
        # Entries both indexes can still take, at least; counted down per indexed append
        # (each adds at most one entry to either) and recounted when it runs out.
        self._index_room = 0
        self.unflushed = False
        # Blocks are reserved up to here (past ``size``) while appends come; False once
        # the file system said it cannot reserve.
        self._reserved_end = 0
        self._reserves = True
        # Bytes before this are written back or on their way (or predate this process).
        self._writeback_from = 0

    # -- opening -----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_entries: int,
        created_ms: int,
    ) -> LogSegment:
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_entries=max_index_entries,
            created_ms=created_ms,
        )
        for path in segment.all_paths():
            path.unlink(missing_ok=True)
        segment._offset_index = OffsetIndex(segment.index_path, base_offset, max_index_entries)
        segment._time_index = TimeIndex(segment.time_index_path, base_offset, max_index_entries)
        # Created now so that the directory reflects the roll; opened when first used.
        os.close(os.open(segment.log_path, os.O_WRONLY | os.O_CREAT, 0o644))
        return segment

    @classmethod
    def open_existing(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_entries: int,
    ) -> LogSegment:
        log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        stat = log_path.stat()
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_entries=max_index_entries,
            created_ms=int(stat.st_mtime * 1000),
        )
        segment.size = stat.st_size
        segment._writeback_from = stat.st_size
        return segment

    def _use_file(self) -> SegmentFile:
        """The open log file, reopened if the cache let go of it.

        Callers keep the returned object in a local for as long as they use its
        descriptor: the object is what keeps the descriptor open (open_files.py).
        The file is never created here: a segment whose file is gone must fail, not
        start again empty.
        """
        file = self._file
        if file is None:
            file = OPEN_SEGMENT_FILES.open(self.log_path, os.O_RDWR | os.O_APPEND, self)
            self._file = file
        file.used = True
        return file

    def file_evicted(self, file: SegmentFile) -> None:
        if self._file is file:
            self._file = None

    def file_size(self) -> int:
        """The log file's size on disk, which a failed write may leave past ``size``."""
        file = self._use_file()
        return os.fstat(file.fd).st_size

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._load_indexes()
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def _load_indexes(self) -> None:
        """Load both indexes; if either is missing or fails its checks, rebuild both."""
        try:
            if not self.index_path.exists() or not self.time_index_path.exists():
                raise IndexCorruptError("index file missing")
            offset_index = OffsetIndex.load(
                self.index_path, self.base_offset, self.max_index_entries, self.size
            )
            time_index = TimeIndex.load(
                self.time_index_path, self.base_offset, self.max_index_entries
            )
            last = time_index.last_entry
            if last is not None:
                if last[1] >= self._next_offset_after(offset_index):
                    raise IndexCorruptError("time index points past the end of the log")
                self._check_time_entry(offset_index, *last)
        except (IndexCorruptError, CorruptRecordError):
            self.rebuild_indexes()
            return
        self._offset_index, self._time_index = offset_index, time_index

    def _check_time_entry(self, offset_index: OffsetIndex, timestamp: int, offset: int) -> None:
        """The newest time-index entry must name a batch that really has that timestamp."""
        for _pos, header in self.iter_headers(offset_index.scan_start(offset)):
            if header.last_offset >= offset:
                if header.last_offset != offset or header.max_timestamp != timestamp:
                    raise IndexCorruptError("time index disagrees with the log")
                return
        raise IndexCorruptError("time index entry names no batch")

    def _next_offset_after(self, offset_index: OffsetIndex) -> int:
        """Next offset of the segment, scanning headers from the last index entry."""
        indexed_offset, position = offset_index.last_entry
        next_offset = self.base_offset
        found = False
        for _pos, header in self.iter_headers(position):
            if not found and len(offset_index) and header.last_offset != indexed_offset:
                raise IndexCorruptError("offset index entry does not point at its batch")
            found = True
            next_offset = header.next_offset
        return next_offset

    def load_tail_state(self) -> None:
        """Restore next offset, max timestamp and roll timestamp for the active segment.

        Scans only the headers after the last offset-index entry, so it is cheap after a
        clean shutdown.
        """
        index = self.offset_index
        times = self.time_index
        _, start = index.last_entry
        last_entry = times.last_entry
        if last_entry is not None:
            self.max_timestamp_so_far, self.offset_of_max_timestamp = last_entry
        self.next_offset = self.base_offset
        end = start
        for pos, header in self.iter_headers(start):
            if header.base_offset < self.next_offset:
                raise CorruptRecordError(
                    f"{self.log_path.name}: batch at {pos} repeats offset {header.base_offset}"
                )
            if header.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset
            end = pos + header.size
        self.bytes_since_last_index_entry = end - start
        self._count_index_room(index, times)
        if end != self.size:
            raise CorruptRecordError(
                f"{self.log_path.name}: {self.size - end} bytes after the last complete batch"
            )
        first_header = next(self.iter_headers(0), None)
        self.rolling_based_timestamp = first_header[1].max_timestamp if first_header else None

    @property
    def largest_timestamp(self) -> int:
        """Newest record timestamp, or the file's mtime if no record carries one.

        An empty segment holds nothing to keep, so it counts as infinitely old.
        """
        if self.size == 0:
            return -1
        if self.max_timestamp_so_far >= 0:
            return self.max_timestamp_so_far
        last = self.time_index.last_entry  # loaded and checked against the log
        if last is not None and last[0] >= 0:
            return last[0]
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except OSError:
            return self.created_ms

    # -- appending ---------------------------------------------------------------

    def append(
        self,
        buffers: Sequence[bytes | memoryview],
        infos: Sequence[BatchInfo],
        total: int,
        reserve_window: int,
    ) -> None:
        """Write already-validated batches, ``total`` bytes in all, at the end of the
        segment, with disk blocks reserved ``reserve_window`` bytes past them
        (linux_file_calls says why).

        On an I/O error the file is cut back to its previous size before the error is
        raised, so a failed append leaves no partial batch behind.
        """
        file = self._use_file()
        fd = file.fd
        if self.size + total > self._reserved_end and self._reserves:
            self._reserve_past(fd, self.size + total, reserve_window)
        try:
            if len(buffers) == 1:
                written = os.write(fd, buffers[0])
            elif len(buffers) <= _IOV_MAX:
                written = os.writev(fd, buffers)
            else:
                written = _write_in_chunks(fd, buffers)
            if written != total:  # a full disk
                raise OSError(errno.ENOSPC, f"short write: {written} of {total} bytes")
        except OSError:
            try:
                os.ftruncate(fd, self.size)
                self._reserved_end = self.size
            finally:
                raise
        position = self.size
        for info in infos:
            if info.max_timestamp > self.max_timestamp_so_far:
                self.max_timestamp_so_far = info.max_timestamp
                self.offset_of_max_timestamp = info.last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                self._add_index_entry(info, position)
            position += info.size
            self.bytes_since_last_index_entry += info.size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = infos[0].max_timestamp
        self.size = position
        self.next_offset = infos[-1].last_offset + 1
        self.unflushed = True
        if position - self._writeback_from >= WRITEBACK_WINDOW:
            WRITEBACK.request(fd, self._writeback_from, position - self._writeback_from)
            self._writeback_from = position

    def _reserve_past(self, fd: int, end: int, window: int) -> None:
        """Reserve blocks for this write and a window after it; a full disk skips a
        window, a file system that cannot stops it for good."""
        start = max(self.size, self._reserved_end)
        if linux_file_calls.reserve(fd, start, end + window - start) is None:
            self._reserves = False
        self._reserved_end = end + window

    def release_reservation(self) -> None:
        """Give back blocks reserved past the end: no appends are coming (a roll or a
        close); an append after all (a truncation made this segment active again)
        reserves anew."""
        if self._reserved_end > self.size:
            file = self._use_file()
            linux_file_calls.release(file.fd, self.size)
        self._reserved_end = 0

    def _add_index_entry(self, info: BatchInfo, position: int) -> None:
        # The loaded indexes directly: this runs for most appends of 4 KiB or more.
        offset_index, time_index = self._offset_index, self._time_index
        if offset_index is None or time_index is None:
            offset_index, time_index = self.offset_index, self.time_index
        offset_index.append(info.last_offset, position, position + info.size, info.base_offset)
        time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        self.bytes_since_last_index_entry = 0
        self._index_room -= 1
        if self._index_room <= 0:
            self._count_index_room(offset_index, time_index)

    def _count_index_room(self, offset_index: OffsetIndex, time_index: TimeIndex) -> None:
        self._index_room = min(offset_index.room, time_index.room)
        self.indexes_full = self._index_room <= 0

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index, as Kafka does on roll."""
        with contextlib.suppress(OSError):  # only space is at stake, never data
            self.release_reservation()
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        self.time_index.flush()
        self.offset_index.flush()

    def flush(self) -> None:
        # Writes made through a descriptor the cache has closed since are flushed
        # through a new one: fsync works on the file, whichever descriptor asks.
        file = self._file
        if file is None and self.unflushed:
            file = self._use_file()
        if file is not None:
            os.fsync(file.fd)
        if self._offset_index is not None:
            self._offset_index.flush(sync=True)
        if self._time_index is not None:
            self._time_index.flush(sync=True)
        self.unflushed = False

    # -- reading -----------------------------------------------------------------

    def iter_headers(
        self, start: int = 0, end: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each complete batch from ``start``.

        Reads a window of the file at a time so that a scan costs one system call per
        window, not per batch. A scan of a segment whose file is not open (loading,
        rebuilding producer state, compaction) reads through a descriptor of its own,
        closed when the scan ends: one pass over every segment must not leave them all
        open (open_files.py).
        """
        limit = self.size if end is None else min(end, self.size)
        if start + HEADER_SIZE > limit:
            return
        file = self._file  # held for the scan: it keeps the descriptor open
        if file is not None:
            file.used = True
            fd = file.fd
        else:
            fd = os.open(self.log_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            pos = start
            window = b""
            window_start = start
            while pos + HEADER_SIZE <= limit:
                rel = pos - window_start
                if rel + HEADER_SIZE > len(window):
                    # Past the window: if the last batch was big, the next may be too, so
                    # read just a header rather than a window of data we would skip.
                    want = HEADER_SIZE if pos - window_start > _SCAN_WINDOW else _SCAN_WINDOW
                    window = os.pread(fd, min(want, limit - pos), pos)
                    window_start, rel = pos, 0
                    if len(window) < HEADER_SIZE:
                        return
                header = read_header(window, rel)
                if pos + header.size > limit:
                    return
                yield pos, header
                pos += header.size
        finally:
            if file is None:
                os.close(fd)

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[BatchHeader, int] | None:
        """The first batch whose last offset is >= ``offset``, with its file position."""
        position = self.offset_index.scan_start(offset)
        for pos, header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return header, pos
        return None

    def read(
        self, start_offset: int, max_bytes: int, max_position: int, *, min_one_batch: bool
    ) -> FileRegion | None:
        # Batches of index.interval.bytes or more are all indexed: for them the index
        # knows where the batch starts and how long it is, and a fetch skips reading its
        # header (a cold read of its own on a fetch of big batches).
        known = self.offset_index.known_batch(start_offset)
        if known is not None:
            base_offset, position, batch_size = known
        else:
            found = self.translate_offset(start_offset)
            if found is None:
                return None
            header, position = found
            base_offset, batch_size = header.base_offset, header.size
            end = position + batch_size
            self.offset_index.learn(header.last_offset, base_offset, position, end)
        available = min(max_position, self.size) - position
        if available <= 0:
            return None
        wanted = max(max_bytes, batch_size) if min_one_batch else max_bytes
        length = min(available, wanted)
        if length <= 0:
            return None
        file = self._use_file()
        return FileRegion(file.fd, position, length, base_offset, keep_open=file)

    def read_batch(self, position: int, size: int) -> bytes:
        file = self._use_file()
        data = os.pread(file.fd, size, position)
        if len(data) != size:
            raise CorruptRecordError(f"{self.log_path.name}: short read at {position}")
        return data

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record from ``start_offset`` with ts >= target."""
        candidate = max(self.time_index.lookup_before(timestamp), start_offset)
        found = self.translate_offset(candidate)
        if found is None:
            return None
        for pos, header in self.iter_headers(found[1]):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            _, records = decode_records(self.read_batch(pos, header.size))
            for record in records:
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.offset, record.timestamp
        return None

    def offset_of_timestamp_in_batch(self, offset_hint: int, timestamp: int) -> int:
        """The first record in the batch holding ``offset_hint`` with this timestamp."""
        found = self.translate_offset(offset_hint)
        if found is None:
            return offset_hint
        header, pos = found
        _, records = decode_records(self.read_batch(pos, header.size))
        for record in records:
            if record.timestamp == timestamp:
                return record.offset
        return offset_hint

    # -- recovery and truncation -------------------------------------------------

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from batch headers (no CRC checks)."""
        offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_entries)
        time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_entries)
        since_last = 0
        max_ts, offset_of_max = -1, -1
        for pos, header in self.iter_headers(0):
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            if since_last > self.index_interval_bytes:
                offset_index.append(header.last_offset, pos, pos + header.size, header.base_offset)
                time_index.maybe_append(max_ts, offset_of_max)
                since_last = 0
            since_last += header.size
        if max_ts >= 0:
            # As at a roll: the newest timestamp must be findable without a scan.
            time_index.maybe_append(max_ts, offset_of_max)
        self.max_timestamp_so_far, self.offset_of_max_timestamp = max_ts, offset_of_max
        self._count_index_room(offset_index, time_index)
        # Only now that the log could be read are the old files replaced.
        for index in (offset_index, time_index):
            index.delete_file()
            index.flush()
        self._offset_index, self._time_index = offset_index, time_index

    def recover(self, first_expected_offset: int) -> RecoveryResult:
        """Validate every batch (header, CRC, offset order), rebuild the indexes, and cut
        the file at the first invalid byte. The cut bytes are kept beside the segment in a
        ``.corrupt`` file so that nothing disappears without a trace."""
        offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_entries)
        time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_entries)
        offset_index.delete_file()
        time_index.delete_file()
        self._offset_index, self._time_index = offset_index, time_index
        file = self._use_file()
        fd = file.fd
        size = os.fstat(fd).st_size
        pos = 0
        expected = first_expected_offset
        batches = 0
        epochs: list[tuple[int, int]] = []
        error: str | None = None
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp = None
        self.bytes_since_last_index_entry = 0
        window = b""
        window_start = 0
        while pos < size:
            rel = pos - window_start
            if rel + HEADER_SIZE > len(window):
                window = os.pread(fd, min(_RECOVERY_WINDOW, size - pos), pos)
                window_start, rel = pos, 0
            try:
                header = read_header(window, rel)
                if header.base_offset < expected or header.last_offset_delta < 0:
                    raise CorruptRecordError(
                        f"batch offset {header.base_offset} is below the expected {expected}"
                    )
                if pos + header.size > size:
                    raise CorruptRecordError(
                        f"torn write: batch at position {pos} needs {header.size} bytes, "
                        f"{size - pos} present"
                    )
                if rel + header.size > len(window):
                    window = os.pread(fd, max(header.size, min(_RECOVERY_WINDOW, size - pos)), pos)
                    window_start, rel = pos, 0
                check_crc(window, rel, header)
            except CorruptRecordError as exc:
                error = str(exc)
                break
            info = BatchInfo(
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                header.size,
                header.partition_leader_epoch,
            )
            self._account(info, pos)
            if header.partition_leader_epoch >= 0 and (
                not epochs or header.partition_leader_epoch > epochs[-1][0]
            ):
                epochs.append((header.partition_leader_epoch, header.base_offset))
            expected = header.next_offset
            pos += header.size
            batches += 1
        truncated = size - pos
        if truncated:
            self._quarantine(fd, pos, size)
            os.ftruncate(fd, pos)
        offset_index.flush()
        time_index.flush()
        self.size = pos
        return RecoveryResult(pos, truncated, batches, epochs, error)

    def _account(self, info: BatchInfo, position: int) -> None:
        if info.max_timestamp > self.max_timestamp_so_far:
            self.max_timestamp_so_far = info.max_timestamp
            self.offset_of_max_timestamp = info.last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self._add_index_entry(info, position)
        self.bytes_since_last_index_entry += info.size
        if self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = info.max_timestamp
        self.next_offset = info.last_offset + 1

    def _quarantine(self, fd: int, start: int, end: int) -> Path:
        target = self.directory / f"{self.log_path.name}.{start}{CORRUPT_SUFFIX}"
        attempt = 1
        while target.exists():  # a tail cut at the same place before must be kept too
            attempt += 1
            target = self.directory / f"{self.log_path.name}.{start}.{attempt}{CORRUPT_SUFFIX}"
        with open(target, "xb") as out:
            pos = start
            while pos < end:
                chunk = os.pread(fd, min(_RECOVERY_WINDOW, end - pos), pos)
                if not chunk:
                    break
                out.write(chunk)
                pos += len(chunk)
        return target

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; return the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        _, position = found
        removed = self.size - position
        file = self._use_file()
        os.ftruncate(file.fd, position)
        self.size = position
        self._reserved_end = position  # ftruncate freed every block past it
        self._writeback_from = min(self._writeback_from, position)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = -1
        self.load_tail_state()
        if self.size == 0:
            self.next_offset = self.base_offset
        self.unflushed = True
        return removed

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Write pending index entries and close; the descriptor is closed even if the
        index write fails (indexes are rebuilt from the log when needed)."""
        try:
            with contextlib.suppress(OSError):  # only space is at stake, never data
                self.release_reservation()
            if self._offset_index is not None:
                self._offset_index.flush()
            if self._time_index is not None:
                self._time_index.flush()
        finally:
            self.close_file()

    def close_file(self) -> None:
        """Close the descriptor only; the files on disk belong to someone else now.

        A region handed out earlier still holds the file, which closes when it goes.
        """
        file, self._file = self._file, None
        if file is not None:
            OPEN_SEGMENT_FILES.release(file)

    def all_paths(self) -> list[Path]:
        return [self.log_path, self.index_path, self.time_index_path, self.txn_index.path]

    def rename_for_deletion(self) -> None:
        """Step one of a delayed delete: move the files aside."""
        for path in self.all_paths():
            if path.exists():
                path.rename(path.with_name(path.name + DELETED_SUFFIX))

    def delete_files(self) -> None:
        self.close()
        for path in self.all_paths():
            path.with_name(path.name + DELETED_SUFFIX).unlink(missing_ok=True)
            path.unlink(missing_ok=True)


def _write_in_chunks(fd: int, buffers: Sequence[bytes | memoryview]) -> int:
    """One ``writev`` per IOV_MAX buffers, stopping at a short one; the bytes written."""
    written = 0
    for start in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[start : start + _IOV_MAX]
        n = os.writev(fd, chunk)
        written += n
        if n != sum(len(b) for b in chunk):
            break
    return written
