"""Early writeback of the active segments' finished windows, started off the append path.

Appends run on the broker's event loop. ``sync_file_range(SYNC_FILE_RANGE_WRITE)``
(``linux_file_calls`` says why the segment asks for it) submits the window's I/O in the
calling thread, about 0.2 ms per 4 MiB here, and waits for request slots when the disk
is busier than that: neither belongs on the loop that also answers fetches. One daemon
thread makes the calls instead; the ctypes call lets go of the GIL, so the submission
runs on another core. Each request holds a duplicate of the segment's descriptor, so a
segment closed meanwhile can never have its number reused under the call.

It is advice: when the thread is behind (a disk slower than the appends), new windows
are skipped and the kernel's own flusher writes them later, as it would without us.
"""

from __future__ import annotations

import logging
import os
import queue
import threading

from partita.storage import linux_file_calls

log = logging.getLogger(__name__)

_MAX_PENDING = 64


class WritebackStarter:
    def __init__(self, max_pending: int = _MAX_PENDING) -> None:
        self._requests: queue.Queue[tuple[int, int, int]] = queue.Queue(max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.supported = True
        self.skipped = 0

    def request(self, fd: int, start: int, length: int) -> None:
        """Have ``length`` bytes of ``fd`` from ``start`` written back soon; never blocks."""
        if not self.supported:
            return
        if self._thread is None:
            self._start_thread()
        try:
            duplicate = os.dup(fd)
        except OSError:
            return
        try:
            self._requests.put_nowait((duplicate, start, length))
        except queue.Full:
            os.close(duplicate)
            self.skipped += 1

    def wait_idle(self) -> None:
        """Return once every request made so far has been handed to the kernel."""
        self._requests.join()

    def _start_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="partita-writeback", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            duplicate, start, length = self._requests.get()
            try:
                if linux_file_calls.start_writeback(duplicate, start, length) is None:
                    self.supported = False
                    log.info("early writeback unsupported here; the kernel flushes alone")
            finally:
                os.close(duplicate)
                self._requests.task_done()


# One thread for the process: requests are a few per second per busy partition.
WRITEBACK = WritebackStarter()
