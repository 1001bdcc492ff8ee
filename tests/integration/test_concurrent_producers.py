"""Idempotent confluent-kafka producers, each on its own connection, sending to the same
partitions at once: every acknowledgement must name the offset its record sits at, no
offset may be acknowledged twice, and each producer's records must keep their order."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.conftest import BrokerProcess

PRODUCERS = 6
RECORDS = 3000
PARTITIONS = 2


def _produce_from(bootstrap: str, producer: int) -> list[Any]:
    records = [
        {"value": f"{producer}:{n}".encode(), "partition": n % PARTITIONS} for n in range(RECORDS)
    ]
    # Small batches sent at once: many produce requests, so that they coincide.
    return produce(
        bootstrap,
        "concurrent",
        records,
        **{"enable.idempotence": True, "linger.ms": 0, "batch.num.messages": 25},
    )


def test_concurrent_producers_are_acknowledged_where_their_records_land(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "concurrent", partitions=PARTITIONS)
    with ThreadPoolExecutor(PRODUCERS) as pool:
        delivered = list(pool.map(lambda i: _produce_from(broker.bootstrap, i), range(PRODUCERS)))

    acked = {(m.partition(), m.offset()): m.value() for batch in delivered for m in batch}
    assert len(acked) == PRODUCERS * RECORDS, "two acknowledgements named the same offset"

    consumed = consume_all(
        broker.bootstrap, "concurrent", list(range(PARTITIONS)), PRODUCERS * RECORDS
    )
    in_log = {(m.partition(), m.offset()): m.value() for m in consumed}
    assert in_log == acked

    # Per producer and partition, offsets rise with the order the records were sent in.
    positions: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), value in in_log.items():
        producer, n = (int(part) for part in value.decode().split(":"))
        positions[(producer, partition)].append((n, offset))
    assert len(positions) == PRODUCERS * PARTITIONS
    for pairs in positions.values():
        offsets = [offset for _n, offset in sorted(pairs)]
        assert offsets == sorted(offsets)
