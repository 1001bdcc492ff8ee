"""Kafka's ``meta.properties``: which node and which cluster a data directory belongs to.

Written the first time a directory is used and checked at every start after it, so that
a broker never serves another node's logs, nor carries one cluster's logs into another
(an etcd that was wiped or swapped, a wrong ``--metadata``): Kafka refuses both at start-up
(``InconsistentClusterIdException`` for the second), and so does partita.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from partita.errors import InconsistentClusterIdError, KafkaStorageError
from partita.storage.checkpoint import write_atomically

META_PROPERTIES = "meta.properties"


def read_meta_properties(data_dir: Path) -> dict[str, str]:
    """The file's ``key=value`` pairs; empty when the directory was never used."""
    path = data_dir / META_PROPERTIES
    props: dict[str, str] = {}
    if not path.exists():
        return props
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KafkaStorageError(f"cannot read {path}: {exc}") from exc
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            props[key.strip()] = value.strip()
    return props


def claim_data_dir(
    data_dir: Path, node_id: int, cluster_id: str | None = None, *, cluster_source: str = ""
) -> str:
    """The id of the cluster ``data_dir`` belongs to, recording ``node_id`` and the cluster
    id the first time (a new random one when ``cluster_id`` is None: a broker alone).

    Refused when the directory belongs to another node, or to a cluster other than
    ``cluster_id`` (the one the metadata store at ``cluster_source`` holds)."""
    path = data_dir / META_PROPERTIES
    props = read_meta_properties(data_dir)
    stored_node = props.get("node.id")
    if stored_node is not None and stored_node != str(node_id):
        raise KafkaStorageError(f"{path} belongs to node {stored_node}, not node {node_id}")
    stored_cluster = props.get("cluster.id")
    if stored_cluster is not None:
        if cluster_id is not None and stored_cluster != cluster_id:
            raise InconsistentClusterIdError(
                f"{data_dir} belongs to cluster {stored_cluster} ({path}), but the metadata "
                f"store{f' at {cluster_source}' if cluster_source else ''} is cluster "
                f"{cluster_id}: this broker is trying to join the wrong cluster. Check "
                "--metadata, or give the broker a data directory of its own."
            )
        return stored_cluster
    chosen = cluster_id or uuid.uuid4().hex[:22]
    props = {"version": "1", "node.id": str(node_id), "cluster.id": chosen}
    data_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(path, "".join(f"{k}={v}\n" for k, v in props.items()))
    return chosen
