"""The broker's Prometheus endpoint, scraped after real clients worked against it."""

from __future__ import annotations

import re
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.clients import consume_all, create_topic, produce
from tests.integration.conftest import BrokerProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_port(broker: BrokerProcess) -> int:
    found = re.search(r"metrics listening.*\bport=(\d+)", broker.logs())
    assert found, f"no 'metrics listening' line in the broker log:\n{broker.logs()}"
    return int(found.group(1))


def scrape(port: int, path: str = "/metrics") -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def metered(broker_factory: Any) -> BrokerProcess:
    process: BrokerProcess = broker_factory(extra_args=["--metrics-listen", "127.0.0.1:0"])
    process.start()
    return process


def test_metrics_count_what_clients_did(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    create_topic(metered.bootstrap, "m", partitions=2)
    produce(metered.bootstrap, "m", [{"value": b"x" * 100, "partition": i % 2} for i in range(50)])
    assert len(consume_all(metered.bootstrap, "m", [0, 1], 50)) == 50

    create_topic(metered.bootstrap, "small", 1, **{"max.message.bytes": "200"})
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": metered.bootstrap, "retries": 0})
    producer.produce("small", b"y" * 1000, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert [e.code() for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE]

    samples = scrape(port)
    assert value(samples, "partita_messages_in_total", topic="m") == 50
    stored = sum(value(samples, "partita_log_size_bytes", topic="m", partition=p) for p in "01")
    assert value(samples, "partita_bytes_in_total", topic="m") == stored > 50 * 100
    assert value(samples, "partita_bytes_out_total", topic="m") >= stored  # all read once
    for p in "01":
        assert value(samples, "partita_log_end_offset", topic="m", partition=p) == 25
        assert value(samples, "partita_high_watermark", topic="m", partition=p) == 25
        assert value(samples, "partita_log_start_offset", topic="m", partition=p) == 0
    assert value(samples, "partita_log_end_offset", topic="small", partition="0") == 0
    refused = value(
        samples,
        "partita_failed_produce_partitions_total",
        topic="small",
        error="MESSAGE_SIZE_TOO_LARGE",
    )
    assert refused >= 1  # librdkafka may retry it once on its own
    for api in ("Produce", "Fetch", "Metadata", "CreateTopics"):
        answered = value(samples, "partita_requests_total", request=api)
        assert answered >= 1
        assert value(samples, "partita_request_seconds_count", request=api) == answered
    assert value(samples, "partita_partitions") >= 3
    assert value(samples, "partita_offline_partitions") == 0


def test_metrics_endpoint_refuses_other_paths_and_garbage(metered: BrokerProcess) -> None:
    port = metrics_port(metered)
    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape(port, "/admin")
    assert refused.value.code == 404
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"\x00\xffnot http at all\r\n\r\n")
        assert raw.recv(64).startswith(b"HTTP/1.1 404")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(b"GET /metrics HTTP/1.1\r\n" + b"x" * 20_000)  # a head that never ends
        assert raw.recv(64) == b""  # closed, answered with nothing
    assert value(scrape(port), "partita_offline_partitions") == 0  # still serving
    assert metered.proc is not None and metered.proc.poll() is None


def test_a_taken_metrics_port_is_one_clear_error(broker_factory: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process: BrokerProcess = broker_factory(
            extra_args=["--metrics-listen", f"127.0.0.1:{port}"]
        )
        with pytest.raises(RuntimeError, match="broker exited with 1"):
            process.start()
    assert f"cannot serve metrics on 127.0.0.1:{port}" in process.logs()
