"""ACLs through Kafka's own tool: ``kafka-acls`` adds, lists and removes bindings on a
partita broker exactly as on Kafka (same output), both with the ACL authorizer on; and a
principal the tool's bindings allow is allowed by partita, one they do not is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import BrokerProcess
from tests.kafka.real_kafka import GROUP_SETTINGS, KafkaCluster, real_kafka, run_tool

pytestmark = pytest.mark.kafka

# Both run the ACL authorizer; their PLAINTEXT clients (and Kafka's own controller
# listener) are User:ANONYMOUS, made a super user so that the tool may change ACLs.
AUTHORIZED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture(scope="module")
def kafka_with_acls(
    kafka_jars: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaCluster]:
    workdir = tmp_path_factory.mktemp("kafka-acls")
    with real_kafka(workdir, settings={**GROUP_SETTINGS, **AUTHORIZED}, first_node_id=0) as c:
        yield c


@pytest.fixture(scope="module")
def partita_with_acls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("partita-acls") / "data", AUTHORIZED)
    broker.start()
    yield broker
    broker.close()


def test_kafka_acls_adds_lists_and_removes_as_on_kafka(
    kafka_with_acls: KafkaCluster, partita_with_acls: BrokerProcess, tmp_path: Path
) -> None:
    steps = [
        ["--add", "--allow-principal", "User:alice", "--operation", "Read",
         "--operation", "Describe", "--topic", "orders", "--group", "billing"],
        ["--add", "--deny-principal", "User:mallory", "--operation", "All",
         "--topic", "orders", "--deny-host", "10.0.0.66"],
        ["--add", "--allow-principal", "User:bob", "--producer", "--topic", "team-",
         "--resource-pattern-type", "prefixed"],
        ["--list", "--topic", "orders"],
        ["--list", "--topic", "team-orders", "--resource-pattern-type", "match"],
        ["--list", "--principal", "User:alice"],
        ["--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read",
         "--topic", "orders"],
        ["--list", "--topic", "orders"],
        ["--list"],
    ]  # fmt: skip
    outputs: dict[str, list[str]] = {}
    for target, bootstrap in (
        ("partita", partita_with_acls.bootstrap),
        ("kafka", kafka_with_acls.bootstrap),
    ):
        outputs[target] = [
            run_tool("acls", *step, bootstrap=bootstrap).check().stdout for step in steps
        ]
    for step, ours, theirs in zip(steps, outputs["partita"], outputs["kafka"], strict=True):
        assert _lines(ours) == _lines(theirs), step
    listed = outputs["partita"][3]
    assert "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in listed
    assert "principal=User:mallory, host=10.0.0.66, operation=ALL, permissionType=DENY" in listed


def _lines(text: str) -> list[str]:
    """The tool groups bindings by resource in a Java HashMap keyed by ResourcePattern,
    whose hash includes enums' identity hashes: the order of resources, and of a
    resource's bindings, changes from one run of the tool to the next, against Kafka as
    against partita. Compared as sets: each heading line (``Current ACLs for resource``,
    ``ACLs for principal``...) with the binding lines under it, in any order."""
    blocks: list[list[str]] = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        if line.startswith("(") and blocks:  # a binding, under the last heading
            blocks[-1].append(line)
        else:
            blocks.append([line])
    return sorted(f"{b[0]} {sorted(b[1:])}" for b in blocks)
