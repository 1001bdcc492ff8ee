"""The few things partita asks of a consensus store, as etcd v3 offers them.

Keys carry two revisions: ``create_revision`` (when the key was made; a broker's epoch,
the controller's fencing token) and ``mod_revision`` (its last write; what a
compare-and-swap compares). Leases expire keys bound to them when their holder stops
renewing. A watch streams every change after a revision, so a local image built by one
range read at revision R and a watch from R + 1 misses nothing.

Three implementations: ``etcd_kv.EtcdKV`` (a cluster's), ``file_kv.FileKV`` (a broker
alone: the same semantics in its own process, kept in a file) and ``memory_kv.MemoryKV``
(one process, for unit tests of the controller and the image).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol


class StoreUnavailableError(Exception):
    """The store could not be reached or did not answer in time."""


class WatchCompactedError(Exception):
    """The revision a watch asked for was compacted away: list again, then watch."""


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Event:
    kind: Literal["put", "delete"]
    entry: Entry  # for a delete: the key, an empty value and the deleting revision


@dataclass(frozen=True, slots=True)
class Compare:
    """One condition of a transaction, on a key's create or mod revision."""

    key: str
    target: Literal["create", "mod"]
    revision: int

    @classmethod
    def absent(cls, key: str) -> Compare:
        return cls(key, "create", 0)

    @classmethod
    def created_at(cls, key: str, revision: int) -> Compare:
        return cls(key, "create", revision)

    @classmethod
    def unchanged_since(cls, key: str, mod_revision: int) -> Compare:
        return cls(key, "mod", mod_revision)


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    prefix: bool = False  # delete every key that starts with ``key``


Op = Put | Delete


class KV(Protocol):
    # Operations one transaction may hold: larger writes are split by the caller.
    max_txn_ops: int

    async def connect(self) -> None:
        """Reach the store (or load it); raises StoreUnavailableError."""
        ...

    async def get(self, key: str) -> Entry | None: ...

    async def range(self, prefix: str) -> tuple[list[Entry], int]:
        """Every key under ``prefix`` and the store's revision at that read."""
        ...

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> tuple[bool, int]:
        """Apply ``ops`` atomically if every compare holds; (succeeded, revision)."""
        ...

    async def grant(self, ttl_seconds: int) -> int: ...

    async def keepalive(self, lease: int) -> int:
        """Renew a lease; its remaining TTL in seconds, 0 when it has expired."""
        ...

    async def revoke(self, lease: int) -> None: ...

    async def quorum_lost(self) -> bool:
        """Whether the store has lost its quorum, as its members answer it: at least one
        answers and none has a leader, so that the store can decide nothing (no write
        commits, no lease expires) until it has one again. False when no member answers
        (this broker may be cut off from a store that works) or one has a leader."""
        ...

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[Event]]:
        """Changes under ``prefix`` from ``start_revision`` on, in revision order, one
        list per store response. Raises WatchCompactedError when that history is gone."""
        ...

    async def close(self) -> None: ...

    def for_another_thread(self) -> KV | None:
        """A new, unconnected client of the same store, for another thread's event loop
        (the lease renewals'); None when the store lives in this process (memory, file),
        where another thread could not reach it and a lease cannot lapse from load."""
        ...
