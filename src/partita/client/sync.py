"""Blocking versions of the asyncio clients, for code without an event loop.

Each object runs its asyncio client on a private event loop in a daemon thread; calls
block until the coroutine finishes. ``Producer.send`` returns a
``concurrent.futures.Future``, like the Java client's ``Future<RecordMetadata>``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, Self, TypeVar

from partita.client.admin import AsyncAdmin
from partita.client.consumer import AsyncConsumer, ConsumerRecord
from partita.client.producer import AsyncProducer, RecordMetadata

T = TypeVar("T")


class _AsyncClient(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class _LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class _Blocking:
    """What each blocking client shares: an event loop of its own on a thread, running
    the asyncio client; ``close`` (or leaving a ``with`` block) stops both."""

    _client: _AsyncClient

    def __init__(self, thread_name: str, client: _AsyncClient) -> None:
        self._thread = _LoopThread(thread_name)
        self._client = client
        self._thread.run(client.start())

    def close(self) -> None:
        self._thread.run(self._client.stop())
        self._thread.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class Producer(_Blocking):
    """``Producer(bootstrap_servers, **AsyncProducer options)``; ``send`` returns a future."""

    _client: AsyncProducer

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", **config: Any) -> None:
        super().__init__("partita-producer", AsyncProducer(bootstrap_servers, **config))

    def send(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, **options: Any
    ) -> concurrent.futures.Future[RecordMetadata]:
        result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()

        async def queue() -> None:
            inner = await self._client.send(topic, value, key, **options)

            def copy(done: asyncio.Future[RecordMetadata]) -> None:
                if done.exception() is not None:
                    result.set_exception(done.exception())
                else:
                    result.set_result(done.result())

            inner.add_done_callback(copy)

        self._thread.run(queue())
        return result

    def flush(self, timeout: float | None = None) -> None:
        self._thread.run(self._client.flush(), timeout)


class Consumer(_Blocking):
    """``Consumer(bootstrap_servers, **AsyncConsumer options)`` with blocking calls."""

    _client: AsyncConsumer

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", **config: Any) -> None:
        super().__init__("partita-consumer", AsyncConsumer(bootstrap_servers, **config))

    def assign(self, partitions: list[tuple[str, int]]) -> None:
        self._client.assign(partitions)

    def subscribe(self, topics: list[str] | None = None, **options: Any) -> None:
        self._client.subscribe(topics, **options)

    def poll(self, timeout_ms: int = 1000, max_records: int = 10_000) -> list[ConsumerRecord]:
        return self._thread.run(self._client.getmany(timeout_ms, max_records))

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._client.seek(partition, offset)

    def position(self, partition: tuple[str, int]) -> int:
        return self._thread.run(self._client.position(partition))

    def commit(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        self._thread.run(self._client.commit(offsets))

    def commit_async(
        self,
        offsets: dict[tuple[str, int], int] | None = None,
        callback: Callable[[dict[tuple[str, int], int], BaseException | None], Any] | None = None,
    ) -> None:
        """Start a commit and return; ``callback(offsets, error)`` runs on the client's
        thread when the coordinator answered."""

        async def start() -> None:
            self._client.commit_async(offsets, callback)

        self._thread.run(start())

    def committed(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return self._thread.run(self._client.committed(partitions))


class Admin(_Blocking):
    """Every ``AsyncAdmin`` method, blocking."""

    _client: AsyncAdmin

    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", **config: Any) -> None:
        super().__init__("partita-admin", AsyncAdmin(bootstrap_servers, **config))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if not asyncio.iscoroutinefunction(method):
            return method

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._thread.run(method(*args, **kwargs))

        return blocking
