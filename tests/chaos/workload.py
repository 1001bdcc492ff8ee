"""The chaos workload: producers writing unique values, consumers recording every poll,
and a prober recording who each broker says leads what. All of it lands in a Recorder as
history events (tests/chaos/history.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from partita.local.cluster import BrokerNode
from tests.chaos.history import (
    FAILED,
    OK,
    UNKNOWN,
    Assign,
    CommittedPoll,
    ConsumerError,
    Event,
    LeaderSeen,
    Outcome,
    Poll,
    Send,
    value_of,
)
from tests.cluster.conftest import request

# Errors that say the send was refused before anything was appended, and that a producer
# sending each value once (retries=0) can trust. Anything else (a timeout,
# NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER of an acks=all wait, a lost
# connection, a storage error) leaves the value's fate unknown.
DEFINITE_ONE_TRY = {
    "NOT_ENOUGH_REPLICAS",
    "MSG_SIZE_TOO_LARGE",
    "INVALID_RECORD",
    "CORRUPT_MESSAGE",
    "UNKNOWN_TOPIC_OR_PART",
    "INVALID_REQUIRED_ACKS",
    "RECORD_LIST_TOO_LARGE",
    "TOPIC_AUTHORIZATION_FAILED",
    "INVALID_TOPIC_EXCEPTION",
}
# Errors the client raises for a message it never sent.
NEVER_SENT = {"_PURGE_QUEUE", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC", "_QUEUE_FULL"}


def classify(error: str, retries: bool) -> str:
    """FAILED only when nothing can have been appended; UNKNOWN otherwise. A client that
    retries reports only its last attempt's error, and an earlier attempt may have been
    appended, so only errors of messages never sent are definite for it."""
    if error in NEVER_SENT or (not retries and error in DEFINITE_ONE_TRY):
        return FAILED
    return UNKNOWN


class Recorder:
    """The history, in the order events happened (list.append is atomic)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.events: list[Event] = []

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def add(self, event: Event) -> None:
        self.events.append(event)


class Client(threading.Thread):
    """A workload thread: ``_run`` until ``stop()``; an exception it dies of is kept in
    ``crashed`` (the history must say a client died, not stop quietly)."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.stopping = threading.Event()
        self.crashed = ""

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.crashed = f"{type(exc).__name__}: {exc}"
            raise

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()


class ProducerClient(Client):
    """Writes ``rate`` values a second round-robin over the partitions. ``idempotent``:
    acks=all with idempotence and retries (the workload's producers); otherwise acks=all,
    no retries and one request in flight, so that a refusal is a definite failure."""

    def __init__(
        self,
        recorder: Recorder,
        bootstrap: str,
        topic: str,
        partitions: int,
        number: int,
        rate: float,
        idempotent: bool = True,
    ) -> None:
        super().__init__(f"producer-{number}")
        self.recorder = recorder
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.number = number
        self.rate = rate
        self.idempotent = idempotent
        self.fatal = threading.Event()
        self.incarnation = 0
        self.sent = 0
        self.unfinished = 0

    @property
    def producer_number(self) -> int:
        # A replaced client (fatal error) writes as a new producer: one send order each.
        return self.number + 100 * self.incarnation

    def _client(self) -> Producer:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 10_000,
            "message.timeout.ms": 45_000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 5000,
            "error_cb": self._on_error,
            "log_level": 3,
        }
        if self.idempotent:
            config["enable.idempotence"] = True
        else:
            config.update({"retries": 0, "max.in.flight.requests.per.connection": 1})
        return Producer(config)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.set()

    def _callback(self, value: str, partition: int) -> Callable[[Any, Any], None]:
        recorder = self.recorder

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                # librdkafka can report a retried value delivered without its offset (it
                # knows a later sequence was acknowledged): -1, acknowledged at no known offset.
                offset = msg.offset()
                recorder.add(
                    Outcome(recorder.now(), value, partition, OK, -1 if offset is None else offset)
                )
            else:
                status = classify(err.name(), self.idempotent)
                recorder.add(Outcome(recorder.now(), value, partition, status, -1, err.name()))

        return delivered

    def _run(self) -> None:
        producer = self._client()
        start = time.monotonic()
        seq = 0
        while not self.stopping.is_set():
            if self.fatal.is_set():
                # A fatal idempotence error ends this client: what it had in flight gets
                # its outcome, and a new client (a new producer number) takes over.
                producer.purge()
                producer.flush(5)
                self.incarnation += 1
                seq = 0
                self.fatal.clear()
                producer = self._client()
            due = int(self.rate * (time.monotonic() - start))
            while self.sent < due and not self.stopping.is_set() and not self.fatal.is_set():
                partition = (self.sent + self.number) % self.partitions
                value = value_of(self.producer_number, seq)
                seq += 1
                self.sent += 1
                self.recorder.add(Send(self.recorder.now(), value, partition))
                try:
                    producer.produce(
                        self.topic,
                        value=value.encode(),
                        partition=partition,
                        on_delivery=self._callback(value, partition),
                    )
                except BufferError:
                    now = self.recorder.now()
                    self.recorder.add(Outcome(now, value, partition, FAILED, -1, "_QUEUE_FULL"))
                except KafkaException as exc:  # refused before it was queued: never sent
                    error = exc.args[0]
                    now = self.recorder.now()
                    self.recorder.add(Outcome(now, value, partition, FAILED, -1, error.name()))
                    if error.fatal():
                        self.fatal.set()
            try:
                producer.poll(0.005)
            except KafkaException as exc:
                if exc.args[0].fatal():
                    self.fatal.set()
        # Every value sent gets its outcome: delivered or timed out within message.timeout.
        self.unfinished = producer.flush(60)
        if self.unfinished:
            producer.purge()
            producer.flush(5)


class ConsumerClient(Client):
    """assign()s every partition from offset 0 and records every record polled: as Poll
    events, or, ``committed`` (the transactional workload's topic, read_committed), as
    CommittedPoll events."""

    def __init__(
        self,
        recorder: Recorder,
        bootstrap: str,
        topic: str,
        partitions: int,
        number: int,
        committed: bool = False,
    ) -> None:
        super().__init__(f"consumer-{number}")
        self.recorder = recorder
        self.topic = topic
        self.partitions = partitions
        self.number = number
        self.next_offset = dict.fromkeys(range(partitions), 0)
        self.committed = committed
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chaos-consumer-{number}",
                "isolation.level": "read_committed",  # librdkafka's default, said
                "enable.auto.commit": False,
                # An out-of-range position is an error we see, not a silent jump.
                "auto.offset.reset": "error",
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 5000,
                "log_level": 3,
            }
        )

    def _run(self) -> None:
        rec = self.recorder
        self.consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        for p in range(self.partitions):
            if not self.committed:
                rec.add(Assign(rec.now(), self.number, p, 0))
        try:
            while not self.stopping.is_set():
                messages = self.consumer.consume(500, 0.2)
                hws: dict[int, int] = {}
                for m in messages:
                    p = m.partition()
                    if m.error():
                        part = -1 if p is None else p
                        rec.add(ConsumerError(rec.now(), self.number, part, m.error().name()))
                        if p is not None and p >= 0 and not m.error().retriable():
                            # Pick up again where we were: a jump would hide what happened.
                            at = TopicPartition(self.topic, p, self.next_offset[p])
                            try:
                                self.consumer.seek(at)
                            except KafkaException as exc:
                                rec.add(ConsumerError(rec.now(), self.number, p, str(exc)))
                        continue
                    if self.committed:
                        value = m.value().decode()
                        rec.add(CommittedPoll(rec.now(), self.number, p, m.offset(), value))
                        self.next_offset[p] = m.offset() + 1
                        continue
                    if p not in hws:
                        high = self.consumer.get_watermark_offsets(
                            TopicPartition(self.topic, p), cached=True
                        )
                        hws[p] = high[1] if high and high[1] >= 0 else -1
                    epoch = m.leader_epoch()
                    rec.add(
                        Poll(
                            rec.now(), self.number, p, m.offset(), m.value().decode(),
                            -1 if epoch is None else epoch, hws[p],
                        )
                    )  # fmt: skip
                    self.next_offset[p] = m.offset() + 1
        finally:
            self.consumer.close()


def announced(broker: BrokerNode, topic: str, timeout: float = 1.0) -> dict[int, Any]:
    """partition -> (leader, leader epoch, isr) as ``broker`` answers Metadata."""
    req = MetadataRequest(
        version=12,
        topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name=topic)],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    response = request(broker, req, MetadataResponse, timeout=timeout)
    entry = next(t for t in response.topics if t.name == topic)
    return {
        p.partition_index: (p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes)))
        for p in entry.partitions
    }


class Prober(Client):
    """Asks every running broker for the topic's leaders twice a second."""

    def __init__(self, recorder: Recorder, brokers: list[BrokerNode], topic: str) -> None:
        super().__init__("prober")
        self.recorder = recorder
        self.brokers = brokers
        self.topic = topic

    def _run(self) -> None:
        while not self.stopping.wait(0.5):
            for broker in self.brokers:
                if not broker.alive:
                    continue
                try:
                    seen = announced(broker, self.topic)
                except Exception:  # a broker paused, cut off or starting: ask later
                    continue
                t = self.recorder.now()
                for p, (leader, epoch, isr) in seen.items():
                    self.recorder.add(LeaderSeen(t, broker.node_id, p, leader, epoch, isr))
