"""A TCP proxy that can cut every connection through it at once, like a network blip.

Clients connect to the proxy; the broker advertises the proxy's address
(``advertised.listeners``), so every connection a client opens after bootstrap goes
through it too. ``cut()`` aborts both sides of every open connection with a reset, the
way a dropped link or a killed middlebox looks to the client: requests already written
may or may not have reached the broker, and their answers are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


class CuttingProxy:
    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.upstream_port = 0
        self.cuts = 0
        self.bytes_forwarded = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._server = await asyncio.start_server(self._accept, sock=self.listener)

    async def _accept(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        try:
            broker_in, broker_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_out.transport.abort()
            return
        self._open |= {client_out, broker_out}
        await asyncio.gather(self._pump(client_in, broker_out), self._pump(broker_in, client_out))
        self._open -= {client_out, broker_out}

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await source.read(65536):
                sink.write(data)
                self.bytes_forwarded += len(data)
                await sink.drain()
        sink.transport.abort()

    def cut(self) -> None:
        """Reset every connection through the proxy; new ones are accepted again."""
        if self._open:
            self.cuts += 1
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
