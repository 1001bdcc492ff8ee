"""Apache Kafka's Java client (kafka-clients) against partita, and the same run on Kafka.

The default producer (idempotent, acks=all) sends keyed records; its partition for each key
is partita's murmur2 placement; consumers share a group with the default assignors (range
first, so eager) and with cooperative-sticky, the second member joining a group already
consuming. Each scenario also runs against real Kafka, which shows the test asks for what
Kafka does.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from partita.client.murmur2 import partition_for_key
from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import JavaProgram, KafkaCluster

pytestmark = pytest.mark.kafka

PARTITIONS = 6
# key-0 .. key-1199: keys of 5 to 8 bytes, so murmur2's tail of 1, 2, 3 and 0 bytes
RECORDS = 1200
COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


def produce(
    program: JavaProgram, bootstrap: str, topic: str, config: Path | None = None
) -> dict[str, tuple[int, int]]:
    result = program.run("produce", bootstrap, topic, str(RECORDS), config=config)
    assert result.returncode == 0, result.stdout + result.stderr
    placed = {}
    for line in result.stdout.splitlines():
        kind, key, partition, offset = line.split("\t")
        assert kind == "P"
        placed[key] = (int(partition), int(offset))
    assert len(placed) == RECORDS
    return placed


@pytest.fixture(scope="module")
def produced(
    client_check: JavaProgram, partita: BrokerProcess, kafka: KafkaCluster
) -> dict[str, dict[str, tuple[int, int]]]:
    """The Java producer's (partition, offset) per key, on partita and on Kafka."""
    placements = {}
    for name, bootstrap in (("partita", partita.bootstrap), ("kafka", kafka.bootstrap)):
        create_topic(bootstrap, "java-keyed")
        placements[name] = produce(client_check, bootstrap, "java-keyed")
    return placements


def test_java_producer_places_keys_as_partitas_murmur2(
    produced: dict[str, dict[str, tuple[int, int]]],
) -> None:
    on_partita = produced["partita"]
    for key, (partition, _) in on_partita.items():
        assert partition == partition_for_key(key.encode(), PARTITIONS), key
    # and as on Kafka, with the same offsets: each partition's records in send order from 0
    assert on_partita == produced["kafka"]
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in on_partita.values():
        by_partition[partition].append(offset)
    assert sorted(by_partition) == list(range(PARTITIONS))
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))


def parse_group_run(stdout: str) -> dict[str, list[tuple[str, ...]]]:
    lines: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for line in stdout.splitlines():
        kind, *fields = line.split("\t")
        lines[kind].append(tuple(fields))
    return lines


def partitions(field: str) -> set[int]:
    return {int(p) for p in field.split(",")} if field else set()


def run_group(
    program: JavaProgram,
    bootstrap: str,
    group: str,
    strategy: str,
    topic: str = "java-keyed",
    config: Path | None = None,
) -> dict[str, list[tuple[str, ...]]]:
    result = program.run(
        "consume", bootstrap, topic, group, strategy, "2", str(RECORDS), "60000", config=config
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = parse_group_run(result.stdout)
    assert not run["ERROR"] and not run["LOSE"], result.stdout
    # every record arrived; a redelivery after a rebalance is allowed (at least once)
    assert {key for _, key, _, _ in run["R"]} == {f"key-{i}" for i in range(RECORDS)}
    # the two members end up owning disjoint halves that cover the topic
    final = {int(member): partitions(field) for member, field in run["FINAL"]}
    assert final[0] and final[1] and not final[0] & final[1], final
    assert final[0] | final[1] == set(range(PARTITIONS))
    # and the group committed every partition's end
    ends: dict[int, int] = defaultdict(int)
    for _, _, partition, offset in run["R"]:
        ends[int(partition)] = max(ends[int(partition)], int(offset) + 1)
    committed = {int(p): int(offset) for p, offset in run["COMMITTED"]}
    assert committed == dict(ends)
    return run


@pytest.mark.parametrize("target", ["partita", "kafka"])
def test_java_consumers_share_a_group_default_assignor(
    client_check: JavaProgram,
    partita: BrokerProcess,
    kafka: KafkaCluster,
    produced: dict[str, dict[str, tuple[int, int]]],
    target: str,
) -> None:
    bootstrap = partita.bootstrap if target == "partita" else kafka.bootstrap
    run = run_group(client_check, bootstrap, "java-default", "default")
    # range comes first in the default list, so the protocol is eager: the first member
    # gives up everything it had when the second joins, and is given its share anew
    member0 = [partitions(field) for member, field in run["REVOKE"] if member == "0"]
    assert set(range(PARTITIONS)) in member0, run["REVOKE"]


@pytest.mark.parametrize("target", ["partita", "kafka"])
def test_java_consumers_share_a_group_cooperative_sticky(
    client_check: JavaProgram,
    partita: BrokerProcess,
    kafka: KafkaCluster,
    produced: dict[str, dict[str, tuple[int, int]]],
    target: str,
) -> None:
    bootstrap = partita.bootstrap if target == "partita" else kafka.bootstrap
    run = run_group(client_check, bootstrap, "java-cooperative", COOPERATIVE)
    # incremental: the first member only ever gives up what moves to the second, and the
    # second member never owned anything it then had to give back
    final = {int(member): partitions(field) for member, field in run["FINAL"]}
    revoked0 = set().union(*(partitions(f) for m, f in run["REVOKE"] if m == "0"))
    assert revoked0 == final[1], run["REVOKE"]
    assert not any(partitions(f) for m, f in run["REVOKE"] if m == "1")


@pytest.mark.parametrize("server", ["partita", "kafka"])
def test_java_transactional_producer_and_read_committed_consumer(
    client_check: JavaProgram, server: str, request: pytest.FixtureRequest
) -> None:
    """Kafka's Java producer commits, aborts and commits again (transaction version 1 on
    partita; Kafka 4.4 as it is configured here); its read_committed consumer reads the
    committed records once each and reaches the end, past the markers; read_uncommitted
    reads the aborted ones too."""
    bootstrap = request.getfixturevalue(server).bootstrap
    create_topic(bootstrap, "java-txn", 3)
    result = client_check.run("transactions", bootstrap, "java-txn", "java-txn-writer", "50")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    read: dict[str, list[str]] = defaultdict(list)
    for line in result.stdout.splitlines():
        isolation, value = line.split("\t")
        read[isolation].append(value)
    committed = sorted([f"kept-{i}" for i in range(50)] + [f"also-{i}" for i in range(50)])
    assert sorted(read["read_committed"]) == committed
    assert sorted(read["read_uncommitted"]) == sorted(
        committed + [f"dropped-{i}" for i in range(50)]
    )
