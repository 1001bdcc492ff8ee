"""A cancelled request stays cancelled, even when its answer has already arrived.

On Python 3.11, ``asyncio.wait_for`` returns the result instead of raising when the
cancel lands after the awaited future completed (gh-86296). A consumer's heartbeat task
once ignored its cancel that way and kept ``stop()`` waiting forever; these tests put the
cancel exactly there: after the response frame has completed the request's future, before
the requesting task has resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from partita.client.connection import BrokerConnection


async def _answer_api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request with an empty ApiVersions v0 response (error 0, no keys)."""
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            correlation = frame[4:8]
            body = struct.pack(">hi", 0, 0)
            writer.write(struct.pack(">i", 4 + len(body)) + correlation + body)
            await writer.drain()
    except asyncio.IncompleteReadError:
        writer.close()


@contextlib.asynccontextmanager
async def _connected() -> AsyncIterator[BrokerConnection]:
    """A connection to a server that answers every request at once."""
    server = await asyncio.start_server(_answer_api_versions, "127.0.0.1", 0)
    connection = BrokerConnection("127.0.0.1", server.sockets[0].getsockname()[1])
    await connection.connect()
    try:
        yield connection
    finally:
        await connection.close()
        server.close()
        await server.wait_closed()


async def _cancel_after_answer(connection: BrokerConnection) -> asyncio.Task[object]:
    task = asyncio.create_task(connection.request(ApiVersionsRequest(version=0)))
    await asyncio.sleep(0)  # the request is written and its future is pending
    _correlation, _message, future, _decoder = connection._pending[0]
    # Runs from the event loop right after the response frame completed the future,
    # before the task waiting on it has been woken.
    future.add_done_callback(lambda _f: task.cancel())
    return task


def test_a_cancel_that_lands_after_the_answer_still_cancels() -> None:
    async def run() -> None:
        async with _connected() as connection:
            task = await _cancel_after_answer(connection)
            with pytest.raises(asyncio.CancelledError):
                await task
            assert task.cancelled()
            # The connection is still in order: the next request is answered.
            response = await connection.request(ApiVersionsRequest(version=0))
            assert response.error_code == 0

    asyncio.run(run())


def test_a_loop_that_heartbeats_ends_when_cancelled_mid_answer() -> None:
    """The shape of the consumer's heartbeat loop: it ends only by cancellation."""

    async def run() -> None:
        answered = 0
        async with _connected() as connection:

            async def heartbeat_forever() -> None:
                nonlocal answered
                while True:
                    await connection.request(ApiVersionsRequest(version=0))
                    answered += 1

            task = asyncio.create_task(heartbeat_forever())
            while not connection._pending:
                await asyncio.sleep(0)
            _c, _m, future, _d = connection._pending[0]
            future.add_done_callback(lambda _f: task.cancel())
            async with asyncio.timeout(5):
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert answered == 0

    asyncio.run(run())
