"""Adopting what a broker alone kept before it ran the cluster store: its directory's
cluster id (``meta.properties``) and its metadata, one JSON file
(``partita-metadata.json``).

On the first start over the file-backed KV (``file_kv``), the store takes the directory's
cluster id, and the old file's topics, partitions and producer-id block become the
layout's keys, so that the directory, its logs and its topic ids carry on as they were.
The values go in as the layout writes them and come out through the image's decoder,
which checks each one; the old file is kept, renamed, never deleted.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from partita.cluster.kv import KV, Compare, Op, Put
from partita.cluster.layout import Layout, TopicRecord, encode_producer_ids, encode_topic
from partita.errors import KafkaStorageError
from partita.storage.meta_properties import read_meta_properties

log = logging.getLogger(__name__)

LEGACY_FILE = "partita-metadata.json"
ADOPTING_SUFFIX = ".adopting"  # taken, not yet written into the store
ADOPTED_SUFFIX = ".adopted"


async def adopt_legacy_metadata(kv: KV, layout: Layout, data_dir: Path, node_id: int) -> bool:
    """Seed an empty store from ``data_dir``; True if it held anything to adopt.

    The old file is renamed ``.adopting`` before the store's one write and ``.adopted``
    after it, so a crash in between is finished at the next start, never adopted twice
    nor mistaken for a conflict."""
    entries, _revision = await kv.range(layout.root)
    legacy = data_dir / LEGACY_FILE
    adopting = legacy.with_name(LEGACY_FILE + ADOPTING_SUFFIX)
    adopted = legacy.with_name(LEGACY_FILE + ADOPTED_SUFFIX)
    if entries:
        if adopting.exists():
            adopting.rename(adopted)  # the store took it before a crash
        elif legacy.exists():
            raise KafkaStorageError(
                f"{legacy} is left from an older partita, but {data_dir} already holds "
                f"cluster metadata; move one of them away"
            )
        return False
    props = read_meta_properties(data_dir)
    stored_node = props.get("node.id")
    if stored_node is not None and stored_node != str(node_id):
        # Before anything is written: the right node must still find it as it was.
        raise KafkaStorageError(
            f"{data_dir / 'meta.properties'} belongs to node {stored_node}, not node {node_id}"
        )
    if legacy.exists():
        legacy.rename(adopting)
    ops: list[Op] = []
    cluster_id = props.get("cluster.id")
    if cluster_id:
        ops.append(Put(layout.cluster, cluster_id.encode()))
    topics = 0
    if adopting.exists():
        try:
            data = json.loads(adopting.read_text(encoding="utf-8"))
            ops += _legacy_ops(layout, data)
            topics = len(data["topics"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KafkaStorageError(f"cannot read cluster metadata {adopting}: {exc}") from exc
    if not ops:
        return False
    await kv.txn([Compare.absent(layout.cluster)], ops)
    if adopting.exists():
        adopting.rename(adopted)
        log.warning(
            "adopted the metadata of an older partita",
            extra={"file": str(legacy), "topics": topics},
        )
    return True


def _legacy_ops(layout: Layout, data: dict[str, object]) -> list[Op]:
    block_end = data.get("producer_id_block_end", 0)
    ops: list[Op] = [Put(layout.producer_ids, encode_producer_ids(int(str(block_end))))]
    topics = data["topics"]
    if not isinstance(topics, dict):
        raise TypeError("topics is not a JSON object")
    for name, topic in topics.items():
        partitions = {int(p): s for p, s in topic["partitions"].items()}
        record = TopicRecord(
            name, uuid.UUID(str(topic["topic_id"])), len(partitions), dict(topic.get("configs", {}))
        )
        ops.append(Put(layout.topic(name), encode_topic(record)))
        for index, state in sorted(partitions.items()):
            value = json.dumps(state, separators=(",", ":"), sort_keys=True).encode()
            ops.append(Put(layout.partition(record.topic_id, index), value))
    return ops
