"""A segment's ``.txnindex``: the transactions aborted in it, in Kafka's layout.

Each entry is 34 bytes, big-endian, appended when an ABORT marker is written:

    int16 version (0), int64 producer id, int64 first offset, int64 last offset (the
    marker's), int64 last stable offset (the partition's LSO once that marker was written)

A read_committed fetch gets the entries whose range meets the offsets it returns, so the
consumer can drop the aborted records itself. The entries of the segments from the one
holding the fetch offset onward are searched; the search stops at the first entry whose
last stable offset reaches past the fetch's upper bound, since no later segment can hold
one that matters (Kafka's ``collectAbortedTransactions``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from partita.errors import CorruptRecordError

ENTRY = struct.Struct(">hqqqq")
assert ENTRY.size == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode(entry: AbortedTxn) -> bytes:
    return ENTRY.pack(
        0, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset
    )


def decode(data: bytes) -> list[AbortedTxn]:
    """Every entry of a ``.txnindex``; a torn last entry (a crash mid-append) is dropped,
    as Kafka's recovery truncates it."""
    entries = []
    for pos in range(0, len(data) - len(data) % ENTRY.size, ENTRY.size):
        version, producer_id, first, last, lso = ENTRY.unpack_from(data, pos)
        if version != 0:
            raise CorruptRecordError(f"transaction index entry at byte {pos}: version {version}")
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return entries


class TxnIndex:
    """One segment's ``.txnindex``: appended to, read whole (it is small: one entry per
    aborted transaction), truncated with its segment."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries = decode(path.read_bytes()) if path.exists() else []

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction ending at {entry.last_offset} appended after one "
                f"ending at {self.entries[-1].last_offset}"
            )
        with open(self.path, "ab") as out:
            out.write(encode(entry))
            out.flush()
            os.fsync(out.fileno())
        self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or past ``offset`` (the log was cut there)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self.path.write_bytes(b"".join(encode(e) for e in kept))


def collect_aborted(
    indexes: Iterable[list[AbortedTxn]], fetch_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """The aborted transactions a fetch of [fetch_offset, upper_bound) must report, from
    the indexes of the segments that hold fetch_offset and after, in order."""
    found = []
    for entries in indexes:
        for entry in entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found
    return found
