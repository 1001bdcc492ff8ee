"""Bugs the chaos runs found, each reduced to a plain test on a real cluster."""

from __future__ import annotations

import signal
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Factory, cluster_factory, layout, metadata, until

__all__ = ["cluster_factory"]  # the fixture, shared with tests/cluster

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]


def test_a_sigtermed_controller_hands_its_leaderships_over(cluster_factory: Factory) -> None:
    """Found by the chaos run of seed 12 (term): SIGTERM of the broker that was the
    active controller took 10.2 s, its controlled.shutdown.timeout.ms, and the broker
    exited still leading (log: 'controlled shutdown seconds=10.176 still_leading=True');
    a SIGTERM of any other broker hands over within a second."""
    cluster = cluster_factory(3, None, min_insync_replicas="2")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("handover", 6, 3)])["handover"].result(20)
    asker = cluster.broker(1)
    controller = until(lambda: max(metadata(asker).controller_id, 0), 20, "a controller")
    victim = cluster.broker(controller)
    until(
        lambda: any(p.leader_id == controller for p in layout(victim, "handover").values()),
        20,
        "the controller leads a partition",
    )
    started = time.monotonic()
    victim.signal(signal.SIGTERM)
    assert victim.proc is not None
    assert victim.proc.wait(30) == 0
    took = time.monotonic() - started
    shutdown = next(line for line in victim.logs(400).splitlines() if "controlled shutdown" in line)
    assert "still_leading=False" in shutdown and took < 5, (round(took, 1), shutdown)
