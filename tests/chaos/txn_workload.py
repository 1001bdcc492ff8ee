"""The transactional chaos workload (issue 29): librdkafka transactional clients that
each, in one transaction, read a few committed values (read_committed) and write one to
four values to random partitions, then commit, or now and then abort on purpose; and the
read_committed drain at the end. Everything lands in the Recorder (tests/chaos/history.py)
for tests/chaos/txn_checker.py.

A transactional id is one client's for the whole run: when its producer fails fatally
(fenced after its coordinator timed the transaction out, say), a new producer with the
same id takes over, and its init_transactions fences the old one and ends what it left
open, as a restarted application would.
"""

from __future__ import annotations

import random
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.chaos.history import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    CommittedDrain,
    CommittedRead,
    TxnEnd,
    TxnSaw,
    TxnSend,
    transaction_name,
)
from tests.chaos.workload import Client, Recorder

TXN_TOPIC = "chaos-txn"
TRANSACTION_TIMEOUT_MS = 10_000
END_PATIENCE = 60.0  # seconds a commit or an abort is asked again while retriable


class TxnClient(Client):
    """One transactional id: read, write, commit (or abort ``abort_share`` of the time)."""

    OUTCOMES = (COMMITTED, ABORTED, UNKNOWN)

    def __init__(
        self,
        recorder: Recorder,
        bootstrap: str,
        partitions: int,
        number: int,
        seed: int,
        abort_share: float = 0.2,
        pause: float = 0.02,
    ) -> None:
        super().__init__(f"txn-{number}")
        self.recorder = recorder
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.number = number
        self.rng = random.Random(seed * 1000 + number)
        self.abort_share = abort_share
        self.pause = pause
        self.ended = dict.fromkeys(self.OUTCOMES, 0)
        self.producers = 0  # incarnations: a new producer after each fatal error
        self._producer: Producer | None = None

    def _new_producer(self) -> Producer:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "transactional.id": f"chaos-txn-{self.number}",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "topic.metadata.refresh.interval.ms": 5000,
            "log_level": 3,
        }
        self.producers += 1
        producer = Producer(config)
        deadline = time.monotonic() + END_PATIENCE
        while True:
            try:
                producer.init_transactions(10)
                return producer
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if self.stopping.is_set() or time.monotonic() > deadline or not error.retriable():
                    raise
                time.sleep(0.2)

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"chaos-txn-reader-{self.number}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 50,
                "log_level": 3,
            }
        )
        consumer.assign([TopicPartition(TXN_TOPIC, p, 0) for p in range(self.partitions)])
        number = 0
        try:
            while not self.stopping.is_set():
                if self._producer is None:
                    try:
                        self._producer = self._new_producer()
                    except KafkaException:
                        time.sleep(0.5)  # the cluster is not there yet: try again
                        continue
                number += 1
                self._transaction(transaction_name(self.number, number), consumer)
                time.sleep(self.pause)
        finally:
            consumer.close()
            # No client may outlive the lab (it would go on connecting): let go of it.
            self._producer = None

    def _transaction(self, txn: str, consumer: Consumer) -> None:
        rec, producer = self.recorder, self._producer
        assert producer is not None
        try:
            producer.begin_transaction()
            for m in consumer.consume(50, 0.02):
                if not m.error():
                    value = m.value().decode()
                    rec.add(TxnSaw(rec.now(), txn, m.partition(), m.offset(), value))
            for i in range(self.rng.randint(1, 4)):
                partition = self.rng.randrange(self.partitions)
                value = f"{txn}-{i}"
                rec.add(TxnSend(rec.now(), txn, value, partition))
                producer.produce(TXN_TOPIC, value=value.encode(), partition=partition)
            # The values reach their partitions before the transaction ends, so an abort
            # has something to abort (abort_transaction drops what is still queued) and
            # a reader has a window in which to see what it must not.
            producer.flush(10)
        except (KafkaException, BufferError) as exc:
            self._end(txn, commit=False, error=_name(exc))
            return
        self._end(txn, commit=self.rng.random() >= self.abort_share)

    def _end(self, txn: str, commit: bool, error: str = "") -> None:
        """Commit (or abort) and record how it ended. A retriable error is asked again;
        an abortable one aborts; a fatal one leaves the outcome unknown and the producer
        replaced."""
        rec, producer = self.recorder, self._producer
        assert producer is not None
        asked = -1.0
        deadline = time.monotonic() + END_PATIENCE
        while commit:
            if asked < 0:
                asked = rec.now()
            try:
                producer.commit_transaction(10)
                self._record(TxnEnd(rec.now(), txn, COMMITTED, asked))
                return
            except KafkaException as exc:
                failure: KafkaError = exc.args[0]
                error = failure.name()
                if failure.txn_requires_abort():
                    break
                if failure.fatal() or not failure.retriable() or time.monotonic() > deadline:
                    self._lost(txn, asked, error)
                    return
        while True:
            try:
                producer.abort_transaction(10)
                self._record(TxnEnd(rec.now(), txn, ABORTED, asked, error))
                return
            except KafkaException as exc:
                failure = exc.args[0]
                error = failure.name()
                if failure.fatal() or not failure.retriable() or time.monotonic() > deadline:
                    self._lost(txn, asked, error)
                    return

    def _lost(self, txn: str, asked: float, error: str) -> None:
        self._record(TxnEnd(self.recorder.now(), txn, UNKNOWN, asked, error))
        self._producer = None  # a fatal error: a new producer with the same id fences this

    def _record(self, end: TxnEnd) -> None:
        self.recorder.add(end)
        self.ended[end.status] += 1


def _name(exc: Exception) -> str:
    if isinstance(exc, KafkaException):
        return str(exc.args[0].name())
    return type(exc).__name__


def stable_and_end(bootstrap: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (last stable offset, high watermark): ListOffsets under each isolation."""
    found: dict[str, dict[int, int]] = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "chaos-ends", "isolation.level": isolation}
        )
        try:
            found[isolation] = {
                p: consumer.get_watermark_offsets(TopicPartition(TXN_TOPIC, p), timeout=10)[1]
                for p in range(partitions)
            }
        finally:
            consumer.close()
    stable, end = found["read_committed"], found["read_uncommitted"]
    return {p: (stable[p], end[p]) for p in range(partitions)}


def drain(recorder: Recorder, bootstrap: str, partitions: int, patience: float) -> list[str]:
    """Waits (up to ``patience`` s) for every partition's last stable offset to reach its
    high watermark, then reads every committed record: CommittedDrain and CommittedRead
    events. Returns notes for the run's report."""
    notes = []
    deadline = time.monotonic() + patience
    ends = stable_and_end(bootstrap, partitions)
    while any(s != e for s, e in ends.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        ends = stable_and_end(bootstrap, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-txn-drain",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    t = recorder.now()
    read: list[CommittedRead] = []
    try:
        consumer.assign([TopicPartition(TXN_TOPIC, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(m.partition())
                    continue
                read.append(CommittedRead(m.partition(), m.offset(), m.value().decode()))
        if len(at_end) < partitions:
            notes.append(f"the read_committed drain reached the end of {sorted(at_end)} only")
    finally:
        consumer.close()
    for p, (stable, end) in ends.items():
        recorder.add(CommittedDrain(t, p, stable, end))
    recorder.events += read
    return notes
