"""The KV protocol over a real etcd v3 cluster (Debian's etcd-server), through etcd3aio.

Every call has a deadline, so a broker cut off from etcd learns it in seconds instead of
waiting on gRPC's reconnects. Transactions are sent once, never retried by the client
library: a retried compare-and-swap whose first attempt did land would fail its compare
and report the opposite of what happened; callers re-read and decide instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# gRPC's C core writes its own errors (a refused TLS handshake, "Corruption detected")
# straight to stderr; the broker says what failed itself, in one line. Before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

import grpc
from etcd3aio import Etcd3Client, EtcdError
from etcd3aio._protobuf import Compare as EtcdCompare
from etcd3aio.connections import ConnectionManager
from etcd3aio.kv import KVService, prefix_range_end
from etcd3aio.maintenance import MaintenanceService

from partita.cluster.kv import (
    Compare,
    Entry,
    Event,
    Op,
    Put,
    StoreUnavailableError,
    WatchCompactedError,
)

log = logging.getLogger(__name__)

RPC_TIMEOUT_SECONDS = 3.0
MEMBER_STATUS_TIMEOUT_SECONDS = 0.5


def parse_endpoints(url: str) -> tuple[list[str], str]:
    """``etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`` -> (endpoints, prefix)."""
    rest = url.removeprefix("etcd://")
    hosts, _, prefix = rest.partition("/")
    endpoints = [h.strip() for h in hosts.split(",") if h.strip()]
    if not endpoints:
        raise ValueError(f"no etcd endpoint in {url!r}: expected etcd://HOST:PORT[/PREFIX]")
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {endpoint!r} is not HOST:PORT")
    return endpoints, prefix.strip("/") or "partita"


def _entry(kv: Any) -> Entry:
    return Entry(
        kv.key.decode("utf-8", "replace"),
        bytes(kv.value),
        int(kv.create_revision),
        int(kv.mod_revision),
        int(kv.lease),
    )


@dataclass(frozen=True, slots=True)
class EtcdSecurity:
    """How a broker reaches a secured etcd: TLS (the CA that signed etcd's certificate;
    a client certificate and key when etcd runs with --client-cert-auth), and etcd's own
    authentication (a user and password: the broker logs in for a token at connect, and
    again whenever etcd says the token is no longer valid, e.g. after etcd restarted)."""

    ca: bytes | None = None
    certificate: bytes | None = None
    key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None  # the name etcd's certificate carries, if not the host
    username: str | None = None
    password: str | None = field(default=None, repr=False)


# Keys per range request: ~250 B each for a partition, far below gRPC's 4 MiB answer.
RANGE_PAGE_KEYS = 2000


class EtcdKV:
    # etcd refuses transactions of more than 128 operations by default (--max-txn-ops).
    max_txn_ops = 100

    def __init__(self, endpoints: Sequence[str], security: EtcdSecurity | None = None) -> None:
        self.endpoints = list(endpoints)
        self.security = security or EtcdSecurity()
        if self.security.ca is not None:
            self._client = Etcd3Client(
                self.endpoints,
                rpc_max_attempts=2,
                tls_server_name=self.security.server_name,
                ca_cert=self.security.ca,
                cert_key=self.security.key,
                cert_chain=self.security.certificate,
            )
        else:
            self._client = Etcd3Client(self.endpoints, rpc_max_attempts=2)
        self._connected = False
        self._logging_in: asyncio.Task[None] | None = None
        # One channel per member, for asking each its own view (the client's channel
        # spreads calls over the members and cannot pick one).
        self._member_channels: dict[str, grpc.aio.Channel] = {}

    async def connect(self) -> None:
        await self._client.connect()
        self._connected = True
        try:
            if self.security.username:
                await self._log_in()
            # Status, not etcd3aio's ping (a read of a key of its own, which etcd's
            # authentication refuses to a user allowed only the cluster's prefix).
            assert self._client.maintenance is not None
            await self._client.maintenance.status(timeout=RPC_TIMEOUT_SECONDS)
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise StoreUnavailableError(
                f"etcd at {','.join(self.endpoints)} does not answer: {exc}"
            ) from exc

    async def _log_in(self) -> None:
        assert self._client.auth is not None
        answer = await self._client.auth.authenticate(
            self.security.username or "", self.security.password or "", timeout=RPC_TIMEOUT_SECONDS
        )
        self._client.set_token(answer.token)

    def _failed(self, what: str, exc: BaseException) -> StoreUnavailableError:
        """The error to raise for a failed call; an expired or unknown auth token makes
        the broker log in again in the background, so that the caller's retry works."""
        expired = self.security.username and "token" in str(exc).lower()
        if expired and (self._logging_in is None or self._logging_in.done()):
            self._logging_in = asyncio.get_running_loop().create_task(self._relog_in())
        return StoreUnavailableError(f"{what}: {exc}")

    async def _relog_in(self) -> None:
        try:
            await self._log_in()
            log.info("logged in to etcd again", extra={"user": self.security.username})
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            log.warning("etcd login failed", extra={"error": str(exc)})

    @property
    def _kv(self) -> KVService:
        assert self._client.kv is not None, "connect() first"
        return self._client.kv

    async def get(self, key: str) -> Entry | None:
        try:
            response = await self._kv.get(key, timeout=RPC_TIMEOUT_SECONDS)
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise self._failed(f"etcd get {key}", exc) from exc
        return _entry(response.kvs[0]) if response.kvs else None

    async def range(self, prefix: str) -> tuple[list[Entry], int]:
        """Every key under ``prefix``, in pages of ``RANGE_PAGE_KEYS`` all read at the
        revision of the first: one answer for a cluster of 30,000 partitions is over
        gRPC's 4 MiB message limit, and a broker restarting then could not start."""
        end = prefix_range_end(prefix)
        start: bytes | str = prefix
        revision = 0
        entries: list[Entry] = []
        while True:
            try:
                response = await self._kv.get(
                    start, end, revision=revision, limit=RANGE_PAGE_KEYS,
                    timeout=RPC_TIMEOUT_SECONDS,
                )  # fmt: skip
            except (EtcdError, grpc.aio.AioRpcError) as exc:
                raise self._failed(f"etcd range {prefix}", exc) from exc
            revision = revision or int(response.header.revision)
            entries.extend(_entry(kv) for kv in response.kvs)
            if not response.more or not response.kvs:
                return entries, revision
            start = bytes(response.kvs[-1].key) + b"\0"  # the next key after the last

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> tuple[bool, int]:
        conditions = [
            KVService.txn_compare_create_revision(c.key, c.revision)
            if c.target == "create"
            else _compare_mod(c.key, c.revision)
            for c in compares
        ]
        requests = [
            KVService.txn_op_put(op.key, op.value, lease=op.lease)
            if isinstance(op, Put)
            else KVService.txn_op_delete(
                op.key, range_end=prefix_range_end(op.key) if op.prefix else None
            )
            for op in ops
        ]
        try:
            response = await self._kv.txn(
                conditions, requests, timeout=RPC_TIMEOUT_SECONDS, max_attempts=1
            )
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise self._failed("etcd transaction", exc) from exc
        return bool(response.succeeded), int(response.header.revision)

    async def grant(self, ttl_seconds: int) -> int:
        assert self._client.lease is not None
        try:
            response = await self._client.lease.grant(ttl_seconds, timeout=RPC_TIMEOUT_SECONDS)
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise self._failed("etcd lease grant", exc) from exc
        return int(response.ID)

    async def keepalive(self, lease: int) -> int:
        """One renewal on a short-lived stream. etcd3aio's own keepalive loop only logs
        failures; the broker needs to know each renewal's outcome to fence itself."""
        assert self._client.lease is not None
        stream = self._client.lease.keep_alive(lease)
        try:
            async for response in stream:
                return max(0, int(response.TTL))
            return 0
        except grpc.aio.AioRpcError as exc:
            raise self._failed(f"etcd lease keepalive ({exc.code().name})", exc) from exc
        finally:
            stream.cancel()

    async def quorum_lost(self) -> bool:
        views = await asyncio.gather(*(self._has_leader(e) for e in self.endpoints))
        answered = [v for v in views if v is not None]
        return bool(answered) and not any(answered)

    async def _has_leader(self, endpoint: str) -> bool | None:
        """The member's own answer (Maintenance.Status is served locally, without the
        leader): whether it has a leader; None if it does not answer."""
        channel = self._member_channels.get(endpoint)
        if channel is None:
            manager = ConnectionManager([endpoint])
            if self.security.ca is not None:
                channel = manager.get_channel(
                    ca_cert=self.security.ca,
                    cert_key=self.security.key,
                    cert_chain=self.security.certificate,
                    tls_server_name=self.security.server_name,
                )
            else:
                channel = manager.get_channel()
            self._member_channels[endpoint] = channel
        try:
            status = await MaintenanceService(channel, max_attempts=1).status(
                timeout=MEMBER_STATUS_TIMEOUT_SECONDS
            )
        except (EtcdError, grpc.aio.AioRpcError, OSError):
            return None
        return int(status.leader) != 0

    async def revoke(self, lease: int) -> None:
        assert self._client.lease is not None
        try:
            await self._client.lease.revoke(lease, timeout=RPC_TIMEOUT_SECONDS, max_attempts=1)
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise self._failed("etcd lease revoke", exc) from exc

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[Event]]:
        assert self._client.watch is not None
        stream = self._client.watch.watch(
            prefix, prefix_range_end(prefix), start_revision=start_revision
        )
        try:
            async for response in stream:
                if response.compact_revision > 0 or response.canceled:
                    # After a compaction etcd3aio's stream yields this once and then
                    # hangs: the caller lists again and starts a new watch.
                    raise WatchCompactedError(
                        f"watch from revision {start_revision} cancelled "
                        f"(compacted at {response.compact_revision})"
                    )
                events = [
                    Event(
                        "put" if ev.type == 0 else "delete",
                        _entry(ev.kv)
                        if ev.type == 0
                        else Entry(
                            ev.kv.key.decode("utf-8", "replace"), b"", 0, ev.kv.mod_revision
                        ),
                    )
                    for ev in response.events
                ]
                if events:
                    yield events
        except (EtcdError, grpc.aio.AioRpcError) as exc:
            raise self._failed("etcd watch", exc) from exc
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    def for_another_thread(self) -> EtcdKV:
        return EtcdKV(self.endpoints, self.security)

    async def close(self) -> None:
        for channel in self._member_channels.values():
            await channel.close()
        self._member_channels.clear()
        if self._connected:
            await self._client.close()
            self._connected = False


def _compare_mod(key: str, mod_revision: int) -> Any:
    # etcd3aio builds compares on value, version and create revision, not on mod revision.
    return EtcdCompare(
        result=EtcdCompare.EQUAL,
        target=EtcdCompare.MOD,
        key=key.encode(),
        mod_revision=mod_revision,
    )
