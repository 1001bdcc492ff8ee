"""The leader-epoch cache: which leader epoch started at which offset.

Replication asks it "where did epoch E end?" (OffsetsForLeaderEpoch) so that a follower
truncates exactly where its log diverges from the leader's, not to its high watermark.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from pathlib import Path

from partita.storage.checkpoint import (
    CheckpointCorruptError,
    make_durable,
    read_epochs,
    write_epochs,
)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self._entries: list[tuple[int, int]] = list(entries or [])
        # What the checkpoint file holds (None: no file, or one not trusted). A flush
        # with nothing new writes nothing: a broker loading or creating thousands of
        # partitions would otherwise write a file for every one.
        self._on_disk: list[tuple[int, int]] | None = None
        # Written since the last ``sync``: the file is replaced at once but fsynced by
        # the next checkpoint (as Kafka does since KAFKA-15046), which syncs it before
        # it records any recovery point past the data this file describes.
        self.unsynced = False

    @classmethod
    def load(cls, directory: Path) -> tuple[LeaderEpochCache, bool]:
        """The cache and whether its checkpoint could be trusted (else rebuild it)."""
        path = directory / LEADER_EPOCH_CHECKPOINT
        if not path.exists():
            return cls(path), False
        try:
            entries = read_epochs(path)
        except (CheckpointCorruptError, OSError):
            return cls(path), False
        ordered = all(a[0] < b[0] and a[1] <= b[1] for a, b in itertools.pairwise(entries))
        if not ordered:
            return cls(path), False
        cache = cls(path, entries)
        cache._on_disk = list(entries)
        return cache, True

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset``; older or equal epochs are ignored."""
        if epoch < 0:
            return False
        if self._entries and (epoch <= self._entries[-1][0] or start_offset < self._entries[-1][1]):
            return False
        self._entries.append((epoch, start_offset))
        return True

    def epoch_for(self, offset: int) -> int:
        """The epoch under which ``offset`` was (or will be) written; -1 if unknown
        (Kafka's ``LeaderEpochFileCache.epochForOffset``)."""
        i = bisect_right([start for _epoch, start in self._entries], offset) - 1
        return self._entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer: (largest epoch <= requested, its end offset)."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            return requested_epoch, higher_start
        return self._entries[higher - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was truncated)."""
        self._entries = [(e, o) for e, o in self._entries if o < end_offset]

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before the new log start; the first kept one starts there."""
        kept: list[tuple[int, int]] = []
        for i, (epoch, offset) in enumerate(self._entries):
            next_start = self._entries[i + 1][1] if i + 1 < len(self._entries) else None
            if next_start is not None and next_start <= start_offset:
                continue
            kept.append((epoch, max(offset, start_offset)))
        self._entries = kept

    def clear(self) -> None:
        self._entries = []

    def flush(self) -> None:
        """Write the checkpoint if it would say something new. An empty cache with no
        file needs none: a load finds no file and rebuilds from the batches, of which
        there are then none with an epoch."""
        if self._entries == self._on_disk or (self._on_disk is None and not self._entries):
            return
        write_epochs(self.path, self._entries, durable=False)
        self._on_disk = list(self._entries)
        self.unsynced = True

    def sync(self) -> None:
        """Make the last ``flush`` durable (the file, then its directory)."""
        if not self.unsynced:
            return
        self.unsynced = False  # first: a flush from now on is synced next time
        try:
            make_durable(self.path)
        except FileNotFoundError:
            return  # the partition was deleted meanwhile
        except OSError:
            self.unsynced = True
            raise
