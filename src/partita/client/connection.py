"""One asyncio connection to a broker: requests out, responses matched by correlation id.

Requests are kafka-python message objects (the same schema-generated classes the broker
uses); several may be in flight at once, and responses arrive in order, as Kafka
guarantees per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import deque
from typing import Any

from partita.errors import KafkaError
from partita.protocol.api import response_class_for_key


class ConnectionLostError(KafkaError):
    code = -1
    retriable = True


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class BrokerConnection:
    def __init__(
        self, host: str, port: int, client_id: str = "partita", request_timeout_ms: int = 330_000
    ) -> None:
        # Long enough for a JoinGroup parked through a full rebalance (5 min by default).
        self.request_timeout = request_timeout_ms / 1000
        self.host = host
        self.port = port
        self.client_id = client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[tuple[int, Any, asyncio.Future[Any]]] = deque()
        self._next_correlation = 1
        self._reader_task: asyncio.Task[None] | None = None
        self.closed = False

    async def connect(self, timeout: float = 10.0) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=1 << 20), timeout
        )
        self._reader_task = asyncio.create_task(self._read_responses())

    async def request(self, message: Any, *, expect_response: bool = True) -> Any:
        """Send ``message`` (its version already set) and await its response."""
        future = self.send(message, expect_response=expect_response)
        return await self.response(future)

    def send(self, message: Any, *, expect_response: bool = True) -> asyncio.Future[Any] | None:
        """Write ``message`` now, so that requests leave in the order of these calls; the
        future (None when no response is expected) is for ``response``."""
        if self.closed or self._writer is None:
            raise ConnectionLostError(f"connection to {self.host}:{self.port} is closed")
        correlation = self._next_correlation
        self._next_correlation = (correlation + 1) & 0x7FFFFFFF
        message.with_header(correlation_id=correlation, client_id=self.client_id)
        frame = message.encode(header=True, framed=True)
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            # Whoever waits sees the failure; if the write fails first, nobody will wait.
            future.add_done_callback(_retrieve_exception)
            self._pending.append((correlation, message, future))
        self._writer.write(frame)
        return future

    async def response(self, future: asyncio.Future[Any] | None) -> Any:
        """Wait until what was sent is written out, then for the answer ``future`` is for."""
        assert self._writer is not None
        try:
            # A peer that stops reading must not hold the writer past the timeout either.
            await asyncio.wait_for(self._writer.drain(), self.request_timeout)
            if future is None:
                return None
            return await asyncio.wait_for(asyncio.shield(future), self.request_timeout)
        except TimeoutError:
            # A response may still come; this connection can no longer be trusted in order.
            await self.close()
            raise ConnectionLostError(
                f"{self.host}:{self.port} did not answer within {self.request_timeout:.0f}s"
            ) from None

    async def _read_responses(self) -> None:
        assert self._reader is not None
        try:
            while True:
                (size,) = struct.unpack(">i", await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    continue
                correlation, message, future = self._pending.popleft()
                (got,) = struct.unpack_from(">i", frame, 0)
                if got != correlation:
                    raise ConnectionLostError(f"correlation id {got}, expected {correlation}")
                if not future.done():
                    try:
                        cls = response_class_for_key(message.API_KEY)
                        future.set_result(
                            cls.decode(frame, version=message.API_VERSION, header=True)
                        )
                    except Exception as exc:  # an undecodable answer fails that request
                        future.set_exception(exc)
        except (asyncio.IncompleteReadError, OSError, ConnectionLostError) as exc:
            self._fail_all(ConnectionLostError(f"{self.host}:{self.port}: {exc}"))
        except asyncio.CancelledError:
            self._fail_all(ConnectionLostError("connection closed"))
            raise

    def _fail_all(self, error: Exception) -> None:
        self.closed = True
        while self._pending:
            _c, _r, future = self._pending.popleft()
            if not future.done():
                future.set_exception(error)

    async def close(self) -> None:
        self.closed = True
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
        if self._writer is not None:
            # Abort: unsent bytes to a broker that stopped reading must not hold this up.
            self._writer.transport.abort()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
