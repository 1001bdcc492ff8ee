"""A consume-transform-produce worker (librdkafka), run as its own process by
tests/cluster/test_transactions_cluster.py so that it can be killed with SIGKILL.

    python ctp_worker.py BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID [PER_TXN] [PAUSE_S]

Reads SOURCE as a member of GROUP (read_committed), writes "out-<value>" to SINK and
commits the input offsets in the same transaction, up to PER_TXN records at a time (100),
pausing PAUSE_S seconds after each (0: a test slows it to kill things mid-way), until it
has consumed every partition of SOURCE to its end; then exits 0. After each commit it
prints "committed N" (records committed by this worker so far). An abortable error
aborts the transaction and rewinds to the group's committed offsets; a fatal one (this
worker was fenced) exits 3.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> int:
    bootstrap, source, sink, group, tid = sys.argv[1:6]
    per_txn = int(sys.argv[6]) if len(sys.argv) > 6 else 100
    pause = float(sys.argv[7]) if len(sys.argv) > 7 else 0.0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 2})
    producer.init_transactions(60)
    partitions = consumer.list_topics(source, timeout=30).topics[source].partitions
    tps = [TopicPartition(source, p) for p in sorted(partitions)]
    consumer.assign(tps)
    ends = {tp.partition: consumer.get_watermark_offsets(tp, 30)[1] for tp in tps}
    deadline = time.monotonic() + 240
    report = time.monotonic() + 5
    done = 0  # records this worker committed
    while time.monotonic() < deadline:
        messages = [m for m in consumer.consume(per_txn, 0.5) if not m.error()]
        if not messages:
            positions = consumer.position(tps)
            committed = {tp.partition: tp.offset for tp in consumer.committed(tps, 30)}
            at = {tp.partition: tp.offset for tp in positions}
            # Done when the group committed every input record (the position stays
            # unknown on a partition whose committed offset is already its end).
            if all(committed[p] >= end for p, end in ends.items()):
                return 0
            if time.monotonic() > report:
                print(f"waiting: ends {ends} committed {committed} at {at}", file=sys.stderr)
                report = time.monotonic() + 5
            continue
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(tps), consumer.consumer_group_metadata(), 60
            )
            producer.commit_transaction(60)
            done += len(messages)
            print(f"committed {done}", flush=True)  # the test paces its faults by this
            time.sleep(pause)
        except KafkaException as exc:
            error = exc.args[0]
            print(f"transaction failed: {error}", file=sys.stderr)
            if error.fatal():
                print(f"fenced: {error}", file=sys.stderr)
                return 3
            if error.txn_requires_abort():
                producer.abort_transaction(60)
            elif error.retriable():
                try:
                    producer.commit_transaction(60)
                    continue
                except KafkaException:
                    producer.abort_transaction(60)
            # Back to what the group committed: the aborted records are read again.
            for tp in consumer.committed(tps, 30):
                consumer.seek(TopicPartition(source, tp.partition, max(tp.offset, 0)))
    print("did not finish in 240 s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
