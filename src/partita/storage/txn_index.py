"""A segment's transaction index, ``<base>.txnindex``, in Kafka's file layout.

One entry per transaction aborted by a marker in the segment, 34 bytes big-endian:
version (int16, 0), producer id (int64), first offset (int64: the transaction's first
batch in this partition), last offset (int64: the ABORT marker's) and last stable offset
(int64: the partition's LSO once the transaction was closed). A read_committed fetch
reports the entries whose range meets what it returns (``PartitionLog.aborted_between``),
so that the client can drop the aborted batches itself; the cleaner reads them to know
which batches to remove. The file
is created with its first entry, as Kafka's is; Kafka's ``kafka-dump-log
--transaction-index`` reads it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


class TxnIndexCorruptError(Exception):
    """A ``.txnindex`` that is not whole entries of a known version."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset,
            self.last_stable_offset,
        )  # fmt: skip


def read_entries(path: Path) -> list[AbortedTxn]:
    """Every entry of the file (none if it does not exist)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if len(data) % _ENTRY.size:
        raise TxnIndexCorruptError(f"{path.name}: {len(data)} bytes is not whole entries")
    entries = []
    for version, *fields in _ENTRY.iter_unpack(data):
        if version != _VERSION:
            raise TxnIndexCorruptError(f"{path.name}: entry version {version}")
        entries.append(AbortedTxn(*fields))
    return entries


class TransactionIndex:
    """The file beside one segment, and its entries in memory (read once): appended to
    as markers are, rewritten when the segment is truncated or its entries are found
    stale on load. Never fsynced on its own: the log is the truth, and loading a
    partition replays its markers and rewrites a file that lost entries in a crash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = read_entries(self.path)
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            payload = entry.encode()
            if os.write(fd, payload) != len(payload):
                raise OSError(f"short write to {self.path.name}")
        finally:
            os.close(fd)
        self._entries = [*entries, entry]  # a new list: a reader holds the old one whole

    def replace(self, entries: list[AbortedTxn]) -> None:
        """The file holds exactly ``entries`` (none: no file)."""
        if entries:
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as out:
                out.write(b"".join(e.encode() for e in entries))
            os.replace(tmp, self.path)
        else:
            self.path.unlink(missing_ok=True)
        self._entries = list(entries)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or past ``offset`` (the log was cut there)."""
        entries = self.entries()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self.replace(kept)
