"""meta.properties: a data directory is claimed once, by one node of one cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.errors import InconsistentClusterIdError, KafkaStorageError
from partita.storage.meta_properties import claim_data_dir, read_meta_properties


def test_a_cluster_member_records_the_clusters_id_and_keeps_to_it(tmp_path: Path) -> None:
    data = tmp_path / "broker-1"
    assert claim_data_dir(data, 1, "clusterA") == "clusterA"
    assert read_meta_properties(data) == {"version": "1", "node.id": "1", "cluster.id": "clusterA"}
    assert claim_data_dir(data, 1, "clusterA") == "clusterA"
    with pytest.raises(InconsistentClusterIdError, match="wrong cluster") as refused:
        claim_data_dir(data, 1, "clusterB", cluster_source="etcd://127.0.0.1:2379/p")
    assert (
        "clusterA" in refused.value.message and "etcd://127.0.0.1:2379/p" in refused.value.message
    )
    assert read_meta_properties(data)["cluster.id"] == "clusterA"  # untouched


def test_a_broker_alone_makes_up_an_id_once(tmp_path: Path) -> None:
    first = claim_data_dir(tmp_path, 3)
    assert len(first) == 22
    assert claim_data_dir(tmp_path, 3) == first


def test_another_nodes_directory_is_refused(tmp_path: Path) -> None:
    claim_data_dir(tmp_path, 1, "c")
    with pytest.raises(KafkaStorageError, match="belongs to node 1, not node 2"):
        claim_data_dir(tmp_path, 2, "c")


def test_comments_and_blank_lines_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("#written by Kafka\n\nnode.id=4\ncluster.id=k\n")
    assert claim_data_dir(tmp_path, 4, "k") == "k"
