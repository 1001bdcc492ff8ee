"""The reference itself: real Kafka starts, serves, fails over and stops as the helper says.

A single node is started by the other modules; here a 3-node KRaft cluster (three combined
broker-controllers, all voters) on loopback, the shape partita's cluster is compared with.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.kafka.real_kafka import GROUP_SETTINGS, real_kafka, run_tool

pytestmark = pytest.mark.kafka


def leaders(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR), as kafka-topics --describe prints them."""
    out = run_tool("topics", "--describe", "--topic", topic, bootstrap=bootstrap).check().stdout
    found = {}
    for partition, leader, isr in re.findall(
        r"Partition: (\d+)\tLeader: (-?\d+)\tReplicas: [\d,]+\tIsr: ([\d,]*)", out
    ):
        found[int(partition)] = (int(leader), [int(n) for n in isr.split(",") if n])
    return found


@pytest.mark.slow  # about a minute: three JVMs start, fail over, restart and stop
def test_three_node_cluster_fails_over_and_stops(kafka_jars: None, tmp_path: Path) -> None:
    # a dead broker is fenced after its session times out (9 s by default): sooner here
    settings = {
        **GROUP_SETTINGS,
        "broker.session.timeout.ms": "2000",
        "broker.heartbeat.interval.ms": "500",
    }
    with real_kafka(tmp_path, nodes=3, settings=settings) as cluster:
        assert [node.node_id for node in cluster.nodes] == [1, 2, 3]
        bootstrap = cluster.bootstrap
        run_tool(
            "topics",
            "--create",
            "--topic",
            "rf3",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            bootstrap=bootstrap,
        ).check()
        before = leaders(bootstrap, "rf3")
        assert sorted(before) == [0, 1, 2]
        assert all(sorted(isr) == [1, 2, 3] for _, isr in before.values())
        run_tool(
            "console-producer",
            "--topic",
            "rf3",
            "--producer-property",
            "acks=all",
            bootstrap=bootstrap,
            stdin="a\nb\nc\n",
        ).check()

        # kill -9 the leader of partition 0: another replica leads it, the ISR shrinks
        victim = next(n for n in cluster.nodes if n.node_id == before[0][0])
        cluster.kill_node(victim)
        survivors = ",".join(n.address for n in cluster.nodes if n is not victim)
        after = leaders(survivors, "rf3")
        for _ in range(100):
            if all(victim.node_id not in isr for _, isr in after.values()):
                break
            after = leaders(survivors, "rf3")
        assert after[0][0] not in (victim.node_id, -1)
        assert all(victim.node_id not in isr for _, isr in after.values()), after
        out = (
            run_tool(
                "console-consumer",
                "--topic",
                "rf3",
                "--from-beginning",
                "--max-messages",
                "3",
                bootstrap=survivors,
            )
            .check()
            .stdout
        )
        assert sorted(out.split()) == ["a", "b", "c"]

        # back again, it catches up and rejoins every ISR
        cluster.restart_node(victim)
        for _ in range(100):
            back = leaders(bootstrap, "rf3")
            if all(sorted(isr) == [1, 2, 3] for _, isr in back.values()):
                break
        assert all(sorted(isr) == [1, 2, 3] for _, isr in back.values()), back
    assert all(not node.running() for node in cluster.nodes)
