"""A data directory of an older partita broker alone (its metadata in
``partita-metadata.json``) is taken over by today's broker, which keeps a broker's
metadata in the cluster store over a file of the data directory: the topic, its id, its
records and its cluster id carry on, and the directory works as before after a restart."""

from __future__ import annotations

import json
import uuid

from partita.storage.log_manager import LogManager
from partita.storage.meta_properties import read_meta_properties
from tests.conftest import make_batch
from tests.integration.clients import admin, consume_all, produce
from tests.integration.conftest import BrokerProcess


def test_an_older_brokers_directory_is_adopted_with_its_records(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory()
    data = broker.data_dir
    topic_id = uuid.uuid4()
    # What an older broker left: meta.properties, its metadata file, one log with 6 records.
    logs = LogManager(data)
    logs.startup()
    log = logs.get_or_create("orders", 0, topic_id)
    log.append_as_leader(make_batch(3, tag=1), leader_epoch=2)
    log.append_as_leader(make_batch(3, tag=2), leader_epoch=2)
    log.update_high_watermark(6)
    logs.shutdown()
    (data / "meta.properties").write_text("version=1\nnode.id=0\ncluster.id=OlderCluster1\n")
    state = {"replicas": [0], "leader": 0, "leader_epoch": 2, "isr": [0], "partition_epoch": 0}
    (data / "partita-metadata.json").write_text(
        json.dumps(
            {
                "producer_id_block_end": 1000,
                "topics": {
                    "orders": {"topic_id": str(topic_id), "partitions": {"0": state}, "configs": {}}
                },
            }
        )
    )

    broker.start()
    records = consume_all(broker.bootstrap, "orders", [0], expected=6)
    assert [m.offset() for m in records] == list(range(6))
    assert admin(broker.bootstrap).describe_cluster().result().cluster_id == "OlderCluster1"
    # The same topic id: a directory naming another id would have been set aside as stray.
    assert (data / "orders-0").is_dir() and not list(data.glob("*-stray"))
    produce(broker.bootstrap, "orders", [{"value": b"new", "partition": 0}])
    assert (data / "partita-metadata.json.adopted").exists()
    assert not (data / "partita-metadata.json").exists()

    broker.restart()
    values = [m.value() for m in consume_all(broker.bootstrap, "orders", [0], expected=7)]
    assert len(values) == 7 and values[-1] == b"new"
    assert read_meta_properties(data)["cluster.id"] == "OlderCluster1"
    assert "error" not in broker.logs().lower()
