"""The broker's per-connection receiver (``network._RequestFrames``) over real sockets.

Requests queue for the connection's serving task; reading must pause while too many (or
too many bytes) wait, so a client that pipelines faster than it is answered is held back
by TCP rather than by the broker's memory, and must resume once the task catches up.
Every request comes out whole and in order, including those sent before an EOF.
"""

from __future__ import annotations

import asyncio
import struct

from partita.protocol.frames import _READ_BUFFER
from partita.server.network import _MAX_QUEUED_BYTES, _MAX_QUEUED_FRAMES, _RequestFrames


class _Acceptor:
    """Stands in for ``BrokerServer``: keeps each connection without serving it, so the
    test decides when requests are taken."""

    max_frame_bytes = 64 << 20

    def __init__(self) -> None:
        self.connections: list[_RequestFrames] = []

    def _accept(self, connection: _RequestFrames) -> None:
        self.connections.append(connection)


def _framed(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


async def _pipeline(bodies: list[bytes], settle: float = 0.3) -> tuple[int, int, list[bytes]]:
    """Send ``bodies`` in one go and half-close; return the requests queued once reading
    settled, the queue's bytes then, and every request the connection then hands out."""
    acceptor = _Acceptor()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _RequestFrames(acceptor),  # type: ignore[arg-type]
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sending = loop.create_task(_send_all(writer, _framed(bodies)))
    await asyncio.sleep(settle)
    connection = acceptor.connections[0]
    queued = connection.queued
    queued_bytes = connection._queued_bytes
    received: list[bytes] = []
    while (frame := await connection.next_frame()) is not None:
        received.append(bytes(frame))
    await sending
    writer.close()
    server.close()
    return queued, queued_bytes, received


async def _send_all(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()
    writer.write_eof()


def test_many_small_requests_pause_reading_then_all_arrive_in_order() -> None:
    bodies = [b"%05d" % i * 1600 for i in range(200)]  # 8 KB each, 1.6 MB pipelined
    queued, _bytes, received = asyncio.run(_pipeline(bodies))
    # Reading pauses after the read that reached the bound; one read (256 KiB) can
    # bring up to 32 of these.
    assert queued <= _MAX_QUEUED_FRAMES + _READ_BUFFER // len(bodies[0]) + 1
    assert received == bodies


def test_big_requests_are_bounded_by_bytes_queued() -> None:
    bodies = [bytes([i]) * (3 << 20) for i in range(6)]  # 18 MiB pipelined
    queued, queued_bytes, received = asyncio.run(_pipeline(bodies, settle=0.5))
    # Reading pauses once the queue reaches the byte bound: at most one frame past it.
    assert queued_bytes < _MAX_QUEUED_BYTES + (3 << 20)
    assert queued < len(bodies)
    assert received == bodies
