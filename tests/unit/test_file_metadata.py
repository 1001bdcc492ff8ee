"""The metadata of a broker alone: the cluster store over a file-backed KV (``file_kv``)
and the adoption of what an older partita kept (``legacy_metadata``).

- What a transaction writes is in the file before anyone hears of it, and a new process
  finds it; keys on a lease (registration, controller) are not kept, as etcd would have
  expired them.
- A watcher that fell behind the bounded history lists again.
- An older directory's cluster id, topics, partitions and producer-id block become the
  store's, through the image's checking decoder; a malformed value is skipped, not fatal.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from partita.cluster import file_kv
from partita.cluster.cluster_store import ClusterMetadataStore
from partita.cluster.file_kv import FileKV
from partita.cluster.kv import Compare, Put, WatchCompactedError
from partita.cluster.layout import Layout
from partita.cluster.legacy_metadata import LEGACY_FILE, adopt_legacy_metadata
from partita.cluster.model import PartitionState, TopicState
from partita.errors import KafkaStorageError


def test_writes_survive_a_new_process_and_leased_keys_do_not(tmp_path: Path) -> None:
    path = tmp_path / "kv.json"

    async def first() -> None:
        kv = FileKV(path)
        await kv.connect()
        lease = await kv.grant(3)
        ok, revision = await kv.txn(
            [Compare.absent("/a")], [Put("/a", b'{"x":1}'), Put("/live", b"me", lease)]
        )
        assert ok and revision == 2
        assert json.loads(path.read_text())["revision"] == 2  # on disk before it returned
        await kv.txn([], [Put("/bin", b"\xff\x00")])

    async def second() -> None:
        kv = FileKV(path)
        await kv.connect()
        a = await kv.get("/a")
        assert a is not None and a.value == b'{"x":1}' and a.create_revision == 2
        assert await kv.get("/live") is None
        binary = await kv.get("/bin")
        assert binary is not None and binary.value == b"\xff\x00"
        ok, revision = await kv.txn([Compare.unchanged_since("/a", 2)], [Put("/a", b"2")])
        assert ok and revision == 4  # revisions go on from the file's

    asyncio.run(first())
    asyncio.run(second())


def test_a_damaged_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kv.json"
    path.write_text('{"revision": 3, "entries": [{"key": "/a"}]}')
    with pytest.raises(KafkaStorageError, match="cannot read cluster metadata"):
        asyncio.run(FileKV(path).connect())


def test_a_watcher_behind_the_bounded_history_lists_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_kv, "HISTORY", 10)

    async def run() -> None:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        for i in range(30):
            await kv.txn([], [Put(f"/k{i}", b"v")])
        assert len(kv.history) <= 10
        with pytest.raises(WatchCompactedError):
            async for _ in kv.watch("/", 1):
                break
        async for events in kv.watch("/", kv.revision):  # a recent start is still there
            assert events[-1].entry.key == "/k29"
            break

    asyncio.run(run())


def _legacy(tmp_path: Path, topic_id: uuid.UUID, partitions: dict[str, object]) -> None:
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=0\ncluster.id=OLDCLUSTER\n")
    (tmp_path / LEGACY_FILE).write_text(
        json.dumps(
            {
                "producer_id_block_end": 5000,
                "topics": {
                    "orders": {
                        "topic_id": str(topic_id),
                        "partitions": partitions,
                        "configs": {"cleanup.policy": "compact"},
                    }
                },
            }
        )
    )


def test_an_older_directory_is_adopted_through_the_checking_decoder(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    good = {"replicas": [0], "leader": 0, "leader_epoch": 4, "isr": [0], "partition_epoch": 0}
    hostile = {"replicas": [0], "leader": 7, "leader_epoch": 1, "isr": [0]}  # leader not in ISR
    _legacy(tmp_path, topic_id, {"0": good, "1": hostile})

    async def run() -> ClusterMetadataStore:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        store = ClusterMetadataStore(kv, "partita", 0)
        assert await adopt_legacy_metadata(kv, Layout("partita"), tmp_path, 0)
        await store.start()
        assert await store.allocate_producer_id() == 5000  # ids below it were handed out
        await store.stop()
        return store

    store = asyncio.run(run())
    assert store.cluster_id == "OLDCLUSTER"
    assert store.topics == {
        "orders": TopicState(
            "orders", topic_id, {0: PartitionState([0], 0, 4, [0])}, {"cleanup.policy": "compact"}
        )
    }
    assert not (tmp_path / LEGACY_FILE).exists()
    assert (tmp_path / (LEGACY_FILE + ".adopted")).exists()


def test_a_directory_without_topics_keeps_its_cluster_id(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=0\ncluster.id=KEEPME\n")

    async def run() -> str:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        await adopt_legacy_metadata(kv, Layout("partita"), tmp_path, 0)
        store = ClusterMetadataStore(kv, "partita", 0)
        await store.start()
        await store.stop()
        return store.cluster_id

    assert asyncio.run(run()) == "KEEPME"


def test_an_older_file_beside_a_store_that_has_metadata_is_refused(tmp_path: Path) -> None:
    _legacy(tmp_path, uuid.uuid4(), {})

    async def run() -> None:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        await kv.txn([], [Put("/partita/cluster", b"NEW")])
        await adopt_legacy_metadata(kv, Layout("partita"), tmp_path, 0)

    with pytest.raises(KafkaStorageError, match="move one of them away"):
        asyncio.run(run())


def test_a_transaction_the_file_could_not_take_is_undone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> None:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        await kv.txn([], [Put("/a", b"1")])

        def full_disk(_path: Path, _text: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(file_kv, "write_atomically", full_disk)
        with pytest.raises(KafkaStorageError, match="No space left"):
            await kv.txn([], [Put("/a", b"2"), Put("/b", b"3")])
        a = await kv.get("/a")
        assert kv.revision == 2 and a is not None and a.value == b"1"
        assert await kv.get("/b") is None
        # Keys on a lease are not written down: a full disk does not stop a registration.
        lease = await kv.grant(3)
        ok, _ = await kv.txn([], [Put("/live", b"me", lease)])
        assert ok
        await kv.revoke(lease)

    asyncio.run(run())


def test_a_crash_between_the_adoption_and_the_rename_is_finished(tmp_path: Path) -> None:
    _legacy(tmp_path, uuid.uuid4(), {})

    async def run() -> None:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        assert await adopt_legacy_metadata(kv, Layout("partita"), tmp_path, 0)
        # As if the process died before its last rename:
        (tmp_path / (LEGACY_FILE + ".adopted")).rename(tmp_path / (LEGACY_FILE + ".adopting"))
        again = FileKV(tmp_path / "kv.json")
        await again.connect()
        assert not await adopt_legacy_metadata(again, Layout("partita"), tmp_path, 0)

    asyncio.run(run())
    assert (tmp_path / (LEGACY_FILE + ".adopted")).exists()
    assert not (tmp_path / (LEGACY_FILE + ".adopting")).exists()


def test_another_nodes_directory_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    _legacy(tmp_path, uuid.uuid4(), {})

    async def run() -> None:
        kv = FileKV(tmp_path / "kv.json")
        await kv.connect()
        await adopt_legacy_metadata(kv, Layout("partita"), tmp_path, 5)

    with pytest.raises(KafkaStorageError, match="belongs to node 0, not node 5"):
        asyncio.run(run())
    assert (tmp_path / LEGACY_FILE).exists() and not (tmp_path / "kv.json").exists()
