"""A byte range of a segment file, handed to the network layer without copying."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes at ``position`` in the open file ``fd``.

    A server sends it with ``os.sendfile`` (or ``loop.sock_sendfile``); anything else reads
    it with :meth:`read`. ``keep_open`` is what keeps ``fd`` open for as long as the
    region lives (a segment's ``SegmentFile``, see open_files.py), however long the
    network takes to send it; deleted segments' files are also removed only after
    ``file.delete.delay.ms``. The last batch of a region may be partial, exactly as in
    Kafka; clients drop it.
    """

    fd: int
    position: int
    length: int
    first_offset: int
    keep_open: object = None

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        """For ``loop.sendfile``, which takes a file object."""
        return self.fd

    def seek(self, position: int) -> None:
        """``loop.sendfile`` moves the file position after sending; sending reads at
        explicit offsets, so there is no position to keep."""

    def read(self) -> bytes:
        chunks: list[bytes] = []
        remaining, position = self.length, self.position
        while remaining > 0:
            chunk = os.pread(self.fd, remaining, position)
            if not chunk:
                break  # the segment was truncated under us: return what is there
            chunks.append(chunk)
            remaining -= len(chunk)
            position += len(chunk)
        return b"".join(chunks)
