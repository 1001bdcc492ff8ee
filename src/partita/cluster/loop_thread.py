"""A coroutine on an event loop of its own, in a daemon thread.

The broker renews its lease this way: on the broker's own loop, a renewal waits behind
whatever else the loop has to do, and opening ten thousand new partitions, or answering
a Metadata request for them, held it long enough for leases to lapse and the controller
to move leaderships off brokers that were only busy. Kafka's brokers send their
heartbeats from a thread of their own for the same reason. A process that stands still
(SIGSTOP) stops this thread too, so a paused broker still loses its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

JOIN_TIMEOUT_SECONDS = 5.0


class LoopThread:
    def __init__(self, name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._main = main
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self._main(), name=self.name)
        self._started.set()
        try:
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("thread's coroutine failed", extra={"thread": self.name})
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    async def stop(self) -> None:
        """Cancel the coroutine and wait (off the caller's loop) for the thread to end."""
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed: already done
                loop.call_soon_threadsafe(task.cancel)
        await asyncio.to_thread(self._thread.join, JOIN_TIMEOUT_SECONDS)
