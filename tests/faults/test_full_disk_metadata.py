"""A broker alone whose disk fills, for real (a tmpfs): its metadata lives in a file of
the data directory now (``cluster/file_kv.py``), so a full disk must cost only the change
that did not fit. A topic create is refused with KAFKA_STORAGE_ERROR and leaves no trace,
records already there stay readable, the broker stops cleanly (its registration and
lease are not written to the file), and once there is room it starts again and creates
topics as before."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.faults import fill, tmpfs
from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.conftest import BrokerProcess


def test_a_full_disk_costs_a_broker_alone_only_the_change_that_did_not_fit(
    tmp_path: Path,
) -> None:
    with contextlib.ExitStack() as stack:
        try:
            disk = stack.enter_context(tmpfs(tmp_path / "disk", 16))
        except RuntimeError as exc:
            pytest.skip(str(exc))
        broker = BrokerProcess(disk / "data")
        stack.callback(broker.close)
        broker.start()
        create_topic(broker.bootstrap, "kept")
        produce(broker.bootstrap, "kept", [{"value": f"v{i}".encode()} for i in range(3)])
        filler = fill(disk)

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        refused = r"KAFKA_STORAGE_ERROR.*cannot write cluster metadata"
        with pytest.raises(KafkaException, match=refused):
            admin.create_topics([NewTopic("refused", 1, 1)])["refused"].result(timeout=20)
        assert "refused" not in admin.list_topics(timeout=10).topics
        assert len(consume_all(broker.bootstrap, "kept", [0], expected=3)) == 3
        assert broker.stop() == 0  # leaving the cluster of one writes nothing

        filler.unlink()
        broker.start()
        topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
        assert "kept" in topics.topics and "refused" not in topics.topics
        create_topic(broker.bootstrap, "later")
        assert len(consume_all(broker.bootstrap, "kept", [0], expected=3)) == 3
