"""The main job's preparation of a cluster it did not start (pipeline/external.py),
against a real broker: which topics it makes, which it reuses, and where this run's
records will start."""

from __future__ import annotations

import asyncio

import pytest

from partita.pipeline.external import ExternalClusterError, prepare
from tests.integration.clients import create_topic, produce
from tests.integration.conftest import BrokerProcess

TOPICS = {"flights": 3, "flights-report": -1, "flights-hourly": -1}


def test_reuse_names_exactly_the_topics_that_existed(broker: BrokerProcess) -> None:
    # Only an output topic is left from before: the input is created, the output kept,
    # and the report must say which is which (it said all three were created).
    create_topic(broker.bootstrap, "flights-report")
    with pytest.raises(ExternalClusterError, match="'flights-report' already exists"):
        asyncio.run(prepare(broker.bootstrap, TOPICS, None, {}))
    prepared = asyncio.run(prepare(broker.bootstrap, TOPICS, None, {}, reuse=True))
    assert prepared.reused == ["flights-report"]
    assert (prepared.partitions, prepared.start) == (3, {})


def test_reuse_starts_this_run_where_the_input_ended(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "flights", partitions=2)
    produce(broker.bootstrap, "flights", [{"value": b"x", "partition": 1}] * 5)
    prepared = asyncio.run(prepare(broker.bootstrap, TOPICS, None, {}, reuse=True))
    assert prepared.reused == ["flights"]
    assert (prepared.partitions, prepared.start) == (2, {0: 0, 1: 5})
