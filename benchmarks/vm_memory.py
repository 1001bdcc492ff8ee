"""Put this VM's memory in a broker's steady state before timing writes.

The machine is a Firecracker guest with free page reporting: guest memory that sits
free is handed back to the host within about two seconds, and the first write to such a
page costs a hypervisor fault. A fresh VM has ~23 GB free, so every new page-cache page
a benchmark's broker fills is such a page: 1 MiB writes into new files run at ~400 MB/s
instead of 2.5-6 GB/s. A broker that has run for a while has no free memory: its page
cache is full, every new page comes from reclaiming an old one at once, and nothing is
handed back. ``steady_page_cache`` gets there the way the broker would, by writing a
scratch file until the kernel has almost nothing free, so that writes measured after it
pay for reclaim, as a running broker does, and not for the host's faults.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TransferSpeedColumn

MIB = 1 << 20
# What the kernel should have left free once the scratch file is written: enough for the
# processes' own growth to come from reclaim of that file, not from the host.
LEAVE_FREE = 512 * MIB
# Disk the scratch file never takes: the benchmark's own data needs room beside it.
KEEP_ON_DISK = 4 * 1024 * MIB


def meminfo(field: str) -> int:
    """Bytes of one /proc/meminfo field (e.g. "MemFree")."""
    with open("/proc/meminfo") as lines:
        for line in lines:
            name, _, rest = line.partition(":")
            if name == field:
                return int(rest.split()[0]) * 1024
    raise KeyError(field)


@contextmanager
def steady_page_cache(directory: Path, leave_free: int = LEAVE_FREE) -> Iterator[int]:
    """Fill the page cache with a scratch file in ``directory`` until MemFree is down to
    ``leave_free``; yields the bytes written and deletes the file on exit."""
    path = directory / "steady-page-cache.tmp"
    disk = os.statvfs(directory)
    room = disk.f_bavail * disk.f_frsize - KEEP_ON_DISK
    wanted = max(0, min(meminfo("MemFree") - leave_free, room))
    chunk = os.urandom(MIB)
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with Progress(
            TextColumn("filling the page cache (a running broker's memory)"),
            BarColumn(),
            TransferSpeedColumn(),
            transient=True,
        ) as progress:
            task = progress.add_task("fill", total=wanted)
            while written + 64 * MIB <= wanted and meminfo("MemFree") > leave_free:
                for _ in range(64):
                    written += os.write(fd, chunk)
                progress.update(task, completed=written)
        os.fsync(fd)  # clean pages: reclaim drops them without writing
        os.close(fd)
        fd = -1
        yield written
    finally:
        if fd >= 0:
            os.close(fd)
        path.unlink(missing_ok=True)
