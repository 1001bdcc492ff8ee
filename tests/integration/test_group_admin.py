"""partita's AsyncAdmin on consumer groups, with a live confluent-kafka group."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer

from partita.client.admin import AsyncAdmin
from partita.client.group_member import GroupError
from tests.integration.clients import create_topic, produce
from tests.integration.conftest import BrokerProcess

UNKNOWN_MEMBER_ID = 25
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69


def test_list_describe_alter_offsets_and_delete_a_group(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "ga", partitions=3)
    produce(broker.bootstrap, "ga", [{"value": b"%d" % i, "partition": i % 3} for i in range(30)])
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "admins",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "client.id": "librdkafka-member",
        }
    )
    consumer.subscribe(["ga"])
    deadline = time.monotonic() + 30
    read = 0
    while read < 30 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read += 1
    consumer.commit(asynchronous=False)

    async def while_active() -> None:
        async with AsyncAdmin(broker.bootstrap) as admin:
            listed = await admin.list_groups()
            assert ("admins", "consumer", "Stable") in {
                (g.group_id, g.protocol_type, g.state) for g in listed
            }
            group = await admin.describe_group("admins")
            assert group.state == "Stable" and group.protocol == "range"
            [member] = group.members
            assert member.client_id == "librdkafka-member"
            assert sorted(member.assignment) == [("ga", 0), ("ga", 1), ("ga", 2)]
            assert await admin.group_offsets("admins") == {("ga", p): 10 for p in range(3)}
            with pytest.raises(GroupError) as refused:
                await admin.alter_group_offsets("admins", {("ga", 0): 0})
            assert refused.value.code == UNKNOWN_MEMBER_ID
            assert await admin.delete_groups(["admins"]) == {"admins": NON_EMPTY_GROUP}

    asyncio.run(while_active())
    consumer.close()

    async def after_leaving() -> None:
        async with AsyncAdmin(broker.bootstrap) as admin:
            assert (await admin.describe_group("admins")).state == "Empty"
            await admin.alter_group_offsets("admins", {("ga", 0): 3, ("ga", 2): 0})
            assert await admin.group_offsets("admins") == {
                ("ga", 0): 3,
                ("ga", 1): 10,
                ("ga", 2): 0,
            }
            assert await admin.delete_groups(["admins"]) == {"admins": 0}
            assert "admins" not in {g.group_id for g in await admin.list_groups()}
            assert await admin.delete_groups(["admins"]) == {"admins": GROUP_ID_NOT_FOUND}

    asyncio.run(after_leaving())
