"""Record regions sent with sendfile arrive byte for byte, and a region the file can no
longer fill ends the connection instead of sending a frame shorter than it announced."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from partita.protocol.file_region import FileRegion
from partita.server.closing import CloseConnectionError
from partita.server.network import _write_chunks


async def _send_and_receive(
    path: Path, chunks_for: Callable[[int], list[bytes | FileRegion]]
) -> tuple[bytes, BaseException | None]:
    """Serve one connection on 127.0.0.1 that writes the chunks; return what a client
    read until the server closed, and what the server's write raised."""
    fd = os.open(path, os.O_RDONLY)
    outcome: list[BaseException | None] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _write_chunks(writer.transport, chunks_for(fd))
            await writer.drain()
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        received = await reader.read()
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
        os.close(fd)
    return received, outcome[0]


def test_a_big_region_goes_out_whole_between_the_other_chunks(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "segment.log"
    path.write_bytes(data)

    def chunks(fd: int) -> list[bytes | FileRegion]:
        return [b"head", FileRegion(fd, 5, len(data) - 5, 0), b"x" * 70_000, b"tail"]

    received, error = asyncio.run(_send_and_receive(path, chunks))
    assert error is None
    assert received == b"head" + data[5:] + b"x" * 70_000 + b"tail"


def test_a_region_past_the_end_of_its_file_closes_the_connection(tmp_path: Path) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"\x01" * 100_000)

    def chunks(fd: int) -> list[bytes | FileRegion]:
        return [b"size", FileRegion(fd, 0, 200_000, 0)]  # truncated since it was planned

    received, error = asyncio.run(_send_and_receive(path, chunks))
    assert isinstance(error, CloseConnectionError)
    assert "sent 100000 of 200000" in str(error)
    assert received == b"size" + b"\x01" * 100_000  # and then the connection ends


@pytest.mark.parametrize("size", [1, 64 * 1024])
def test_region_edges(tmp_path: Path, size: int) -> None:
    path = tmp_path / "segment.log"
    path.write_bytes(b"\x02" * size)

    def chunks(fd: int) -> list[bytes | FileRegion]:
        return [FileRegion(fd, 0, size, 0)]

    received, error = asyncio.run(_send_and_receive(path, chunks))
    assert error is None and received == b"\x02" * size
