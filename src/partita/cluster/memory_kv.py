"""An in-process KV with etcd's revision, lease and watch semantics, for unit tests of
the controller and the metadata image (integration tests use a real etcd)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from functools import partial

from partita.cluster.kv import (
    Compare,
    Delete,
    Entry,
    Event,
    Op,
    Put,
    WatchCompactedError,
)


class MemoryKV:
    max_txn_ops = 100  # etcd's, so that unit tests split big writes as a cluster does

    def __init__(self) -> None:
        self.revision = 1
        self.entries: dict[str, Entry] = {}
        self.history: list[tuple[int, Event]] = []
        self.leases: dict[int, int] = {}  # lease id -> ttl
        self.compacted = 0
        self._next_lease = 1000
        self._changed = asyncio.Condition()
        # A test's etcd without a quorum: quorum_lost() says so (the writes still work).
        self.leaderless = False

    async def connect(self) -> None:
        return None

    async def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    async def range(self, prefix: str) -> tuple[list[Entry], int]:
        found = [e for k, e in sorted(self.entries.items()) if k.startswith(prefix)]
        return found, self.revision

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> tuple[bool, int]:
        if not all(self._holds(c) for c in compares):
            return False, self.revision
        if ops:
            self.revision += 1
            events = []
            for op in ops:
                events.extend(self._apply(op))
            self._committed(events)
            await self._publish(events)
        return True, self.revision

    def _committed(self, events: list[Event]) -> None:
        """A transaction was applied, before anyone is told: where a durable store
        (``file_kv``) writes it down."""
        return None

    def _holds(self, compare: Compare) -> bool:
        entry = self.entries.get(compare.key)
        if compare.target == "create":
            return (entry.create_revision if entry else 0) == compare.revision
        return (entry.mod_revision if entry else 0) == compare.revision

    def _apply(self, op: Op) -> list[Event]:
        if isinstance(op, Put):
            old = self.entries.get(op.key)
            created = old.create_revision if old else self.revision
            entry = Entry(op.key, op.value, created, self.revision, op.lease)
            self.entries[op.key] = entry
            return [Event("put", entry)]
        doomed = (
            [k for k in self.entries if k.startswith(op.key)]
            if op.prefix
            else [op.key]
            if op.key in self.entries
            else []
        )
        events = []
        for key in sorted(doomed):
            del self.entries[key]
            events.append(Event("delete", Entry(key, b"", 0, self.revision)))
        return events

    async def _publish(self, events: list[Event]) -> None:
        for event in events:
            self.history.append((self.revision, event))
        async with self._changed:
            self._changed.notify_all()

    async def grant(self, ttl_seconds: int) -> int:
        self._next_lease += 1
        self.leases[self._next_lease] = ttl_seconds
        return self._next_lease

    async def keepalive(self, lease: int) -> int:
        return self.leases.get(lease, 0)

    async def revoke(self, lease: int) -> None:
        await self.expire(lease)

    async def expire(self, lease: int) -> None:
        """What etcd does when a lease's TTL runs out: its keys go, in one revision."""
        self.leases.pop(lease, None)
        doomed = [Delete(k) for k, e in self.entries.items() if e.lease == lease]
        if doomed:
            await self.txn([], doomed)

    def compact(self, revision: int) -> None:
        self.compacted = revision
        self.history = [(r, e) for r, e in self.history if r > revision]

    async def watch(self, prefix: str, start_revision: int) -> AsyncIterator[list[Event]]:
        next_revision = start_revision
        while True:
            if next_revision <= self.compacted:
                raise WatchCompactedError(f"revision {next_revision} was compacted")
            batch = [
                e for r, e in self.history if r >= next_revision and e.entry.key.startswith(prefix)
            ]
            next_revision = self.revision + 1
            if batch:
                yield batch
                continue
            async with self._changed:
                await self._changed.wait_for(partial(self._reached, next_revision))

    def _reached(self, revision: int) -> bool:
        return self.revision >= revision

    async def quorum_lost(self) -> bool:
        return self.leaderless

    async def close(self) -> None:
        return None

    def for_another_thread(self) -> None:
        return None
