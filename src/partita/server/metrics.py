"""Broker metrics in Prometheus' text format, served at ``GET /metrics``.

The names follow Kafka's MBeans where one exists, so dashboards map one to one:
``partita_requests_total`` / ``partita_request_seconds`` are RequestMetrics'
RequestsPerSec and TotalTimeMs, ``partita_messages_in_total`` / ``partita_bytes_in_total``
/ ``partita_bytes_out_total`` are BrokerTopicMetrics' MessagesInPerSec, BytesInPerSec and
BytesOutPerSec, and the ``partita_log_*`` gauges are kafka.log:type=Log's Size,
LogStartOffset and LogEndOffset.

Counters move on the request path, once per request or per partition appended or
fetched, never per record. Gauges are read from the broker's state only when scraped;
the endpoint runs on the broker's event loop, so the state it reads never changes under
it and nothing needs a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import kafka.errors
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from partita.protocol.api import ApiKey

if TYPE_CHECKING:
    from prometheus_client.metrics import Counter as CounterChild
    from prometheus_client.metrics import Histogram as HistogramChild

    from partita.cluster.store import MetadataStore
    from partita.coordinator.group_machine import Group
    from partita.server.partition import Partition

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# From a cached metadata answer to a produce that waits for a slow disk.
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # fmt: skip
_MAX_REQUEST_HEAD = 8192


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name.title().replace("_", "")
    except ValueError:
        return str(api_key)


class BrokerMetrics:
    """The broker's counters, and a collector that reads its state when scraped."""

    def __init__(self, store: MetadataStore) -> None:
        # A registry of its own: several brokers in one process (tests) never share one.
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "partita_requests",
            "Requests answered, by API (Kafka: RequestMetrics RequestsPerSec).",
            ["request"],
            registry=self.registry,
        )
        self._throttle_seconds = Counter(
            "partita_quota_throttle_seconds",
            "Time clients were told to wait for being over a quota, by API (Kafka: the "
            "throttle-time of its Produce/Fetch/Request quota sensors).",
            ["request"],
            registry=self.registry,
        )
        self._request_seconds = Histogram(
            "partita_request_seconds",
            "Time from a request's arrival to its response, by API, waits included "
            "(Kafka: RequestMetrics TotalTimeMs).",
            ["request"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self._messages_in = Counter(
            "partita_messages_in",
            "Records appended by producers, by topic (Kafka: MessagesInPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self._bytes_in = Counter(
            "partita_bytes_in",
            "Record batch bytes appended by producers, by topic (Kafka: BytesInPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self._bytes_out = Counter(
            "partita_bytes_out",
            "Record batch bytes sent to fetchers, by topic (Kafka: BytesOutPerSec).",
            ["topic"],
            registry=self.registry,
        )
        self._failed_produce = Counter(
            "partita_failed_produce_partitions",
            "Partitions of produce requests refused, by topic and Kafka error "
            "(Kafka: FailedProduceRequestsPerSec).",
            ["topic", "error"],
            registry=self.registry,
        )
        self._isr_changes = Counter(
            "partita_isr_changes",
            "ISR changes this broker made as a leader, by kind: shrink or expand "
            "(Kafka: IsrShrinksPerSec, IsrExpandsPerSec).",
            ["kind"],
            registry=self.registry,
        )
        self._store = store
        # Children looked up once: labels() takes a lock and builds a tuple every call.
        self._per_api: dict[int, tuple[CounterChild, HistogramChild]] = {}
        self._per_topic_in: dict[str, tuple[CounterChild, CounterChild]] = {}
        self._per_topic_out: dict[str, CounterChild] = {}

    def request_answered(self, api_key: int, seconds: float) -> None:
        children = self._per_api.get(api_key)
        if children is None:
            name = _api_name(api_key)
            children = self._requests.labels(name), self._request_seconds.labels(name)
            self._per_api[api_key] = children
        children[0].inc()
        children[1].observe(seconds)

    def throttled(self, api_key: int, throttle_ms: int) -> None:
        self._throttle_seconds.labels(_api_name(api_key)).inc(throttle_ms / 1000)

    def appended(self, topic: str, messages: int, size: int) -> None:
        children = self._per_topic_in.get(topic)
        if children is None:
            children = self._messages_in.labels(topic), self._bytes_in.labels(topic)
            self._per_topic_in[topic] = children
        children[0].inc(messages)
        children[1].inc(size)

    def produce_refused(self, topic: str, error_code: int) -> None:
        """Labelled by Kafka's name for the error, e.g. NOT_ENOUGH_REPLICAS. Names of
        topics that do not exist are not labels: a client could make up endless ones."""
        if topic not in self._store.topics:
            topic = "(unknown)"
        self._failed_produce.labels(topic, kafka.errors.for_code(error_code).message).inc()

    def fetched(self, topic: str, size: int) -> None:
        child = self._per_topic_out.get(topic)
        if child is None:
            child = self._per_topic_out[topic] = self._bytes_out.labels(topic)
        child.inc(size)

    def isr_changed(self, before: int, after: int) -> None:
        if after != before:
            self._isr_changes.labels("shrink" if after < before else "expand").inc()

    def track_state(
        self, partitions: Mapping[tuple[str, int], Partition], groups: Mapping[str, Group]
    ) -> None:
        """Report these partitions' and groups' state as gauges, read when scraped."""
        self.registry.register(_BrokerStateCollector(partitions, groups))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _BrokerStateCollector(Collector):
    def __init__(
        self, partitions: Mapping[tuple[str, int], Partition], groups: Mapping[str, Group]
    ) -> None:
        self.partitions = partitions
        self.groups = groups

    def collect(self) -> Iterator[Metric]:
        partitions = GaugeMetricFamily(
            "partita_partitions", "Partitions this broker holds (Kafka: PartitionCount)."
        )
        offline = GaugeMetricFamily(
            "partita_offline_partitions",
            "Partitions taken offline by a storage error; they refuse reads and writes "
            "until the broker restarts (Kafka: OfflinePartitionsCount).",
        )
        labels = ["topic", "partition"]
        size = GaugeMetricFamily(
            "partita_log_size_bytes",
            "Bytes of the partition's segments (Kafka: Size).",
            labels=labels,
        )
        start = GaugeMetricFamily(
            "partita_log_start_offset",
            "First offset still in the log (Kafka: LogStartOffset).",
            labels=labels,
        )
        end = GaugeMetricFamily(
            "partita_log_end_offset",
            "Offset the next record gets (Kafka: LogEndOffset).",
            labels=labels,
        )
        high = GaugeMetricFamily(
            "partita_high_watermark", "Offsets below it are readable by consumers.", labels=labels
        )
        leaders = GaugeMetricFamily(
            "partita_leader_partitions", "Partitions this broker leads (Kafka: LeaderCount)."
        )
        under = GaugeMetricFamily(
            "partita_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set "
            "(Kafka: UnderReplicatedPartitions).",
        )
        lag = GaugeMetricFamily(
            "partita_follower_lag_records",
            "Records a follower is behind this leader's log end, by partition and replica "
            "(Kafka: ReplicaFetcherManager MaxLag, seen from the leader).",
            labels=["topic", "partition", "replica"],
        )
        held = list(self.partitions.items())
        partitions.add_metric([], len(held))
        led = [(key, p) for key, p in held if p.is_leader]
        leaders.add_metric([], len(led))
        under.add_metric([], sum(1 for _k, p in led if len(p.isr) < len(p.replicas)))
        for (topic, index), partition in led:
            if partition.progress is None:
                continue
            leo = partition.log.log_end_offset
            for replica, follower in sorted(partition.progress.followers.items()):
                behind = leo - follower.log_end_offset if follower.log_end_offset >= 0 else leo
                lag.add_metric([topic, str(index), str(replica)], behind)
        offline.add_metric([], sum(1 for _k, p in held if p.log.offline_reason is not None))
        for (topic, index), partition in held:
            plog = partition.log
            key = [topic, str(index)]
            size.add_metric(key, plog.size_bytes)
            start.add_metric(key, plog.log_start_offset)
            end.add_metric(key, plog.log_end_offset)
            high.add_metric(key, plog.high_watermark)
        groups = GaugeMetricFamily(
            "partita_consumer_groups",
            "Consumer groups known to the coordinator, by state.",
            labels=["state"],
        )
        members = GaugeMetricFamily(
            "partita_consumer_group_members", "Members of all consumer groups."
        )
        by_state: dict[str, int] = {}
        member_count = 0
        for group in self.groups.values():
            by_state[group.state.value] = by_state.get(group.state.value, 0) + 1
            member_count += len(group.members)
        for state, count in sorted(by_state.items()):
            groups.add_metric([state], count)
        members.add_metric([], member_count)
        yield from (partitions, offline, size, start, end, high, groups, members)
        yield from (leaders, under, lag)


async def serve_metrics(metrics: BrokerMetrics, host: str, port: int) -> asyncio.Server:
    """An HTTP endpoint for Prometheus: ``GET /metrics``; anything else gets a 404."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                head = await reader.readuntil(b"\r\n\r\n")
            request_line = head.split(b"\r\n", 1)[0]  # the stream limit capped the head
            method, _, rest = request_line.partition(b" ")
            path = rest.partition(b" ")[0].split(b"?", 1)[0]
            if method in (b"GET", b"HEAD") and path in (b"/metrics", b"/"):
                body = metrics.exposition()
                status = b"200 OK"
                kind = CONTENT_TYPE.encode()
            else:
                body, status, kind = b"not found: GET /metrics\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n"
                + (b"" if method == b"HEAD" else body)
            )  # fmt: skip
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that sent no whole request head gets nothing
        except ConnectionError:
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.start_server(answer, host, port, limit=_MAX_REQUEST_HEAD)
