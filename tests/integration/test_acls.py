"""ACL authorization (#28) with real clients, on a broker with the authorizer on and a
SASL_PLAINTEXT listener (PLAIN users admin, a super user; alice; bob).

- CreateAcls / DescribeAcls / DeleteAcls through confluent-kafka's admin client; only a
  principal allowed ALTER on the cluster may create or delete them.
- A user with READ on one topic and its group reads that topic, and neither reads
  another nor writes either; Metadata does not even show the other topic.
- A group needs its own ACL; deny beats allow; prefixed ACLs cover every name they start.
- A denied request leaves a log line naming principal and address, and the broker serves on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KafkaPythonResourceType
from kafka.errors import ClusterAuthorizationFailedError
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import WriteTxnMarkersRequest

from partita.client.connection import BrokerConnection
from partita.client.security import ClientSecurity
from tests.integration.conftest import BrokerProcess
from tests.integration.test_sasl import client_config

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret" user_bob="bob-secret";'
)
SETTINGS = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("acls") / "data", SETTINGS)
    broker.start()
    yield broker
    broker.close()


def admin_of(broker: BrokerProcess, user: str = "admin") -> AdminClient:
    return AdminClient(client_config(broker, user, f"{user}-secret"))


def allow(
    principal: str,
    name: str,
    operation: AclOperation,
    resource: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def create_acls(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=15)


def topics(broker: BrokerProcess, *names: str) -> None:
    admin = admin_of(broker)
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=15)
    producer = Producer(client_config(broker, "admin", "admin-secret"))
    for name in names:
        producer.produce(name, value=f"{name}-record".encode())
    assert producer.flush(15) == 0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce_error(config: dict[str, Any], topic: str) -> int | None:
    """The delivery error code of one record (None: delivered)."""
    outcome: list[int | None] = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(
        topic,
        value=b"x",
        on_delivery=lambda err, _msg: outcome.append(err.code() if err else None),
    )
    producer.flush(15)
    return outcome[0]


def consume_error(config: dict[str, Any], topic: str, group: str) -> tuple[list[bytes], int | None]:
    """What a group member of ``group`` reads from ``topic``: values, or the error."""
    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                return values, message.error().code()
            values.append(message.value())
            return values, None
    finally:
        consumer.close()
    return values, None


def test_acls_are_created_described_and_deleted_by_whom_may(secured: BrokerProcess) -> None:
    admin = admin_of(secured)
    topic = unique("described")
    create_acls(
        admin,
        allow("User:alice", topic, AclOperation.READ),
        allow("User:alice", topic + "-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
    )
    everything = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(everything).result(timeout=15)
    mine = {(b.name, b.operation, b.resource_pattern_type) for b in found}
    assert (topic, AclOperation.READ, ResourcePatternType.LITERAL) in mine
    assert (topic + "-", AclOperation.WRITE, ResourcePatternType.PREFIXED) in mine

    # MATCH: every binding that applies to a name, literal and prefixed alike.
    match = AclBindingFilter(
        ResourceType.TOPIC,
        topic + "-x",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    applying = admin.describe_acls(match).result(timeout=15)
    assert [(b.name, b.operation) for b in applying] == [(topic + "-", AclOperation.WRITE)]

    # alice may not change ACLs (ALTER on the cluster is the admin's).
    alice = admin_of(secured, "alice")
    with pytest.raises(KafkaException) as refused:
        create_acls(alice, allow("User:alice", "*", AclOperation.ALL))
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka 2.16 reports a refused DescribeAcls as an empty list; kafka-python
    # raises the error the broker sent.)
    kafka_python = KafkaAdminClient(
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="alice-secret",
    )
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kafka_python.describe_acls(
                ACLFilter(
                    principal=None,
                    host="*",
                    operation=ACLOperation.ANY,
                    permission_type=ACLPermissionType.ANY,
                    resource_pattern=ResourcePatternFilter(
                        KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY
                    ),
                )
            )
    finally:
        kafka_python.close()

    exact = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deleted = next(iter(admin.delete_acls([exact]).values())).result(timeout=15)
    assert [(b.name, b.operation) for b in deleted] == [(topic, AclOperation.READ)]
    left = admin.describe_acls(everything).result(timeout=15)
    assert topic not in {b.name for b in left}
    assert topic + "-" in {b.name for b in left}


def test_a_reader_of_one_topic_reads_it_and_nothing_else(secured: BrokerProcess) -> None:
    mine, other, group = unique("mine"), unique("other"), unique("readers")
    topics(secured, mine, other)
    alice = client_config(secured, "alice", "alice-secret")
    # Before any ACL names it, nothing is allowed (allow.everyone.if.no.acl.found=false).
    assert consume_error(alice, mine, group)[1] in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
    )
    create_acls(
        admin_of(secured),
        allow("User:alice", mine, AclOperation.READ),
        allow("User:alice", group, AclOperation.READ, resource=ResourceType.GROUP),
    )
    assert consume_error(alice, mine, group) == ([f"{mine}-record".encode()], None)
    _, error = consume_error(alice, other, group)
    assert error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(alice, mine) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(alice, other) == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # Metadata shows alice only what she may describe; the admin sees both.
    listed = set(admin_of(secured, "alice").list_topics(timeout=15).topics)
    assert mine in listed and other not in listed
    assert {mine, other} <= set(admin_of(secured).list_topics(timeout=15).topics)

    # A group needs its own ACL: the same topic through another group is refused.
    _, error = consume_error(alice, mine, unique("not-hers"))
    assert error == KafkaError.GROUP_AUTHORIZATION_FAILED

    # bob has nothing at all.
    bob = client_config(secured, "bob", "bob-secret")
    assert produce_error(bob, mine) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    logs = secured.logs()
    assert "authorization denied" in logs
    assert "User:bob" in logs and "127.0.0.1" in logs


def test_deny_beats_allow_and_prefixes_cover_names(secured: BrokerProcess) -> None:
    team = unique("team") + "-"
    open_topic, secret = team + "orders", team + "secret"
    topics(secured, open_topic, secret)
    prefixed = ResourcePatternType.PREFIXED
    create_acls(
        admin_of(secured),
        allow("User:bob", team, AclOperation.ALL, pattern=prefixed),
        allow("User:bob", secret, AclOperation.WRITE, permission=AclPermissionType.DENY),
    )
    bob = client_config(secured, "bob", "bob-secret")
    assert produce_error(bob, open_topic) is None
    assert produce_error(bob, secret) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The DENY names WRITE only: bob still reads the secret topic.
    consumer = Consumer({**bob, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(secret, 0, 0)])
    try:
        message = None
        deadline = time.monotonic() + 15
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            # librdkafka looks up its (unused) group's coordinator: bob may not use it.
            if message is not None and message.error():
                assert message.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
                message = None
        assert message is not None, message
        assert message.value() == f"{secret}-record".encode()
    finally:
        consumer.close()
    # A name outside the prefix is not covered.
    assert produce_error(bob, unique("elsewhere")) == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_acls_need_an_authorizer(broker_factory: type[BrokerProcess]) -> None:
    """Without authorizer.class.name, Kafka's SECURITY_DISABLED: nothing stored that
    nobody would enforce."""
    broker = broker_factory({})
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as refused:
        create_acls(admin, allow("User:alice", "t", AclOperation.READ))
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED


def test_what_a_client_may_not_see_is_not_told(secured: BrokerProcess) -> None:
    """Review findings: a topic id does not reveal its topic's name; DescribeCluster is
    answered to anyone (Kafka Connect asks it for the cluster id), with no operations;
    the authorized operations asked for are the ones the ACLs give; an idempotent
    producer allowed to WRITE one topic gets its producer id."""
    mine, secret = unique("visible"), unique("secret")
    topics(secured, mine, secret)
    create_acls(
        admin_of(secured),
        allow("User:alice", mine, AclOperation.READ),
        allow("User:alice", mine, AclOperation.WRITE),
    )
    alice_admin = admin_of(secured, "alice")
    described = alice_admin.describe_topics(
        TopicCollection([mine]), include_authorized_operations=True
    )[mine].result(timeout=15)
    assert set(described.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
    }
    cluster = alice_admin.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert cluster.cluster_id and not cluster.authorized_operations

    # The secret topic's id, asked for by id, comes back without its name.
    admin = admin_of(secured)  # kept: its futures die with it
    found = admin.describe_topics(TopicCollection([secret]))[secret].result(timeout=15)
    secret_id = found.topic_id
    response = asyncio.run(
        as_alice(
            secured,
            MetadataRequest(
                version=12,
                topics=[
                    MetadataRequest.MetadataRequestTopic(topic_id=as_uuid(secret_id), name=None)
                ],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
    )
    (entry,) = response.topics
    assert entry.error_code == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert entry.name is None

    # confluent-kafka's producer is idempotent here: it needs a producer id first.
    alice = client_config(secured, "alice", "alice-secret")
    assert produce_error({**alice, "enable.idempotence": True}, mine) is None


async def as_alice(broker: BrokerProcess, request: Any) -> Any:
    """One request on a connection of partita's client, logged in as alice."""
    connection = BrokerConnection(
        "127.0.0.1",
        broker.port,
        security=ClientSecurity.from_config(client_config(broker, "alice", "alice-secret")),
    )
    await connection.connect()
    try:
        return await connection.request(request)
    finally:
        await connection.close()


def as_uuid(topic_id: Any) -> uuid.UUID:
    """confluent-kafka's Uuid as Python's."""
    high = topic_id.get_most_significant_bits() & (2**64 - 1)
    low = topic_id.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(high << 64) | low)


def test_a_transactional_id_needs_its_own_acl(secured: BrokerProcess) -> None:
    # alice may write the topic (and her idempotent producer works), but a transactional
    # producer also needs WRITE on its transactional id: refused without it, with Kafka's
    # fatal TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and working once it is granted.
    topic, tid = unique("txn-acl"), unique("alice-tx")
    topics(secured, topic)
    admin = admin_of(secured)
    create_acls(
        admin,
        allow("User:alice", topic, AclOperation.WRITE),
        allow("User:alice", topic, AclOperation.DESCRIBE),
    )
    alice = client_config(secured, "alice", "alice-secret")
    assert produce_error({**alice, "enable.idempotence": True}, topic) is None
    refused = Producer({**alice, "transactional.id": tid})
    with pytest.raises(KafkaException) as error:
        refused.init_transactions(15)
    assert error.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "User:alice" in secured.logs() and tid in secured.logs()

    create_acls(admin, allow("User:alice", tid, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID))
    granted = Producer({**alice, "transactional.id": tid})
    granted.init_transactions(15)
    granted.begin_transaction()
    granted.produce(topic, value=b"in a transaction")
    granted.commit_transaction(15)


def test_only_a_broker_may_write_transaction_markers(secured: BrokerProcess) -> None:
    # WriteTxnMarkers ends any producer's transaction: CLUSTER_ACTION only. alice, who may
    # write the topic, gets CLUSTER_AUTHORIZATION_FAILED for every partition, and nothing
    # is appended.
    topic = unique("markers")
    topics(secured, topic)
    create_acls(admin_of(secured), allow("User:alice", topic, AclOperation.WRITE))
    marker = WriteTxnMarkersRequest.WritableTxnMarker(
        producer_id=1, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
        topics=[WriteTxnMarkersRequest.WritableTxnMarker.WritableTxnMarkerTopic(
            name=topic, partition_indexes=[0])],
    )  # fmt: skip
    response = asyncio.run(as_alice(secured, WriteTxnMarkersRequest(version=1, markers=[marker])))
    (result,) = response.markers
    assert [p.error_code for t in result.topics for p in t.partitions] == [
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    ]
    consumer = Consumer({**client_config(secured, "admin", "admin-secret"), "group.id": "m"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), 10) == (0, 1)
    finally:
        consumer.close()
