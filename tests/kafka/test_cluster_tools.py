"""Kafka's cluster tools against a partita cluster and a 3-node Kafka.

``kafka-leader-election`` (``LeaderElectionCommand``) and ``kafka-reassign-partitions``
(``ReassignPartitionsCommand``) run as classes against etcd plus three partita brokers
(:class:`LocalCluster`) and against three KRaft Kafka nodes, with the same invocations;
their output is compared once ids, ports and log directories are masked. Topics are
created with an explicit replica assignment, so both clusters start from the same layout.
Automatic leader rebalancing is off on both, so a non-preferred leader stays until the
tool moves it.

A known difference is an ``xfail(strict=True)`` naming it, and a row of
docs/kafka-differences.md.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from partita.local.cluster import LocalCluster
from tests.kafka.real_kafka import GROUP_SETTINGS, KafkaCluster, ToolResult, real_kafka, run_tool

pytestmark = pytest.mark.kafka

TARGETS = ("partita", "kafka")
SETTINGS = {**GROUP_SETTINGS, "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def partita_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("partita-cluster"), 3, settings=SETTINGS)
    try:
        yield cluster  # started by kafka_cluster, beside Kafka's nodes
    finally:
        cluster.kill()


@pytest.fixture(scope="module")
def kafka_cluster(
    kafka_jars: None, partita_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    """The 3-node Kafka, started while the partita cluster starts in a thread."""
    with ThreadPoolExecutor(1) as pool:
        partita_started = pool.submit(partita_cluster.start)
        with real_kafka(tmp_path_factory.mktemp("kafka3"), nodes=3, settings=SETTINGS) as cluster:
            partita_started.result()
            yield cluster


class Both:
    def __init__(self, partita: LocalCluster, kafka: KafkaCluster, workdir: Path) -> None:
        self.partita = partita
        self.bootstrap = {"partita": partita.bootstrap, "kafka": kafka.bootstrap}
        self.workdir = workdir

    def tool(self, tool: str, *args: str) -> dict[str, ToolResult]:
        with ThreadPoolExecutor(len(TARGETS)) as pool:
            runs = {
                t: pool.submit(run_tool, tool, *args, bootstrap=self.bootstrap[t]) for t in TARGETS
            }
            return {t: run.result() for t, run in runs.items()}

    def json_file(self, name: str, content: object) -> str:
        path = self.workdir / name
        path.write_text(json.dumps(content))
        return str(path)

    def create(self, topic: str, assignment: str) -> None:
        same_output(
            self.tool("topics", "--create", "--topic", topic, "--replica-assignment", assignment)
        )

    def layout(self, topic: str) -> dict[str, dict[int, tuple[int, list[int]]]]:
        """target -> partition -> (leader, replicas), from a Metadata request (cheap to poll:
        no JVM); :meth:`described` has the same from kafka-topics --describe."""
        found: dict[str, dict[int, tuple[int, list[int]]]] = {}
        for target, bootstrap in self.bootstrap.items():
            admin = AdminClient({"bootstrap.servers": bootstrap})
            meta = admin.list_topics(topic, timeout=10).topics[topic]
            found[target] = {p: (m.leader, list(m.replicas)) for p, m in meta.partitions.items()}
        return found

    def described(self, topic: str) -> dict[str, dict[int, tuple[int, list[int]]]]:
        found: dict[str, dict[int, tuple[int, list[int]]]] = {}
        for target, result in self.tool("topics", "--describe", "--topic", topic).items():
            rows = re.findall(
                r"Partition: (\d+)\tLeader: (-?\d+)\tReplicas: ([\d,]+)", result.check().stdout
            )
            found[target] = {
                int(p): (int(leader), [int(r) for r in replicas.split(",")])
                for p, leader, replicas in rows
            }
        return found

    def produce(
        self, topic: str, count: int, size: int = 100, partition: int | None = None
    ) -> None:
        for bootstrap in self.bootstrap.values():
            producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
            for i in range(count):
                producer.produce(
                    topic, value=b"x" * size, partition=i % 3 if partition is None else partition
                )
                if i % 1000 == 999:
                    producer.poll(0)
            assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def both(
    partita_cluster: LocalCluster,
    kafka_cluster: KafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Both:
    return Both(partita_cluster, kafka_cluster, tmp_path_factory.mktemp("json"))


def mask(text: str) -> str:
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)
    return re.sub(r'"log_dirs":\[[^\]]*\]', '"log_dirs":<dirs>', text)


def same_output(results: dict[str, ToolResult], masker: Callable[[str], str] = mask) -> None:
    results["kafka"].check()
    partita = results["partita"]
    assert masker(partita.stdout) == masker(results["kafka"].stdout), (
        partita.stdout + partita.stderr
    )
    assert partita.returncode == 0, partita.stderr


def until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.5)


def reassignment(*moves: tuple[str, int, list[int]]) -> dict[str, object]:
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
            for t, p, r in moves
        ],
    }


# ---------------------------------------------------------------- kafka-leader-election


def reorder(both: Both, topic: str, partition: int, replicas: list[int]) -> None:
    """Reassign to the same replicas in another order: the leader stays, the preferred
    leader (the first replica) changes, so a preferred election has work to do."""
    path = both.json_file(f"{topic}-reorder.json", reassignment((topic, partition, replicas)))
    same_output(both.tool("reassign-partitions", "--execute", "--reassignment-json-file", path))
    until(
        lambda: all(lay[partition][1] == replicas for lay in both.layout(topic).values()),
        what=f"{topic}-{partition} replicas {replicas}",
    )


def test_preferred_election_of_one_partition(both: Both) -> None:
    both.create("elect-one", "1:2,2:3,3:1")
    reorder(both, "elect-one", 0, [2, 1])
    assert {t: lay[0][0] for t, lay in both.layout("elect-one").items()} == {
        "partita": 1,
        "kafka": 1,
    }
    args = ("--election-type", "PREFERRED", "--topic", "elect-one", "--partition")
    elected = both.tool("leader-election", *args, "0")
    same_output(elected)
    assert "Successfully completed leader election (PREFERRED) for partitions elect-one-0" in (
        elected["partita"].stdout
    )
    until(
        lambda: (
            {t: lay[0][0] for t, lay in both.layout("elect-one").items()}
            == {"partita": 2, "kafka": 2}
        ),
        what="broker 2 leads elect-one-0",
    )
    # again: nothing to do, which both report the same way
    same_output(both.tool("leader-election", *args, "0"))
    # a partition that does not exist
    missing = both.tool("leader-election", *args, "7")
    assert missing["partita"].returncode == missing["kafka"].returncode != 0
    for result in missing.values():
        assert "UnknownTopicOrPartitionException" in result.stdout + result.stderr


@pytest.fixture(scope="module")
def all_elected(both: Both) -> dict[str, ToolResult]:
    """--all-topic-partitions after elect-all-1 got another preferred leader."""
    both.create("elect-all", "1:2,2:3,3:1")
    reorder(both, "elect-all", 1, [3, 2])
    return both.tool("leader-election", "--election-type", "PREFERRED", "--all-topic-partitions")


def test_preferred_election_of_all_partitions_moves_the_leader(
    both: Both, all_elected: dict[str, ToolResult]
) -> None:
    for target, result in all_elected.items():
        assert (
            "Successfully completed leader election (PREFERRED) for partitions elect-all-1\n"
            in (result.check().stdout)
        ), target
    until(
        lambda: (
            {t: lay[1][0] for t, lay in both.layout("elect-all").items()}
            == {"partita": 3, "kafka": 3}
        ),
        what="broker 3 leads elect-all-1",
    )


def test_preferred_election_of_all_partitions_output(all_elected: dict[str, ToolResult]) -> None:
    same_output(all_elected)


def test_unclean_election_not_needed(both: Both) -> None:
    both.create("unclean-live", "1:2,2:3,3:1")
    results = both.tool(
        "leader-election",
        "--election-type",
        "UNCLEAN",
        "--topic",
        "unclean-live",
        "--partition",
        "0",
    )
    same_output(results)
    assert (
        results["partita"].stdout == "Valid replica already elected for partitions unclean-live-0\n"
    )


def test_unclean_election_of_all_partitions_output(both: Both) -> None:
    """The same difference as for PREFERRED: Kafka prints nothing (every leader is live)."""
    results = both.tool("leader-election", "--election-type", "UNCLEAN", "--all-topic-partitions")
    assert results["kafka"].check().stdout == ""
    same_output(results)


# ---------------------------------------------------------------- kafka-reassign-partitions


def test_reassign_generate(both: Both) -> None:
    both.create("gen", "1:2,2:3,3:1")
    path = both.json_file("gen.json", {"version": 1, "topics": [{"topic": "gen"}]})
    results = both.tool(
        "reassign-partitions",
        "--generate",
        "--topics-to-move-json-file",
        path,
        "--broker-list",
        "1,2,3",
    )
    # the current assignment is the same; the proposal starts from a random broker (Kafka's
    # AdminUtils), so only its shape is compared
    current = {t: r.check().stdout.split("Proposed")[0] for t, r in results.items()}
    assert mask(current["partita"]) == mask(current["kafka"])
    for target, result in results.items():
        proposed = json.loads(result.stdout.strip().splitlines()[-1])
        assert sorted(p["partition"] for p in proposed["partitions"]) == [0, 1, 2], target
        for p in proposed["partitions"]:
            assert len(set(p["replicas"])) == 2 and set(p["replicas"]) <= {1, 2, 3}, target
            assert p["log_dirs"] == ["any", "any"], target
        # every broker leads one partition (the first replicas are a permutation)
        assert sorted(p["replicas"][0] for p in proposed["partitions"]) == [1, 2, 3], target


@pytest.fixture(scope="module")
def moved(both: Both) -> str:
    """move-0 from [1,2] to [3,2] and move-1 from [2,3] to [1,3], without a throttle."""
    both.create("move", "1:2,2:3,3:1")
    both.produce("move", 300)
    path = both.json_file("move.json", reassignment(("move", 0, [3, 2]), ("move", 1, [1, 3])))
    same_output(both.tool("reassign-partitions", "--execute", "--reassignment-json-file", path))
    until(
        lambda: all(
            lay[0][1] == [3, 2] and lay[1][1] == [1, 3] for lay in both.layout("move").values()
        ),
        what="move-0 on [3,2] and move-1 on [1,3]",
    )
    return path


def test_reassign_execute_and_verify(both: Both, moved: str) -> None:
    verified = both.tool(
        "reassign-partitions", "--verify", "--reassignment-json-file", moved, "--preserve-throttles"
    )
    same_output(verified)
    assert "Reassignment of partition move-0 is completed." in verified["partita"].stdout
    # the moved replicas serve the records: every partition still holds its 100
    for target, result in both.tool("get-offsets", "--topic", "move").items():
        assert sorted(result.check().stdout.split()) == [f"move:{p}:100" for p in range(3)], target


def test_reassign_verify_clears_throttles(both: Both, moved: str) -> None:
    same_output(both.tool("reassign-partitions", "--verify", "--reassignment-json-file", moved))


def test_reassign_execute_with_throttle(both: Both) -> None:
    both.create("throttled", "1:2,2:3,3:1")
    path = both.json_file("throttled.json", reassignment(("throttled", 2, [3, 2])))
    same_output(
        both.tool(
            "reassign-partitions",
            "--execute",
            "--reassignment-json-file",
            path,
            "--throttle",
            "10000000",
        )
    )


CANCELLED: dict[str, list[int]] = {}  # target -> cancel-0's replicas after the cancel


def test_reassign_cancel(both: Both) -> None:
    """A move held back by a throttle is listed, then cancelled: the replicas go back.

    Kafka's move is throttled by --execute --throttle; partita's by its cluster-wide
    follower.replication.throttled.rate set with kafka-configs (--throttle fails on partita,
    see test_reassign_execute_with_throttle)."""
    both.create("cancel", "1:2,2:3,3:1")
    # 4 MB at 20 kB/s: Kafka's follower takes its first fetch (up to 1 MB) before its quota
    # holds it back, so the partition needs several times that to stay in flight
    both.produce("cancel", 4000, 1000, partition=0)
    path = both.json_file("cancel.json", reassignment(("cancel", 0, [3, 2])))
    rate = "20000"
    default = ("--entity-type", "brokers", "--entity-default")
    follower_rate = "follower.replication.throttled.rate"
    run_tool(
        "configs", *default, "--alter", "--add-config", f"{follower_rate}={rate}",
        bootstrap=both.bootstrap["partita"],
    ).check()  # fmt: skip
    try:
        started = {
            "partita": run_tool(
                "reassign-partitions", "--execute", "--reassignment-json-file", path,
                bootstrap=both.bootstrap["partita"],
            ),
            "kafka": run_tool(
                "reassign-partitions", "--execute", "--reassignment-json-file", path,
                "--throttle", rate, bootstrap=both.bootstrap["kafka"],
            ),
        }  # fmt: skip
        for target, result in started.items():
            assert "Successfully started partition reassignment" in result.check().stdout, target
        listed = both.tool("reassign-partitions", "--list")
        same_output(listed)
        assert "cancel-0: replicas: 3,2,1. adding: 3. removing: 1." in listed["partita"].stdout
        cancelled = both.tool(
            "reassign-partitions",
            "--cancel",
            "--reassignment-json-file",
            path,
            "--preserve-throttles",
        )
        same_output(cancelled)
        assert "Successfully cancelled partition reassignment" in cancelled["partita"].stdout
        until(
            lambda: all(sorted(lay[0][1]) == [1, 2] for lay in both.layout("cancel").values()),
            what="cancel-0 back on brokers 1 and 2",
        )
        same_output(both.tool("reassign-partitions", "--list"))
        CANCELLED.update({t: lay[0][1] for t, lay in both.described("cancel").items()})
    finally:
        run_tool(
            "configs", *default, "--alter", "--delete-config", follower_rate,
            bootstrap=both.bootstrap["partita"],
        )  # fmt: skip
        for node in ("1", "2", "3"):
            run_tool(
                "configs", "--entity-type", "brokers", "--entity-name", node, "--alter",
                "--delete-config", f"{follower_rate},leader.replication.throttled.rate",
                bootstrap=both.bootstrap["kafka"],
            )  # fmt: skip


def test_reassign_cancel_replica_order() -> None:
    """The order of the replicas after a cancel (the first is the preferred leader)."""
    assert CANCELLED, "test_reassign_cancel did not get as far"
    assert CANCELLED["partita"] == CANCELLED["kafka"]


# ---------------------------------------------------------------- last: brokers restarted


def test_unclean_election_of_an_offline_partition(both: Both) -> None:
    """partita only (restarting Kafka nodes costs a minute): the partition's only ISR
    member dies, the out-of-sync replica comes back, and only UNCLEAN elects it."""
    cluster = both.partita
    bootstrap = cluster.broker(1).bootstrap
    run_tool(
        "topics",
        "--create",
        "--topic",
        "unclean",
        "--replica-assignment",
        "3:2",
        bootstrap=bootstrap,
    ).check()
    cluster.broker(2).stop()  # the ISR shrinks to [3]
    until(lambda: "Isr: 3\t" in _describe(bootstrap, "unclean"), what="ISR [3]")
    cluster.broker(3).kill()
    until(lambda: "Leader: none" in _describe(bootstrap, "unclean"), what="no leader")
    cluster.broker(2).start()
    try:
        preferred = run_tool(
            "leader-election", "--election-type", "PREFERRED", "--topic", "unclean",
            "--partition", "0", bootstrap=bootstrap,
        )  # fmt: skip
        assert preferred.returncode != 0
        assert "PreferredLeaderNotAvailableException" in preferred.stdout + preferred.stderr
        unclean = run_tool(
            "leader-election", "--election-type", "UNCLEAN", "--topic", "unclean",
            "--partition", "0", bootstrap=bootstrap,
        ).check()  # fmt: skip
        assert "Successfully completed leader election (UNCLEAN) for partitions unclean-0" in (
            unclean.stdout
        )
        until(lambda: "Leader: 2\t" in _describe(bootstrap, "unclean"), what="broker 2 leads")
    finally:
        cluster.broker(3).start()
        both.bootstrap["partita"] = cluster.bootstrap


def _describe(bootstrap: str, topic: str) -> str:
    return run_tool("topics", "--describe", "--topic", topic, bootstrap=bootstrap).check().stdout
