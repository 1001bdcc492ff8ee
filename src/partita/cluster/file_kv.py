"""The KV of a broker alone: etcd's semantics (revisions, compare-and-swap transactions,
leases, watches) in the broker's own process, kept durable in one file of its data
directory.

With it a single broker runs the same metadata store, image, decoder and controller as a
cluster on etcd (``cluster_store``), so one code path validates and applies every change.
Every transaction is written to the file (fsynced, replaced atomically) before anyone is
told of it, as etcd commits before it answers. Keys bound to a lease -- the broker's
registration, the controller -- are not written: they belong to the process, and a
restarted broker finds them gone, as etcd would have expired them.

The watch history is bounded: a watcher that falls more than ``HISTORY`` events behind is
told the history was compacted and lists again, as it would be by etcd.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from partita.cluster.kv import Compare, Entry, Event, Op
from partita.cluster.memory_kv import MemoryKV
from partita.errors import KafkaStorageError
from partita.storage.checkpoint import write_atomically

METADATA_KV_FILE = "partita-metadata-kv.json"
HISTORY = 10_000


class FileKV(MemoryKV):
    # One process, no quorum to protect: a topic's partitions go in one write (and one
    # fsync), not a hundred.
    max_txn_ops = 1_000_000_000

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._durable: set[str] = set()  # the keys the file holds

    async def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> tuple[bool, int]:
        """As MemoryKV's; a transaction the file could not take is undone, so that what
        the process sees is what the file holds (etcd's answer to a failed commit)."""
        revision, entries = self.revision, dict(self.entries)
        try:
            return await super().txn(compares, ops)
        except KafkaStorageError:
            self.revision, self.entries = revision, entries
            raise

    async def connect(self) -> None:
        """Load what the file holds (nothing, the first time)."""
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.revision = int(data["revision"])
            for item in data["entries"]:
                entry = Entry(
                    str(item["key"]),
                    _value_from_json(item),
                    int(item["create_revision"]),
                    int(item["mod_revision"]),
                )
                self.entries[entry.key] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise KafkaStorageError(f"cannot read cluster metadata {self.path}: {exc}") from exc
        self.compacted = self.revision  # no history before what the file holds
        self._durable = set(self.entries)

    def _committed(self, events: list[Event]) -> None:
        if not any(
            e.entry.key in self._durable or (e.kind == "put" and e.entry.lease == 0) for e in events
        ):
            return  # only keys on a lease (a registration, the controller): nothing to keep
        durable = [e for e in self.entries.values() if e.lease == 0]
        body = {
            "revision": self.revision,
            "entries": [_entry_to_json(e) for e in sorted(durable, key=lambda e: e.key)],
        }
        try:
            write_atomically(self.path, json.dumps(body, indent=1))
        except OSError as exc:
            raise KafkaStorageError(f"cannot write cluster metadata {self.path}: {exc}") from exc
        self._durable = {e.key for e in durable}

    async def _publish(self, events: list[Event]) -> None:
        await super()._publish(events)
        if len(self.history) > HISTORY:
            # Keep the newer half: a watcher behind it lists again.
            self.compact(self.history[-(HISTORY // 2)][0] - 1)


def _entry_to_json(entry: Entry) -> dict[str, Any]:
    item: dict[str, Any] = {
        "key": entry.key,
        "create_revision": entry.create_revision,
        "mod_revision": entry.mod_revision,
    }
    try:
        item["value"] = entry.value.decode("utf-8")  # readable: the layout writes JSON
    except UnicodeDecodeError:
        item["value_base64"] = base64.b64encode(entry.value).decode("ascii")
    return item


def _value_from_json(item: dict[str, Any]) -> bytes:
    if "value_base64" in item:
        return base64.b64decode(item["value_base64"], validate=True)
    return str(item["value"]).encode("utf-8")
