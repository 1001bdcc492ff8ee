"""The asyncio shell: accept connections, split frames, dispatch, write responses.

Requests on one connection are answered strictly in order, one at a time, as Kafka
does (a long-polling fetch holds back the requests behind it on that connection only).
A frame that cannot be parsed, an unknown API or an unsupported version closes that
connection (Kafka's behaviour), except ApiVersions, which is answered with
UNSUPPORTED_VERSION so that the client can retry with a version we speak.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import logging
import os
import socket
import struct
import time
from collections import deque
from typing import IO, Any, cast

from partita.errors import KafkaError
from partita.protocol.api import ApiKey
from partita.protocol.codec import (
    RequestHeader,
    UnsupportedRequestError,
    decode_header,
    decode_request,
    encode_raw_response,
    encode_response,
)
from partita.protocol.fetch_response import set_fetch_throttle
from partita.protocol.file_region import FileRegion
from partita.protocol.frames import FrameReceiver
from partita.protocol.wire import MalformedRequestError
from partita.security.ssl_principal import NoMatchingRuleError
from partita.server.authentication import LOGIN_APIS, ListenerSecurity, Session
from partita.server.broker import Broker
from partita.server.closing import CloseConnectionError
from partita.server.dispatch import HANDLERS
from partita.server.handlers.api_versions import unsupported_version_body
from partita.server.quotas import FETCH as FETCH_RATE
from partita.server.quotas import PRODUCE as PRODUCE_RATE
from partita.server.quotas import REQUEST as REQUEST_SHARE
from partita.server.request_context import RequestContext, fetch_replica_id

log = logging.getLogger(__name__)

_PREFIX = struct.Struct(">ii")
# Requests received but not yet answered, per connection, before reading pauses: a
# client pipelining faster than it is answered is held back by TCP, not by our memory.
# (Kafka reads one request per connection and mutes it until the answer is sent; a few
# queued small requests keep pipelined producers busy, the byte bound keeps big ones to
# a frame or two.)
_MAX_QUEUED_FRAMES = 16
_TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens TLS and stalls holds nothing longer
_MAX_QUEUED_BYTES = 4 << 20


class BrokerServer:
    def __init__(self, broker: Broker, security: ListenerSecurity) -> None:
        self.broker = broker
        self.security = security
        self.max_frame_bytes = broker.config.get_int("socket.request.max.bytes")
        self.socket_options = [
            (option, size)
            for option, key in (
                (socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                (socket.SO_RCVBUF, "socket.receive.buffer.bytes"),
            )
            if (size := broker.config.get_int(key)) > 0
        ]
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.requests_served = 0

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        # TLS is started per connection (``_start_tls``), not by the server: asyncio
        # reports a failed handshake only in its debug log, and a refused certificate
        # must leave a line naming the address and the reason.
        self._server = await loop.create_server(lambda: _RequestFrames(self), host, port)
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

    def _accept(self, connection: _RequestFrames) -> None:
        sock = connection.transport.get_extra_info("socket") if connection.transport else None
        if sock is not None:
            for option, size in self.socket_options:
                sock.setsockopt(socket.SOL_SOCKET, option, size)
        serve = self._start_tls(connection) if self.security.tls else self._serve(connection)
        task = asyncio.get_running_loop().create_task(serve)
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _start_tls(self, connection: _RequestFrames) -> None:
        raw = connection.transport
        assert raw is not None and self.security.tls is not None
        peer = raw.get_extra_info("peername")
        try:
            tls = await asyncio.get_running_loop().start_tls(
                raw,
                connection,
                self.security.tls,
                server_side=True,
                ssl_handshake_timeout=_TLS_HANDSHAKE_TIMEOUT_S,
            )
        except (OSError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "verify_message", None) or exc
            log.warning(
                "TLS handshake failed",
                extra={
                    "peer": str(peer),
                    "listener": self.security.name,
                    "reason": str(reason) or type(exc).__name__,
                },
            )
            raw.abort()
            return
        except asyncio.CancelledError:
            raw.abort()
            return
        if tls is None:  # the connection closed during the handshake
            raw.abort()
            return
        connection.transport = tls
        await self._serve(connection)

    async def _serve(self, connection: _RequestFrames) -> None:
        transport = connection.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        host = _host(peer)  # what ACLs match: once per connection, not per request
        session = Session(self.security)
        try:
            tls = transport.get_extra_info("ssl_object")
            if tls is not None:
                try:
                    session.tls_peer(tls.getpeercert(binary_form=True))
                except NoMatchingRuleError as exc:
                    raise CloseConnectionError(str(exc)) from exc
            while (frame := await connection.next_frame()) is not None:
                chunks: list[bytes | FileRegion] | None
                if session.raw_tokens:
                    chunks = self._raw_token(frame, session)
                else:
                    chunks = await self._respond(frame, peer, host, session)
                muted_for = session.throttle_ms
                session.throttle_ms = 0
                if session.failed is not None:
                    # Kafka delays a failed login's answer, then closes the connection:
                    # a password guesser gets a few tries a second, not thousands.
                    await asyncio.sleep(self.security.failed_delay_ms / 1000)
                    if chunks:
                        await _write_chunks(transport, chunks)
                    log.warning(
                        "authentication failed",
                        extra={"peer": str(peer), "reason": session.failed},
                    )
                    break
                if chunks:
                    await _write_chunks(transport, chunks)
                await connection.drain()
                if muted_for:
                    # Over its quota: answered at once, then not read from until the
                    # throttle time has passed (Kafka mutes the channel; KIP-219).
                    await asyncio.sleep(muted_for / 1000)
            error = connection.receiver.error
            if error is not None:
                log.warning(
                    "closing connection: oversized request",
                    extra={"peer": str(peer), "error": str(error)},
                )
            elif connection.receiver.buffered:
                log.warning(
                    "client closed the connection in the middle of a request",
                    extra={"peer": str(peer), "bytes": connection.receiver.buffered},
                )
        except CloseConnectionError as exc:
            log.warning("closing connection", extra={"peer": str(peer), "reason": str(exc)})
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            # Only stop() cancels a connection; finishing normally spares asyncio a
            # traceback about the cancelled task.
            pass
        except Exception:
            log.exception("connection failed", extra={"peer": str(peer)})
        finally:
            transport.close()

    def _gate(self, frame: memoryview, session: Session) -> None:
        """The one authentication check, made on the header before a body is decoded:
        before login only the APIs of a login pass, in frames no bigger than Kafka's
        sasl.server.max.receive.size; after its session expired (KIP-368), only those
        of a re-authentication."""
        if not session.authenticated and len(frame) > self.security.max_receive_before_login:
            raise CloseConnectionError(
                f"a {len(frame)}-byte frame before authentication "
                f"(sasl.server.max.receive.size={self.security.max_receive_before_login})"
            )
        try:
            header, _ = decode_header(frame)
        except MalformedRequestError as exc:
            raise CloseConnectionError(f"malformed request before authentication: {exc}") from exc
        if not session.admits(header.api_key):
            reason = "its session expired" if session.authenticated else "it authenticated"
            raise CloseConnectionError(
                f"api key {header.api_key} from {session.principal} before {reason} "
                f"(listener {self.security.name})"
            )

    @staticmethod
    def _raw_token(frame: memoryview, session: Session) -> list[bytes | FileRegion]:
        """After a v0 SaslHandshake the client sends bare SASL tokens, each answered with
        a bare size-prefixed token; a failure closes the connection without an answer."""
        try:
            answer = session.authenticate(bytes(frame))
        except KafkaError:
            return []
        return [struct.pack(">i", len(answer)) + answer]

    async def _respond(
        self, frame: memoryview, peer: Any, host: str, session: Session
    ) -> list[bytes | FileRegion] | None:
        if not session.authenticated or session.expires_at is not None:
            self._gate(frame, session)
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
        handler = HANDLERS[spec.key]
        self.requests_served += 1
        started = time.perf_counter()
        access = self.broker.authorization.access(
            spec.key, request, header.api_version, session.principal_name, host
        )
        context = RequestContext(
            header, session.principal, host, session, access, self.security.name
        )
        refuse = access.rule.refuse
        if refuse is not None and access.authorizer is not None:
            # The one seam: a request its principal may not make at all is answered here,
            # with the API's top-level error, and reaches no handler.
            code = refuse(access, request)
            if code:
                refusal = spec.response(version=header.api_version, error_code=code)
                self.broker.metrics.request_answered(header.api_key, time.perf_counter() - started)
                return [encode_response(header, spec, refusal)]
        counted = self.broker.quotas.enabled and spec.key not in LOGIN_APIS
        handling = time.perf_counter()
        result = handler(self.broker, context, request)
        # Seconds the handler ran on the loop, its waits left out (request_percentage).
        running = time.perf_counter() - handling
        if inspect.isawaitable(result):
            if counted:
                timer = _RunningTime(result)
                result = await timer
                running = timer.seconds
            else:
                result = await result
        self.broker.metrics.request_answered(header.api_key, time.perf_counter() - started)
        if counted:
            result = self._throttle(frame, header, request, session, result, running)
        if result is None:
            return None
        if isinstance(result, list):  # pre-encoded body chunks (Fetch)
            return self._frame_chunks(header, spec.flexible(header.api_version), result)
        return [encode_response(header, spec, result)]

    def _throttle(
        self,
        frame: memoryview,
        header: RequestHeader,
        request: Any,
        session: Session,
        result: Any,
        running: float,
    ) -> Any:
        """Count the request against its client's quotas (server/quotas.py); over one,
        the response says how long to wait and the connection is muted that long.
        Followers are never throttled: replication is not a client."""
        quotas = self.broker.quotas
        user, client = session.principal.name, header.client_id or ""
        key, version = header.api_key, header.api_version
        if key == ApiKey.FETCH and fetch_replica_id(request, version) >= 0:
            return result
        throttle = 0
        if key == ApiKey.PRODUCE:
            throttle = quotas.record(PRODUCE_RATE, user, client, len(frame))
        elif key == ApiKey.FETCH and isinstance(result, list):
            throttle = quotas.record(FETCH_RATE, user, client, sum(len(c) for c in result))
        # Kafka's request_percentage counts the time a request keeps a thread busy, not
        # the time it waits: a long-polling fetch or a JoinGroup parked for a rebalance
        # costs what its handler ran, not its max_wait_ms.
        throttle = max(throttle, quotas.record(REQUEST_SHARE, user, client, running * 100))
        if not throttle:
            return result
        session.throttle_ms = throttle
        self.broker.metrics.throttled(key, throttle)
        if key == ApiKey.FETCH and isinstance(result, list):
            # The records go out with the throttle time, and the connection is muted:
            # Kafka answers such a fetch empty instead, which costs the consumer a round
            # trip per response and held librdkafka ~10% under its quota here.
            return set_fetch_throttle(result, version, throttle)
        if result is not None and hasattr(result, "throttle_time_ms"):
            result.throttle_time_ms = throttle
        return result

    @staticmethod
    def _frame_chunks(
        header: RequestHeader, flexible: bool, chunks: list[bytes | FileRegion]
    ) -> list[bytes | FileRegion]:
        size = 4 + (1 if flexible else 0) + sum(len(c) for c in chunks)
        prefix = _PREFIX.pack(size, header.correlation_id) + (b"\x00" if flexible else b"")
        return [prefix, *chunks]


class _RunningTime:
    """Awaits a handler's coroutine step by step and adds up the time its steps run,
    leaving out the time it is suspended (waiting for data, acks or a rebalance)."""

    def __init__(self, awaitable: Any) -> None:
        self.coroutine = awaitable.__await__()
        self.seconds = 0.0

    def __await__(self) -> Any:
        coroutine, sent, thrown = self.coroutine, None, None
        while True:
            began = time.perf_counter()
            try:
                yielded = coroutine.throw(thrown) if thrown is not None else coroutine.send(sent)
            except StopIteration as done:
                self.seconds += time.perf_counter() - began
                return done.value
            self.seconds += time.perf_counter() - began
            sent, thrown = None, None
            try:
                sent = yield yielded
            except BaseException as exc:  # a cancel, passed on to the handler
                thrown = exc


_LARGE_CHUNK = 64 * 1024


async def _write_chunks(
    transport: asyncio.WriteTransport, chunks: list[bytes | FileRegion]
) -> None:
    """Small chunks are joined into one write; large record sets are handed to the
    transport as they are (Python 3.11's writelines would copy them into a join), and
    file regions go out by sendfile."""
    pending: list[bytes] = []
    for chunk in chunks:
        if isinstance(chunk, bytes) and len(chunk) < _LARGE_CHUNK:
            pending.append(chunk)
            continue
        if pending:
            transport.write(b"".join(pending))
            pending.clear()
        if isinstance(chunk, FileRegion):
            await _send_region(transport, chunk)
        else:
            transport.write(chunk)
    if pending:
        transport.write(b"".join(pending) if len(pending) > 1 else pending[0])


async def _send_region(transport: asyncio.WriteTransport, region: FileRegion) -> None:
    if transport.get_extra_info("sslcontext") is not None:
        # TLS encrypts in user space: the bytes must pass through memory. One pread into
        # one buffer, handed to the TLS transport as it is (kernel TLS, which would let
        # sendfile through, needs Python 3.12's ssl.OP_ENABLE_KTLS).
        data = region.read()
        transport.write(data)
        sent = len(data)
    else:
        sent = _send_region_now(transport, region)
    if sent < region.length:
        loop = asyncio.get_running_loop()
        try:
            # A file object is asked for; sendfile uses only its fileno() and seek().
            file = cast(IO[bytes], region)
            sent += await loop.sendfile(
                transport, file, region.position + sent, region.length - sent, fallback=False
            )
        except asyncio.SendfileNotAvailableError:  # no plain socket: through memory
            data = region.read()[sent:]
            sent += len(data)
            transport.write(data)
    if sent != region.length:
        # The frame's size was promised before sending; a segment truncated meanwhile
        # (a follower's truncation, deleted records) leaves no way to keep it.
        raise CloseConnectionError(
            f"segment shrank under a fetch: sent {sent} of {region.length} bytes"
        )


def _send_region_now(transport: asyncio.WriteTransport, region: FileRegion) -> int:
    """As much of ``region`` as the socket takes right now, with one ``sendfile`` call;
    0 if anything is queued before it (the bytes must stay in order). ``loop.sendfile``
    sends the rest. Never for a TLS transport: its socket carries ciphertext.

    asyncio's own sendfile costs a consumer's fetch more than the copy does: it waits
    for the transport's buffer, pauses reading, adds and removes a writer and resumes
    reading, a few event-loop turns per response, even when the socket has room."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_write_buffer_size() or transport.is_closing():
        return 0
    try:
        return os.sendfile(sock.fileno(), region.fd, region.position, region.length)
    except (BlockingIOError, InterruptedError):
        return 0


class _RequestFrames(asyncio.BufferedProtocol):
    """One client connection: request frames received in place (``FrameReceiver``), queued
    for the connection's serving task, which answers them in order.

    Reading pauses while ``_MAX_QUEUED_FRAMES`` wait, and stops at a bad size prefix
    (the frames before it are still answered). ``drain`` is the write flow control."""

    def __init__(self, server: BrokerServer) -> None:
        self.server = server
        self.receiver = FrameReceiver(server.max_frame_bytes)
        self.transport: asyncio.Transport | None = None
        self._frames: deque[memoryview] = deque()
        self._queued_bytes = 0
        self._arrived: asyncio.Future[None] | None = None
        self._ended = False  # EOF, a lost connection or a bad size prefix: no more frames
        self._reading_paused = False
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server._accept(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.receiver.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        for frame in self.receiver.received(nbytes):
            self._frames.append(frame)
            self._queued_bytes += len(frame)
        if self.receiver.error is not None:
            self._end()
            return
        if len(self._frames) >= _MAX_QUEUED_FRAMES or self._queued_bytes >= _MAX_QUEUED_BYTES:
            self._pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        # Keep the transport open: requests already received are still answered (a
        # client may half-close after its last request); the serving task closes it.
        # TLS has no half-close: its transport closes whatever is answered.
        self._end()
        return self.transport is None or self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._frames.clear()
        self._queued_bytes = 0
        self._wake()
        self.resume_writing()

    async def next_frame(self) -> memoryview | None:
        """The next request, or None once the connection has no more."""
        while not self._frames:
            if self._ended:
                return None
            self._arrived = asyncio.get_running_loop().create_future()
            await self._arrived
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if (
            self._reading_paused
            and not self._ended
            and len(self._frames) < _MAX_QUEUED_FRAMES // 2
            and self._queued_bytes < _MAX_QUEUED_BYTES // 2
        ):
            self._reading_paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()
        return frame

    @property
    def queued(self) -> int:
        """Requests received and not yet taken by ``next_frame``."""
        return len(self._frames)

    def _end(self) -> None:
        self._ended = True
        self._pause_reading()
        self._wake()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _wake(self) -> None:
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the connection was closed")
        if self._writing_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
            if self.transport.is_closing():
                raise ConnectionResetError("the connection was closed")


def _host(peer: Any) -> str:
    """The client's address from a socket's peername (a tuple for TCP), written as
    Java's getHostAddress writes it, so that an ACL's host copied from Kafka matches:
    an IPv6 address in full, without leading zeros (``0:0:0:0:0:0:0:1``)."""
    if not isinstance(peer, tuple) or not peer:
        return ""
    host = str(peer[0])
    if ":" in host:
        try:
            full = ipaddress.IPv6Address(host.partition("%")[0]).exploded
        except ValueError:
            return host
        return ":".join(f"{int(group, 16):x}" for group in full.split(":"))
    return host
