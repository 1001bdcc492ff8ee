"""The asyncio shell: accept connections, split frames, dispatch, write responses.

Requests on one connection are answered strictly in order, one at a time, as Kafka
does (a long-polling fetch holds back the requests behind it on that connection only).
A frame that cannot be parsed, an unknown API or an unsupported version closes that
connection (Kafka's behaviour), except ApiVersions, which is answered with
UNSUPPORTED_VERSION so that the client can retry with a version we speak.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import struct
from typing import IO, Any, cast

from partita.protocol.api import ApiKey
from partita.protocol.codec import (
    MalformedRequestError,
    RequestHeader,
    UnsupportedRequestError,
    decode_request,
    encode_raw_response,
    encode_response,
)
from partita.protocol.frames import FrameDecoder, FrameTooLargeError
from partita.server.broker import Broker
from partita.server.closing import CloseConnectionError
from partita.server.dispatch import HANDLERS
from partita.server.handlers.api_versions import unsupported_version_body
from partita.storage.file_region import FileRegion

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">ii")
_READ_SIZE = 256 * 1024


class BrokerServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.max_frame_bytes = broker.config.get_int("socket.request.max.bytes")
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.requests_served = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port, limit=_READ_SIZE)
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        decoder = FrameDecoder(self.max_frame_bytes)
        try:
            while True:
                data = await reader.read(_READ_SIZE)
                if not data:
                    break
                for frame in decoder.feed(data):
                    chunks = await self._respond(frame, peer)
                    if chunks:
                        await _write_chunks(writer, chunks)
                await writer.drain()
                decoder.feed(b"")  # raises a bad size prefix held back behind good frames
            if decoder.buffered:
                log.warning(
                    "client closed the connection in the middle of a request",
                    extra={"peer": str(peer), "bytes": decoder.buffered},
                )
        except FrameTooLargeError as exc:
            log.warning(
                "closing connection: oversized request",
                extra={"peer": str(peer), "error": str(exc)},
            )
        except CloseConnectionError as exc:
            log.warning("closing connection", extra={"peer": str(peer), "reason": str(exc)})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels a connection; finishing normally spares asyncio's
            # stream callback a traceback about the cancelled task.
            pass
        except Exception:
            log.exception("connection failed", extra={"peer": str(peer)})
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _respond(self, frame: bytes, peer: Any) -> list[bytes | FileRegion] | None:
        try:
            header, spec, request = decode_request(frame)
        except UnsupportedRequestError as exc:
            if exc.header.api_key == ApiKey.API_VERSIONS:
                log.info(
                    "ApiVersions version not supported; answering with our ranges",
                    extra={
                        "peer": str(peer),
                        "version": exc.header.api_version,
                        "client_id": exc.header.client_id,
                    },
                )
                body = unsupported_version_body()
                return [encode_raw_response(exc.header.correlation_id, body, header_tagged=False)]
            raise CloseConnectionError(f"{exc} from client {exc.header.client_id!r}") from exc
        except MalformedRequestError as exc:
            head = frame[:96].hex()
            raise CloseConnectionError(f"malformed request: {exc} (first bytes: {head})") from exc
        handler = HANDLERS[header.api_key]
        self.requests_served += 1
        result = handler(self.broker, header, request)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            return None
        if isinstance(result, list):  # pre-encoded body chunks (Fetch)
            return self._frame_chunks(header, spec.flexible(header.api_version), result)
        return [encode_response(header, spec, result)]

    @staticmethod
    def _frame_chunks(
        header: RequestHeader, flexible: bool, chunks: list[bytes | FileRegion]
    ) -> list[bytes | FileRegion]:
        size = 4 + (1 if flexible else 0) + sum(len(c) for c in chunks)
        prefix = _PREFIX.pack(size, header.correlation_id) + (b"\x00" if flexible else b"")
        return [prefix, *chunks]


_LARGE_CHUNK = 64 * 1024


async def _write_chunks(writer: asyncio.StreamWriter, chunks: list[bytes | FileRegion]) -> None:
    """Small chunks are joined into one write; large record sets are handed to the
    transport as they are (Python 3.11's writelines would copy them into a join), and
    file regions go out by sendfile."""
    pending: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, bytes) and len(chunk) < _LARGE_CHUNK:
            pending.append(chunk)
            continue
        if pending:
            writer.write(b"".join(pending))
            pending.clear()
        if isinstance(chunk, FileRegion):
            await _send_region(writer, chunk)
        else:
            writer.write(chunk)
    if pending:
        writer.write(b"".join(pending) if len(pending) > 1 else pending[0])


async def _send_region(writer: asyncio.StreamWriter, region: FileRegion) -> None:
    loop = asyncio.get_running_loop()
    try:
        # A file object is asked for; sendfile uses only its fileno() and seek().
        file = cast(IO[bytes], region)
        sent = await loop.sendfile(writer.transport, file, region.position, region.length)
    except asyncio.SendfileNotAvailableError:  # e.g. TLS: through memory instead
        data = region.read()
        sent = len(data)
        writer.write(data)
    if sent != region.length:
        # The frame's size was promised before sending; a segment truncated meanwhile
        # (a follower's truncation, deleted records) leaves no way to keep it.
        raise CloseConnectionError(
            f"segment shrank under a fetch: sent {sent} of {region.length} bytes"
        )
