"""One asyncio connection to a broker: requests out, responses matched by correlation id.

Requests are kafka-python message objects (the same schema-generated classes the broker
uses), or requests framed by hand (``frame_chunks``: produce requests, and what a
consumer sends before its first record, which also read their own responses with
``decode_response``). Several may be in flight at once, and responses arrive in order,
as Kafka guarantees per connection.

Responses are received by a buffered protocol over ``protocol.frames.FrameReceiver``: a
big one (a fetch of megabytes) is received straight into a buffer of its own size, so
its bytes are copied once, by the kernel, instead of three times through a stream
reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from partita.client.security import ClientSecurity
from partita.errors import KafkaError, SaslAuthenticationFailedError
from partita.protocol.frames import FrameReceiver
from partita.protocol.wire import skip_tagged_fields
from partita.security.scram import ScramClient

PLAINTEXT = ClientSecurity()


class ConnectionLostError(KafkaError):
    code = -1
    retriable = True


# Requests go to the transport in pieces of at most this size (views, not copies), so that
# what asyncio's buffer holds past its high-water mark stays small.
_WRITE_PIECE = 256 * 1024


def _retrieve_exception(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


_ApiVersions = 18  # its response header stays v0 in every version (KIP-511)


class ResponseFrames(asyncio.BufferedProtocol):
    """Size-prefixed response frames off one connection (split by ``FrameReceiver``),
    handed to ``on_frame`` whole.

    Also the connection's writes and their flow control. Requests are handed to the
    transport a piece (at most ``_WRITE_PIECE`` bytes) at a time, and only while it is
    not paused; the rest waits here, in order, as views of the callers' buffers. asyncio's
    own buffer (Python 3.11) is one bytearray: everything queued in it is copied in, grown
    by reallocation and shifted after each partial send, which with megabyte produce
    requests to a broker slower than the producer cost more CPU than encoding them.
    ``drain`` waits until everything written has gone to the transport and its buffer is
    under the high-water mark."""

    def __init__(self, on_frame: Callable[[memoryview], None]) -> None:
        self.on_frame = on_frame
        self.transport: asyncio.Transport | None = None
        # bytearray, not numpy's uninitialized buffers: zeroing 1 MiB costs ~20 µs, less
        # than 1% of decoding a 1 MiB fetch, and a consumer need not import numpy.
        self._frames = FrameReceiver(allocate=bytearray)
        self._paused = False
        self._backlog: deque[bytes | memoryview] = deque()
        self._drained: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        for frame in self._frames.received(nbytes):
            if len(frame) < 4:
                raise ConnectionLostError(f"a response of {len(frame)} bytes has no header")
            self.on_frame(frame)
        if self._frames.error is not None:
            size = self._frames.error.size
            raise ConnectionLostError(f"a response announced a size of {size}")

    def eof_received(self) -> bool:
        return False  # close the transport: a broker does not half-close

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        self._backlog.clear()
        self.resume_writing()

    def write(self, chunks: list[bytes | memoryview]) -> None:
        """Queue ``chunks`` after everything written before, and pass on what the
        transport takes now."""
        backlog = self._backlog
        for chunk in chunks:
            if len(chunk) <= _WRITE_PIECE:
                backlog.append(chunk)
                continue
            view = memoryview(chunk).cast("B")
            for start in range(0, len(view), _WRITE_PIECE):
                backlog.append(view[start : start + _WRITE_PIECE])
        self._pass_on()

    def _pass_on(self) -> None:
        transport, backlog = self.transport, self._backlog
        if transport is None or self.lost.done():
            return
        # transport.write calls pause_writing itself once its buffer is over the mark.
        while backlog and not self._paused and not transport.is_closing():
            transport.write(backlog.popleft())

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._pass_on()
        if self._paused or self._backlog:
            return  # paused again by what was just passed on
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def drain(self) -> None:
        if self.lost.done():
            raise ConnectionLostError("the connection was lost")
        if self._paused or self._backlog:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)
            if self.lost.done():
                raise ConnectionLostError("the connection was lost")


def _response_body_start(frame: memoryview, api_key: int, flexible: bool) -> int:
    """Where the body begins after the correlation id and, in flexible versions, the
    response header's tagged fields (KIP-482), which no response of ours carries."""
    if not flexible or api_key == _ApiVersions:
        return 4
    return skip_tagged_fields(frame, 4)


class RequestTally:
    """Requests sent over a client's connections, however many it opened and closed: the
    console reports the load it puts on the cluster from it."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent = 0


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str = "partita",
        request_timeout_ms: int = 330_000,
        security: ClientSecurity | None = None,
        tally: RequestTally | None = None,
    ) -> None:
        self.tally = tally
        self.security = security or PLAINTEXT
        # Long enough for a JoinGroup parked through a full rebalance (5 min by default).
        self.request_timeout = request_timeout_ms / 1000
        self.host = host
        self.port = port
        self.client_id = client_id
        self._protocol: ResponseFrames | None = None
        # (correlation id, request, its future, a decoder of the response body or None)
        self._pending: deque[
            tuple[int, Any, asyncio.Future[Any], Callable[[memoryview], Any] | None]
        ] = deque()
        self._next_correlation = 1
        self.closed = False

    async def connect(self, timeout: float = 10.0) -> None:
        """Connect (through TLS on an SSL listener) and, on a SASL listener, log in
        before anything else is sent."""
        loop = asyncio.get_running_loop()
        tls = self.security.tls
        async with asyncio.timeout(timeout):
            _transport, protocol = await loop.create_connection(
                lambda: ResponseFrames(self._on_frame),
                self.host,
                self.port,
                ssl=tls,
                server_hostname=self.host if tls is not None else None,
            )
            self._protocol = protocol
            protocol.lost.add_done_callback(self._on_lost)
            if self.security.sasl:
                try:
                    await self._log_in()
                except BaseException:
                    await self.close()
                    raise

    async def _log_in(self) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate v2."""
        from kafka.protocol.sasl import (  # noqa: PLC0415  (only secured clients pay)
            SaslAuthenticateRequest,
            SaslHandshakeRequest,
        )

        security = self.security
        handshake = await self.request(SaslHandshakeRequest[1](mechanism=security.mechanism))
        if handshake.error_code:
            raise SaslAuthenticationFailedError(
                f"{self.host}:{self.port} does not offer {security.mechanism} "
                f"(it offers {', '.join(handshake.mechanisms) or 'nothing'})"
            )

        async def exchange(token: bytes) -> bytes:
            answer = await self.request(SaslAuthenticateRequest[2](auth_bytes=token))
            if answer.error_code:
                raise SaslAuthenticationFailedError(
                    f"{self.host}:{self.port}: {answer.error_message or 'login refused'}"
                )
            return bytes(answer.auth_bytes or b"")

        if security.mechanism == "PLAIN":
            await exchange(f"\0{security.username}\0{security.password}".encode())
            return
        scram = ScramClient(security.mechanism, security.username, security.password)
        server_first = await exchange(scram.first())
        scram.verify(await exchange(scram.final(server_first)))

    async def request(
        self,
        message: Any,
        *,
        expect_response: bool = True,
        decoder: Callable[[memoryview], Any] | None = None,
    ) -> Any:
        """Send ``message`` (its version already set) and await its response."""
        future = self.send(message, expect_response=expect_response, decoder=decoder)
        return await self.response(future)

    def send(
        self,
        message: Any,
        *,
        expect_response: bool = True,
        decoder: Callable[[memoryview], Any] | None = None,
    ) -> asyncio.Future[Any] | None:
        """Write ``message`` now, so that requests leave in the order of these calls; the
        future (None when no response is expected) is for ``response``. ``decoder``, when
        given, reads the response body instead of kafka-python's class for the request
        (``decode_fetch_response_v11``: records stay views of the frame)."""
        protocol = self._protocol
        if self.closed or protocol is None or protocol.transport is None:
            raise ConnectionLostError(f"connection to {self.host}:{self.port} is closed")
        correlation = self._next_correlation
        self._next_correlation = (correlation + 1) & 0x7FFFFFFF
        if self.tally is not None:
            self.tally.sent += 1
        chunked = getattr(message, "frame_chunks", None)
        if chunked is not None:
            # Framed by hand (protocol.produce_request): record sets are written as they
            # are, not copied into one request buffer first.
            frame_chunks = chunked(correlation, self.client_id)
        else:
            message.with_header(correlation_id=correlation, client_id=self.client_id)
            frame_chunks = [message.encode(header=True, framed=True)]
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            # Whoever waits sees the failure; if the write fails first, nobody will wait.
            future.add_done_callback(_retrieve_exception)
            self._pending.append((correlation, message, future, decoder))
        protocol.write(frame_chunks)
        return future

    async def response(self, future: asyncio.Future[Any] | None) -> Any:
        """Wait until what was sent is written out, then for the answer ``future`` is for."""
        assert self._protocol is not None
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # lands just after the answer arrived (gh-86296), and a heartbeat task that
            # ignored its cancel kept a consumer's stop() waiting forever.
            async with asyncio.timeout(self.request_timeout):
                # A peer that stops reading must not hold the writer past the timeout.
                await self._protocol.drain()
                if future is None:
                    return None
                return await asyncio.shield(future)
        except TimeoutError:
            # A response may still come; this connection can no longer be trusted in order.
            await self.close()
            raise ConnectionLostError(
                f"{self.host}:{self.port} did not answer within {self.request_timeout:.0f}s"
            ) from None

    def _on_frame(self, frame: memoryview) -> None:
        if not self._pending:
            return
        (got,) = struct.unpack_from(">i", frame, 0)
        correlation, message, future, decoder = self._pending[0]
        if got != correlation:
            error = ConnectionLostError(f"correlation id {got}, expected {correlation}")
            self._fail_all(error)
            if self._protocol is not None and self._protocol.transport is not None:
                self._protocol.transport.abort()
            return
        self._pending.popleft()
        if future.done():
            return
        try:
            version = message.API_VERSION
            # A request framed by hand (protocol.consumer_requests) reads its answer by
            # hand; the others are kafka-python's classes, loaded only when one is used.
            decoder = decoder or getattr(message, "decode_response", None)
            flexible = getattr(message, "flexible_response", None)
            if decoder is None or flexible is None:
                from partita.protocol.api import response_class_for_key  # noqa: PLC0415

                cls = response_class_for_key(message.API_KEY)
                flexible = cls.flexible_version_q(version)
                if decoder is None:
                    # Decoded without kafka-python's header path, which copies the frame.
                    decoder = functools.partial(cls.decode, version=version)
            start = _response_body_start(frame, message.API_KEY, bool(flexible))
            future.set_result(decoder(frame[start:]))
        except Exception as exc:  # an undecodable answer fails that request
            future.set_exception(exc)

    def _on_lost(self, lost: asyncio.Future[Exception | None]) -> None:
        cause = lost.result() or "closed by the broker"
        self._fail_all(ConnectionLostError(f"{self.host}:{self.port}: {cause}"))

    def _fail_all(self, error: Exception) -> None:
        self.closed = True
        while self._pending:
            _c, _r, future, _d = self._pending.popleft()
            if not future.done():
                future.set_exception(error)

    async def close(self) -> None:
        self.closed = True
        protocol = self._protocol
        if protocol is not None and protocol.transport is not None:
            # Abort: unsent bytes to a broker that stopped reading must not hold this up.
            protocol.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.shield(protocol.lost)
        self._fail_all(ConnectionLostError("connection closed"))
