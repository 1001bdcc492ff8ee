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

import errno
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

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
    """The entries beside one segment, in memory (read once from the file) and in the
    file. Memory is what fetches and the cleaner read, so it changes first; the file
    follows, and a write that fails (a full disk) is logged, not raised: the log holds
    the markers, and loading the partition replays them and rewrites the file. A load
    replays only the batches after the newest producer snapshot, so before the log
    writes one it calls ``sync``: the file must be on disk and whole, or the snapshot
    waits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._unsynced = False  # written since the last fsync
        self._write_failed = False  # the file lacks what memory holds

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = read_entries(self.path)
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        self._entries = [*self.entries(), entry]  # a new list: a reader keeps the old whole
        # An append after a failed write leaves the file short still: only a whole
        # rewrite makes it match memory again.
        self._write(lambda: _append_to(self.path, entry.encode()), whole=False)

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Hold exactly ``entries`` (none: no file)."""
        self._entries = list(entries)
        self._write(lambda: _replace_file(self.path, _encoded(entries)), whole=True)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or past ``offset`` (the log was cut there)."""
        entries = self.entries()
        kept = [e for e in entries if e.last_offset < offset]
        if len(kept) != len(entries):
            self.replace(kept)

    def sync(self) -> bool:
        """Put the file on disk as memory has it (written again if a write failed); True
        when it is, so a producer snapshot past its segment may be written."""
        try:
            if self._write_failed:
                _replace_file(self.path, _encoded(self.entries()))
                self._write_failed = False
                self._unsynced = True
            if self._unsynced:
                _fsync(self.path)
                self._unsynced = False
        except OSError as exc:
            log.warning(
                ".txnindex still not on disk; producer snapshots wait for it",
                extra={"file": str(self.path), "error": str(exc)},
            )
            return False
        return True

    def _write(self, write: Callable[[], object], *, whole: bool) -> None:
        """``whole``: the write puts every entry in the file (a rewrite, not an append)."""
        try:
            write()
        except OSError as exc:
            self._write_failed = True
            log.warning(
                ".txnindex not written; the next load rewrites it from the log",
                extra={"file": str(self.path), "error": str(exc)},
            )
        else:
            if whole:
                self._write_failed = False
            self._unsynced = True


def _encoded(entries: list[AbortedTxn]) -> bytes:
    return b"".join(e.encode() for e in entries)


def _append_to(path: Path, payload: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if os.write(fd, payload) != len(payload):
            raise OSError(errno.ENOSPC, f"short write to {path.name}")
    finally:
        os.close(fd)


def _replace_file(path: Path, payload: bytes) -> None:
    if not payload:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(payload)
    os.replace(tmp, path)


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # no entries: nothing to keep
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
