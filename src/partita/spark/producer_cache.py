"""Producers kept between the tasks a Python worker runs, as Spark's Kafka sink keeps them.

Spark reuses a Python worker for task after task. A new producer costs each task two
connections and three requests (ApiVersions, Metadata, InitProducerId) before its first
record: 4-18 ms measured on 2 busy cores, against ~250 ms for a task writing 500k rows,
and paid again by every task. Spark's own Kafka sink keeps its producers per executor,
keyed by their configuration, and closes those idle for longer than
``spark.kafka.producer.cache.timeout`` (10 minutes); partita's sink does the same per
worker process.

asyncio ties connections to one event loop, so each worker process keeps one loop for its
life and runs every task's writing on it with ``run_until_complete``. Between tasks the
loop is simply not running: nothing is sent then, since a task returns only once all its
records are acknowledged.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from partita.client.producer import AsyncProducer
from partita.client.security import security_of
from partita.spark.options import SinkOptions

log = logging.getLogger(__name__)

T = TypeVar("T")

# Spark's spark.kafka.producer.cache.timeout default.
IDLE_TIMEOUT_S = 600.0
# A producer that cannot say goodbye in this time is dropped all the same.
CLOSE_TIMEOUT_S = 5.0

ProducerKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class _Idle:
    producer: AsyncProducer
    since: float


def producer_key(options: SinkOptions) -> ProducerKey:
    """Writes share a producer only when they would configure it identically."""
    settings = tuple(sorted((name, repr(value)) for name, value in options.producer.items()))
    return options.bootstrap_servers, settings + options.security


class ProducerCache:
    """One event loop and the idle producers of this process. A producer is taken out of
    the cache while a task uses it, so no two tasks ever share one; a task that fails
    closes its producer rather than hand a possibly broken one to the next."""

    def __init__(self, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._owner_pid = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[ProducerKey, _Idle] = {}

    def run(self, options: SinkOptions, work: Callable[[AsyncProducer], Awaitable[T]]) -> T:
        """``work(producer)`` on this process's loop, with a cached or new producer."""
        return self._process_loop().run_until_complete(self._run(options, work))

    def run_on_loop(self, work: Awaitable[T]) -> T:
        """``work`` on this process's loop, with no cached producer (the exactly-once sink
        opens one per task: its transactional id is the task's)."""
        return self._process_loop().run_until_complete(work)

    @property
    def idle_producers(self) -> int:
        return len(self._idle)

    def close(self) -> None:
        """Close every idle producer and the loop (at interpreter exit)."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._owner_pid != os.getpid():
            return
        idle, self._idle = self._idle, {}
        for entry in idle.values():
            loop.run_until_complete(_close_quietly(entry.producer))
        loop.close()
        self._loop = None

    def _process_loop(self) -> asyncio.AbstractEventLoop:
        # pyspark.daemon forks its workers: a loop or connections inherited from the
        # process that forked are that process's, never this one's.
        if self._owner_pid != os.getpid():
            self._owner_pid = os.getpid()
            self._loop = None
            self._idle = {}
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop

    async def _run(self, options: SinkOptions, work: Callable[[AsyncProducer], Awaitable[T]]) -> T:
        await self._close_expired()
        key = producer_key(options)
        idle = self._idle.pop(key, None)
        producer = idle.producer if idle is not None else await _open(options)
        try:
            result = await work(producer)
        except BaseException:
            await _close_quietly(producer)
            raise
        self._idle[key] = _Idle(producer, time.monotonic())
        return result

    async def _close_expired(self) -> None:
        now = time.monotonic()
        expired = [k for k, e in self._idle.items() if now - e.since > self.idle_timeout_s]
        for key in expired:
            await _close_quietly(self._idle.pop(key).producer)


async def _open(options: SinkOptions) -> AsyncProducer:
    producer = AsyncProducer(
        options.bootstrap_servers, **options.producer, security=security_of(options.security)
    )
    try:
        await producer.start()
    except BaseException:
        await _close_quietly(producer)
        raise
    return producer


async def _close_quietly(producer: AsyncProducer) -> None:
    # Only for producers with nothing left to deliver (idle, or failed: the task reports
    # the failure itself), so an error here has nothing more to tell.
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await producer.stop()
    except Exception as exc:
        log.debug("closing a cached producer failed", extra={"error": str(exc)})
        with contextlib.suppress(Exception):
            await producer.cluster.close()


PRODUCERS = ProducerCache()
atexit.register(PRODUCERS.close)
