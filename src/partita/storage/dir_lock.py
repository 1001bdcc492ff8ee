"""The data directory's lock: one broker per directory, as Kafka's ``.lock`` ensures.

A broker holds an exclusive lock on ``<data-dir>/.lock`` for its whole life, with its pid
written in the file; the kernel drops the lock when the process ends, however it ends
(kill -9 included), so a stale file never keeps a broker out.

The lock is an open-file-description lock (``F_OFD_SETLK``), chosen over the two others
``fcntl`` offers:

- ``flock`` cannot be asked who holds it without trying to take it, and inspection
  tools must never take a broker's lock, even for a moment.
- A POSIX record lock (``lockf``) belongs to the process: a second open of the directory
  in the same process would be granted it, and closing any descriptor of the file drops
  it.

An OFD lock belongs to the open file, like ``flock``, and can be queried
(``F_OFD_GETLK``) like a record lock. It also conflicts with the POSIX lock a Kafka
broker takes on its own ``.lock`` (``FileChannel.tryLock``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from partita.errors import KafkaStorageError

LOCK_FILE = ".lock"

# struct flock on Linux (x86-64 and arm64): l_type, l_whence, l_start, l_len, l_pid.
_FLOCK = struct.Struct("hhqqi4x")
_WHOLE_FILE_WRITE_LOCK = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


class DataDirLockedError(KafkaStorageError):
    """Another process uses the data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        holder = f"broker pid {pid}" if pid is not None else "another process"
        super().__init__(
            f"data directory {data_dir} is in use by {holder} (it holds its {LOCK_FILE})"
        )
        self.data_dir = data_dir
        self.pid = pid


class DataDirLock:
    """The held lock of one data directory; ``release`` (or the process ending) drops it."""

    def __init__(self, data_dir: Path, fd: int) -> None:
        self.data_dir = data_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Take the lock, creating the directory if needed, or raise
        DataDirLockedError naming the holder."""
        path = data_dir / LOCK_FILE
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise KafkaStorageError(f"cannot lock data directory {data_dir}: {exc}") from exc
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _WHOLE_FILE_WRITE_LOCK)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):  # held by another open file
                raise DataDirLockedError(data_dir, _read_pid(path)) from None
            raise KafkaStorageError(f"cannot lock data directory {data_dir}: {exc}") from exc
        try:
            # The pid is for people and tools; the lock itself is what excludes.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise KafkaStorageError(f"cannot write {path}: {exc}") from exc
        return cls(data_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock. The file stays: removing it would let a starting broker lock a
        file that the next one no longer sees."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


@dataclass(frozen=True, slots=True)
class LockHolder:
    pid: int | None  # None: the lock file names no pid (yet)


def lock_holder(data_dir: Path) -> LockHolder | None:
    """Who holds ``data_dir``'s lock, or None when nobody does. Never takes the lock, so
    it cannot keep a broker from starting, and needs only read access."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: no broker has ever run here
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _WHOLE_FILE_WRITE_LOCK)
    except OSError:
        return None
    finally:
        os.close(fd)
    if _FLOCK.unpack(answer)[0] == fcntl.F_UNLCK:
        return None
    return LockHolder(_read_pid(path))


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text(encoding="ascii").strip())
    return None
