"""A confluent-kafka group member in its own process, so that a test can kill -9 it.

Prints one JSON line per event: {"assigned": [...]} after each rebalance and
{"offset": [partition, offset]} for each record. Exits after --seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from confluent_kafka import Consumer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--strategy", default="range")
    parser.add_argument("--instance-id", default=None)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": args.strategy,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
        "fetch.queue.backoff.ms": 1,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 200,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id

    # Eager strategies hand over the whole new assignment in on_assign and take all of it
    # back in on_revoke.
    def on_assign(_consumer: object, partitions: list[object]) -> None:
        assigned = sorted(p.partition for p in partitions)  # type: ignore[attr-defined]
        print(json.dumps({"assigned": assigned}), flush=True)

    def on_revoke(_consumer: object, _partitions: list[object]) -> None:
        print(json.dumps({"assigned": []}), flush=True)

    consumer = Consumer(config)
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            print(json.dumps({"offset": [msg.partition(), msg.offset()]}), flush=True)
    consumer.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
