"""The Spark sink's producers kept between a worker's tasks, against a real broker.

No Spark here: ``ProducerCache.run`` is what each write task calls, and these tests call
it the same way, with the sink's own ``produce_batches``; the rows are read back with
confluent-kafka. A producer's identity is its producer id, which the broker hands out."""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection

import pyarrow as pa
import pytest

from partita.client.producer import AsyncProducer
from partita.errors import KafkaError
from partita.spark.options import SinkOptions, parse_sink_options
from partita.spark.producer_cache import ProducerCache
from partita.spark.sink import produce_batches
from tests.integration.clients import consume_all, create_topic
from tests.integration.conftest import BrokerProcess

ORIGIN = [("spark.batch.id", b"cache-test"), ("spark.task.id", b"0")]


def _rows(start: int, count: int) -> pa.RecordBatch:
    values = pa.array([b"row-%d" % i for i in range(start, start + count)], pa.binary())
    return pa.RecordBatch.from_arrays([values], names=["value"])


def _write(cache: ProducerCache, options: SinkOptions, start: int, count: int) -> int:
    """One task's write: the rows, then the producer id that wrote them."""

    async def work(producer: AsyncProducer) -> int:
        await produce_batches(producer, options, iter([_rows(start, count)]), ORIGIN)
        return producer.producer_id

    return cache.run(options, work)


def _options(bootstrap: str, topic: str, **producer: str) -> SinkOptions:
    settings = {"kafka.bootstrap.servers": bootstrap, "topic": topic}
    settings.update({f"kafka.{name}": value for name, value in producer.items()})
    return parse_sink_options(settings)


def _values(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    return sorted(m.value() for m in consume_all(bootstrap, topic, [0, 1], expected))


def test_tasks_of_one_worker_share_a_producer_per_configuration(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "cached", partitions=2)
    cache = ProducerCache()
    options = _options(broker.bootstrap, "cached")
    first = _write(cache, options, 0, 100)
    second = _write(cache, options, 100, 100)
    assert first == second >= 0
    assert cache.idle_producers == 1
    # Another configuration gets a producer of its own.
    other = _write(cache, _options(broker.bootstrap, "cached", **{"linger.ms": "1"}), 200, 100)
    assert other not in (first, -1)
    assert cache.idle_producers == 2
    assert _values(broker.bootstrap, "cached", 300) == sorted(b"row-%d" % i for i in range(300))
    cache.close()
    assert cache.idle_producers == 0


def test_a_failed_task_closes_its_producer_instead_of_handing_it_on(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "failing", partitions=2)
    cache = ProducerCache()
    options = _options(broker.bootstrap, "failing")
    used: list[AsyncProducer] = []

    async def failing(producer: AsyncProducer) -> int:
        used.append(producer)
        raise KafkaError("the task failed")

    with pytest.raises(KafkaError, match="the task failed"):
        cache.run(options, failing)
    assert cache.idle_producers == 0
    assert used[0]._closed
    after = _write(cache, options, 0, 10)
    assert after != used[0].producer_id
    cache.close()


def test_producers_idle_past_the_timeout_are_closed(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "expiring", partitions=2)
    cache = ProducerCache(idle_timeout_s=0.0)
    options = _options(broker.bootstrap, "expiring")
    kept: list[AsyncProducer] = []

    async def keep(producer: AsyncProducer) -> int:
        kept.append(producer)
        await produce_batches(producer, options, iter([_rows(0, 10)]), ORIGIN)
        return producer.producer_id

    first = cache.run(options, keep)
    second = cache.run(options, keep)
    assert first != second
    assert kept[0]._closed and not kept[1]._closed
    cache.close()
    assert kept[1]._closed


def test_a_cached_producer_writes_again_after_the_broker_restarts(
    broker: BrokerProcess,
) -> None:
    create_topic(broker.bootstrap, "restarted", partitions=2)
    cache = ProducerCache()
    options = _options(broker.bootstrap, "restarted")
    _write(cache, options, 0, 500)
    broker.restart()  # same port: the cached producer's connections are dead now
    _write(cache, options, 500, 500)
    assert _values(broker.bootstrap, "restarted", 1000) == sorted(
        b"row-%d" % i for i in range(1000)
    )
    cache.close()


def _write_in_child(bootstrap: str, cache: ProducerCache, reply: Connection) -> None:
    options = _options(bootstrap, "forked")
    reply.send((os.getpid(), _write(cache, options, 100, 100)))


def test_a_forked_worker_opens_its_own_producer(broker: BrokerProcess) -> None:
    # pyspark.daemon forks its workers; what the parent cached is not the child's.
    create_topic(broker.bootstrap, "forked", partitions=2)
    cache = ProducerCache()
    options = _options(broker.bootstrap, "forked")
    parent = _write(cache, options, 0, 100)
    receiving, sending = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(broker.bootstrap, cache, sending)
    )
    child.start()
    child_pid, child_producer = receiving.recv()
    child.join(30)
    assert child.exitcode == 0 and child_pid != os.getpid()
    assert child_producer not in (parent, -1)
    # The parent's own producer was not disturbed by the child.
    assert _write(cache, options, 200, 100) == parent
    assert _values(broker.bootstrap, "forked", 300) == sorted(b"row-%d" % i for i in range(300))
    cache.close()
