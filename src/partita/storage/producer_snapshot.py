"""Producer state snapshots, ``<offset>.snapshot``, in Kafka's file layout.

A snapshot holds the producer state of a partition for every batch below ``offset``: per
producer its epoch, its last batch (last sequence and offset, and the offset delta that
gives the batch's first ones), that batch's max timestamp, the epoch of the last
transaction coordinator that wrote it a marker, and the first offset of its open
transaction here (-1: none). Loading a partition starts from the newest snapshot at or
below its log end and replays only the batches after it, instead of every batch of the
log. Big-endian, as Kafka's ``ProducerStateManager`` writes it:

    version  int16  (1)
    crc      uint32 (CRC-32C of everything after it)
    count    int32
    entries  count x 46 bytes: producer id int64, epoch int16, last sequence int32,
             last offset int64, offset delta int32, timestamp int64,
             coordinator epoch int32, current transaction's first offset int64

The log writes one when it rolls a segment (named by the new segment's base offset) and
one at a clean close (named by the log end), and deletes them with their segments or past
a truncation. A snapshot is never needed for correctness: one that is missing or corrupt
costs a longer replay, so failures to write one are logged, not raised. Kafka's
``kafka-dump-log`` reads these files.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from partita.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_AT = _HEADER.size


class SnapshotCorruptError(Exception):
    """A ``.snapshot`` file that is not one Kafka's layout can read, or fails its CRC."""


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int  # -1: no batch (a producer known only from a marker)
    last_offset: int  # -1: no batch
    offset_delta: int  # last - first of the last batch, in sequences and in offsets
    timestamp: int  # the last batch's max timestamp
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no transaction open here


def encode(entries: list[ProducerSnapshotEntry]) -> bytes:
    body = _COUNT.pack(len(entries)) + b"".join(_ENTRY.pack(*_fields(e)) for e in entries)
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def _fields(e: ProducerSnapshotEntry) -> tuple[int, ...]:
    return (
        e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta,
        e.timestamp, e.coordinator_epoch, e.current_txn_first_offset,
    )  # fmt: skip


def decode(data: bytes, name: str = "snapshot") -> list[ProducerSnapshotEntry]:
    if len(data) < _HEADER.size + _COUNT.size:
        raise SnapshotCorruptError(f"{name}: {len(data)} bytes is shorter than its header")
    version, crc = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise SnapshotCorruptError(f"{name}: version {version}, expected {SNAPSHOT_VERSION}")
    body = data[_ENTRIES_AT:]
    if crc32c.crc32c(body) != crc:
        raise SnapshotCorruptError(f"{name}: CRC mismatch")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise SnapshotCorruptError(f"{name}: {count} entries do not fill {len(body)} bytes")
    return [ProducerSnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(body[_COUNT.size :])]


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerSnapshots:
    """The ``.snapshot`` files of one partition directory, by offset."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets = sorted(
            int(path.name.removesuffix(SNAPSHOT_SUFFIX))
            for path in directory.glob(f"*{SNAPSHOT_SUFFIX}")
            if path.name.removesuffix(SNAPSHOT_SUFFIX).isdigit()
        )

    @property
    def offsets(self) -> list[int]:
        return list(self._offsets)

    def __contains__(self, offset: int) -> bool:
        return offset in self._offsets

    def write(self, offset: int, entries: list[ProducerSnapshotEntry]) -> bool:
        """Write the snapshot at ``offset`` (temp file, fsync, rename); False, logged, if
        the disk refused: the state is still in the log."""
        path = snapshot_path(self.directory, offset)
        try:
            # No directory fsync: a snapshot lost in a crash costs a longer replay.
            write_atomically(path, encode(entries), sync_directory=False)
        except OSError as exc:
            log.warning(
                "producer snapshot not written; loading replays the log further back",
                extra={"file": str(path), "error": str(exc)},
            )
            return False
        if offset not in self._offsets:
            self._offsets.append(offset)
            self._offsets.sort()
        return True

    def latest(self, at_most: int) -> tuple[int, list[ProducerSnapshotEntry]] | None:
        """The newest readable snapshot at or below ``at_most``; a corrupt one is deleted
        (logged) and the next older one tried."""
        for offset in reversed([o for o in self._offsets if o <= at_most]):
            path = snapshot_path(self.directory, offset)
            try:
                return offset, decode(path.read_bytes(), path.name)
            except (OSError, SnapshotCorruptError) as exc:
                log.warning(
                    "producer snapshot unreadable; deleted, an older one or the log is used",
                    extra={"file": str(path), "error": str(exc)},
                )
                self._delete([offset])
        return None

    def delete_above(self, offset: int) -> None:
        """Drop snapshots past ``offset`` (the log was truncated to it). A file that
        cannot be removed raises: kept, it would describe batches the log no longer has
        once the log grows past it again."""
        for doomed in [o for o in self._offsets if o > offset]:
            snapshot_path(self.directory, doomed).unlink(missing_ok=True)
            self._offsets.remove(doomed)

    def delete_below(self, offset: int) -> None:
        """Drop snapshots below ``offset`` (the segments they would replay from are gone)."""
        self._delete([o for o in self._offsets if o < offset])

    def _delete(self, offsets: list[int]) -> None:
        """Remove files nothing will read again; one that stays is only disk space."""
        for offset in offsets:
            try:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
            except OSError as exc:
                log.warning(
                    "producer snapshot not deleted",
                    extra={"file": str(snapshot_path(self.directory, offset)), "error": str(exc)},
                )
                continue
            self._offsets.remove(offset)
