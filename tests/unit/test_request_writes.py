"""The client's writes (``ResponseFrames.write``) to a peer that reads slower than they
come, over a real loopback socket: every byte arrives, in order; asyncio's own write
buffer stays small (the rest waits as views, not copies); ``drain`` returns only once
everything has been handed to the transport."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

from partita.client.connection import _WRITE_PIECE, ResponseFrames

# asyncio's default high-water mark for socket transports.
_HIGH_WATER = 64 * 1024


class _SlowReader:
    """A peer that reads ``chunk`` bytes, sleeps, and keeps everything it read."""

    def __init__(self, chunk: int = 64 * 1024, pause_s: float = 0.0005) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.received = bytearray()
        self.chunk, self.pause_s = chunk, pause_s
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def _run(self) -> None:
        conn, _ = self.listener.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        with conn:
            while data := conn.recv(self.chunk):
                self.received += data
                time.sleep(self.pause_s)


def test_a_slow_peer_gets_every_byte_in_order_and_the_transport_buffer_stays_small() -> None:
    reader = _SlowReader()
    writes = [os.urandom(n) for n in (10, 3 * 1024 * 1024, 700, 1024 * 1024 + 5, 0, 90_000)]
    writes += [memoryview(os.urandom(2 * 1024 * 1024))]

    async def run() -> int:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(
            lambda: ResponseFrames(lambda _frame: None), "127.0.0.1", reader.port
        )
        largest = 0
        for data in writes:
            protocol.write([data])
            largest = max(largest, transport.get_write_buffer_size())
        drained = asyncio.ensure_future(protocol.drain())
        while not drained.done():
            largest = max(largest, transport.get_write_buffer_size())
            await asyncio.sleep(0.001)
        await drained
        # Everything is with the transport (and under its mark) once drain returns.
        assert not protocol._backlog
        assert transport.get_write_buffer_size() <= _HIGH_WATER
        transport.close()
        return largest

    largest = asyncio.run(run())
    reader.thread.join(timeout=30)
    assert bytes(reader.received) == b"".join(bytes(w) for w in writes)
    # Without the pieces and the backlog, asyncio's buffer would hold megabytes here.
    assert largest <= _HIGH_WATER + _WRITE_PIECE
