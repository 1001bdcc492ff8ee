"""Kafka's small text checkpoint files, written atomically (temp file, fsync, rename).

Both formats start with a version line and an entry count:

    recovery-point-offset-checkpoint      leader-epoch-checkpoint
    0                                     0
    2                                     2
    orders 0 1200                         0 0
    orders 1 980                          3 1500
"""

from __future__ import annotations

import os
from pathlib import Path

from partita.errors import KafkaStorageError

CHECKPOINT_VERSION = 0


class CheckpointCorruptError(KafkaStorageError):
    """A checkpoint file cannot be parsed; its caller falls back to a full scan."""


def write_atomically(
    path: Path, content: str | bytes, *, sync_directory: bool = True, durable: bool = True
) -> None:
    """Write ``content`` to a temp file, fsync it, rename it over ``path``; with
    ``sync_directory``, fsync the directory too, so that the rename survives a crash (a
    file that may be lost, such as a producer snapshot, skips that second fsync). Without
    ``durable``, neither fsync: readers see the whole old or the whole new content, but
    a crash may lose the write (its caller syncs it later). A failure leaves ``path`` as
    it was and no temp file."""
    tmp = path.with_name(path.name + ".tmp")
    data = content.encode() if isinstance(content, str) else content
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    if durable and sync_directory:
        fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable(path: Path) -> None:
    """What ``write_atomically(durable=False)`` left out: fsync the file, then the
    directory that holds its name."""
    fsync_path(path)
    fsync_path(path.parent)


def _read_lines(path: Path, fields: int) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        raise CheckpointCorruptError(f"{path}: missing version or count line")
    try:
        version, count = int(lines[0]), int(lines[1])
    except ValueError:
        raise CheckpointCorruptError(f"{path}: version and count must be integers") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointCorruptError(f"{path}: unknown checkpoint version {version}")
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CheckpointCorruptError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """A ``topic partition offset`` checkpoint; a missing file is an empty one."""
    if not path.exists():
        return {}
    try:
        return {(t, int(p)): int(o) for t, p, o in _read_lines(path, 3)}
    except ValueError:
        raise CheckpointCorruptError(f"{path}: partition and offset must be integers") from None


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items()))
    write_atomically(path, f"{CHECKPOINT_VERSION}\n{len(offsets)}\n{body}")


def read_epochs(path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(e), int(o)) for e, o in _read_lines(path, 2)]
    except ValueError:
        raise CheckpointCorruptError(f"{path}: epoch and offset must be integers") from None


def write_epochs(path: Path, epochs: list[tuple[int, int]], *, durable: bool = True) -> None:
    body = "".join(f"{e} {o}\n" for e, o in epochs)
    write_atomically(path, f"{CHECKPOINT_VERSION}\n{len(epochs)}\n{body}", durable=durable)
