"""``partita group`` against a real broker with a real group."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from tests.integration.clients import create_topic, produce
from tests.integration.conftest import BrokerProcess
from tests.integration.test_bad_input import connect, roundtrip


def partita(*args: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.cli.main", *args, "-b", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 1,
        }
    )
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == count


def test_group_list_describe_reset_delete(broker_factory: Any) -> None:
    broker: BrokerProcess = broker_factory(settings={"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    create_topic(broker.bootstrap, "orders", partitions=2)
    produce(
        broker.bootstrap, "orders", [{"value": b"%d" % i, "partition": i % 2} for i in range(20)]
    )
    consume_and_commit(broker.bootstrap, "billing", "orders", 20)
    produce(broker.bootstrap, "orders", [{"value": b"late", "partition": 0}] * 5)

    listed = partita("group", "list", bootstrap=broker.bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert "billing" in listed.stdout and "Empty" in listed.stdout

    described = partita("group", "describe", "billing", bootstrap=broker.bootstrap)
    assert described.returncode == 0, described.stderr
    rows = [
        [cell.strip() for cell in line.split("│")][1:-1]
        for line in described.stdout.splitlines()
        if "orders" in line and "│" in line
    ]
    lags = {row[1]: row[4] for row in rows}  # partition -> lag
    assert lags == {"0": "5", "1": "0"}, described.stdout

    dry = partita(
        "group",
        "reset-offsets",
        "billing",
        "--topic",
        "orders",
        "--to-earliest",
        bootstrap=broker.bootstrap,
    )
    assert dry.returncode == 0 and "dry run" in dry.stdout
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing"})
    before = [tp.offset for tp in check.committed([TopicPartition("orders", 0)], timeout=10)]
    assert before == [10]  # a dry run changes nothing

    done = partita(
        "group",
        "reset-offsets",
        "billing",
        "--topic",
        "orders",
        "--shift-by",
        "-3",
        "--execute",
        bootstrap=broker.bootstrap,
    )
    assert done.returncode == 0, done.stderr
    after = [
        tp.offset
        for tp in check.committed(
            [TopicPartition("orders", 0), TopicPartition("orders", 1)], timeout=10
        )
    ]
    check.close()
    assert after == [7, 7]

    bad = partita(
        "group", "reset-offsets", "billing", "--topic", "orders", bootstrap=broker.bootstrap
    )
    assert bad.returncode == 1 and "exactly one of" in bad.stderr

    deleted = partita("group", "delete", "billing", bootstrap=broker.bootstrap)
    assert deleted.returncode == 0, deleted.stderr
    assert "billing" not in partita("group", "list", bootstrap=broker.bootstrap).stdout


def test_unreachable_broker_is_one_clear_line() -> None:
    result = partita("group", "list", bootstrap="127.0.0.1:1")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["error: cannot reach a broker at 127.0.0.1:1"]


def test_group_errors_keep_the_group_working(broker_factory: Any) -> None:
    """Unknown members, stale generations and unknown topics get Kafka's error codes; the
    real member keeps its group."""
    broker: BrokerProcess = broker_factory(settings={"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    create_topic(broker.bootstrap, "events")
    produce(broker.bootstrap, "events", [{"value": b"x", "partition": 0}] * 3)
    member = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 1,
            "enable.auto.commit": False,
        }
    )
    member.subscribe(["events"])
    deadline = time.monotonic() + 20
    got = 0
    while not member.assignment() and time.monotonic() < deadline:
        msg = member.poll(0.2)
        got += int(msg is not None and not msg.error())
    assert member.assignment()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    group = admin.describe_groups(["g"])["g"]
    assert group["group_state"] == "Stable"
    described = partita("group", "describe", "g", bootstrap=broker.bootstrap)
    rows = [
        [cell.strip() for cell in line.split("│")][1:-1]
        for line in described.stdout.splitlines()
        if "events" in line and "│" in line
    ]
    assert rows and rows[0][5].startswith("rdkafka"), described.stdout  # the owner shows
    admin.close()
    sock = connect(broker)
    counter = iter(range(1, 100))

    def send(request: Any) -> Any:
        response_class = (
            HeartbeatResponse if isinstance(request, HeartbeatRequest) else OffsetCommitResponse
        )
        return roundtrip(sock, request, response_class, next(counter))

    heartbeat = send(
        HeartbeatRequest(
            version=4, group_id="g", generation_id=1, member_id="ghost", group_instance_id=None
        )
    )
    assert heartbeat.error_code == 25  # UNKNOWN_MEMBER_ID
    real_id = group["members"][0]["member_id"]
    stale = send(
        HeartbeatRequest(
            version=4, group_id="g", generation_id=999, member_id=real_id, group_instance_id=None
        )
    )
    assert stale.error_code == 22  # ILLEGAL_GENERATION
    empty = send(
        HeartbeatRequest(
            version=4, group_id="", generation_id=1, member_id=real_id, group_instance_id=None
        )
    )
    assert empty.error_code == 24  # INVALID_GROUP_ID
    commit = send(
        OffsetCommitRequest(
            version=8,
            group_id="g",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="no-such-topic",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=1,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                    ],
                )
            ],
        )
    )
    assert commit.topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    sock.close()
    # The real member is unaffected: it still reads and commits.
    while got < 3 and time.monotonic() < deadline + 10:
        msg = member.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
    member.commit(asynchronous=False)
    member.close()
    assert got == 3


def test_describing_a_group_nobody_knows_says_so_from_v6(broker: BrokerProcess) -> None:
    """Kafka's rule (KIP-1043): an unknown group is Dead; DescribeGroups v6+ adds
    GROUP_ID_NOT_FOUND with a message, which kafka-consumer-groups reports as such."""
    sock = connect(broker)
    found = roundtrip(
        sock,
        FindCoordinatorRequest(version=1, key="nobody", key_type=0),  # creates the offsets topic
        FindCoordinatorResponse,
        1,
    )
    assert found.error_code == 0
    answers = {}
    for version in (5, 6):
        response = roundtrip(
            sock,
            DescribeGroupsRequest(
                version=version, groups=["nobody"], include_authorized_operations=False
            ),
            DescribeGroupsResponse,
            version,
        )
        group = response.groups[0]
        answers[version] = (group.group_state, group.error_code)
    assert answers == {5: ("Dead", 0), 6: ("Dead", 69)}
    assert response.groups[0].error_message == "Group nobody not found."
