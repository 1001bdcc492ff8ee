"""One chaos run: a 3-broker cluster on etcd, each member in a network namespace of its
own; the workload; the nemesis; healing; the final drain; a clean stop; the replicas'
segment files read; the checker; and what a person reads afterwards, under ``out``:

With ``txn_clients``, the transactional workload (tests/chaos/txn_workload.py) runs beside
it on a topic of its own, under the same faults, and its rules are checked too.

  history.jsonl   every event (tests/chaos/history.py)
  faults.txt      the fault timeline
  report.txt      the checker's verdict, each violation with its smallest history
  figures.md      throughput, latency and unavailability (per phase when phased)
  chaos.png       throughput, latency and leadership over time, faults shaded
  cluster/        etcd's and each broker's log (data directories removed after a pass)

``python -m tests.chaos.runner --help`` runs one by hand; scripts/chaos.sh wraps it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from partita.local.cluster import LocalCluster
from partita.local.hosts import HostLab
from tests.chaos import checker, history, stats
from tests.chaos.history import Drain, Fault, Read, Replica, Stored
from tests.chaos.nemesis import ADMIN_KINDS, KINDS, QUORUM_KINDS, Nemesis, admin_kinds_available
from tests.chaos.txn_workload import TXN_TOPIC, TxnClient, drain
from tests.chaos.workload import ConsumerClient, Prober, ProducerClient, Recorder, announced
from tests.cluster.conftest import until
from tests.cluster.faults import (
    NetnsCluster,
    checkpointed_high_watermarks,
    read_all,
    stored_records,
    tmpfs,
    watermarks,
)

TOPIC = "chaos"
DISK_BROKER = 3
# How long the transactional drain waits for the partitions' last stable offsets to reach
# their high watermarks: a transaction its client left open ends by the coordinator's
# timeout (10 s), so 40 s is generous.
TRANSACTION_PATIENCE = 40.0


@dataclass
class RunConfig:
    out: Path
    seed: int = 1
    seconds: float = 60.0  # of faults, after the warm-up
    kinds: list[str] = field(default_factory=lambda: list(KINDS))
    phases: list[tuple[str, float]] | None = None  # (kind or "none", seconds), in turn
    producers: int = 3  # idempotent
    # acks=all, no retries, one request in flight: its refusals are definite. Off by
    # default: librdkafka still sends a value again after some errors (a value of such a
    # producer was written twice when an isolated leader gave up on it), so its values
    # are at least once and break the duplicate and order rules by design.
    plain_producers: int = 0
    rate: float = 120.0  # values a second, per producer
    consumers: int = 2
    partitions: int = 6
    warmup: float = 3.0
    quiet: tuple[float, float] = (3.0, 6.0)  # between faults
    keep_data: bool = False
    txn_clients: int = 0  # transactional ids of the transactional workload (0: none)
    # Each broker on a host with an etcd member of a quorum of three (else etcd alone
    # on a host of its own): needed by the etcd-member and etcd-leader faults.
    hosts: bool = False


@dataclass
class RunResult:
    violations: list[checker.Violation]
    report: str
    figures: list[stats.Figures]
    events: list[history.Event]
    notes: list[str]
    transactions: dict[str, int] = field(default_factory=dict)  # outcome -> how many

    @property
    def ok(self) -> bool:
        return not self.violations


def run(config: RunConfig) -> RunResult:
    out = config.out
    out.mkdir(parents=True, exist_ok=True)
    base = out / "cluster"
    shutil.rmtree(base, ignore_errors=True)
    rng = random.Random(config.seed)
    rec = Recorder()
    notes: list[str] = []
    kinds = list(config.kinds)
    wanted = {k for k, _s in config.phases or []} | set(kinds)
    if wanted & set(ADMIN_KINDS) and not admin_kinds_available():
        notes.append("elect and reassign skipped: this tree's AsyncAdmin lacks them")
        kinds = [k for k in kinds if k not in ADMIN_KINDS]
    with ExitStack() as stack:
        lab = HostLab()
        stack.callback(lab.close)
        data_dirs = {}
        disk = None
        if "disk" in wanted:
            mount = stack.enter_context(tmpfs(base / f"disk-{DISK_BROKER}", 512))
            data_dirs[DISK_BROKER] = mount / "data"
            disk = (DISK_BROKER, mount)
        settings = {"min.insync.replicas": "2"}
        if config.txn_clients:
            # Fewer transaction state partitions than Kafka's 50: the coordinators still
            # move with their partitions' leaders, and 2 cores go to the workload.
            settings["transaction.state.log.num.partitions"] = "6"
        cluster: LocalCluster
        if config.hosts:
            # Three hosts, each with a broker and an etcd member: a host cut off takes
            # its member with it, and etcd's quorum can lose a member or its leader.
            cluster = LocalCluster(base, 3, settings=settings, etcd_members=3, lab=lab)
            for node, data_dir in data_dirs.items():
                cluster.broker(node).data_dir = data_dir
                cluster.broker(node).log_path = base / f"broker-{node}.log"
        else:
            cluster = NetnsCluster(base, lab, 3, settings=settings, data_dirs=data_dirs)
        stack.callback(cluster.kill)
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # Small segments: rolls happen under the faults, and a full disk bites soon (an
        # active segment keeps up to 1 MiB reserved ahead, capped at segment.bytes).
        topic = NewTopic(TOPIC, config.partitions, 3, config={"segment.bytes": "32768"})
        admin.create_topics([topic])[TOPIC].result(30)
        topics = [TOPIC]
        if config.txn_clients:
            txn_topic = NewTopic(TXN_TOPIC, config.partitions, 3, config={"segment.bytes": "32768"})
            admin.create_topics([txn_topic])[TXN_TOPIC].result(30)
            topics.append(TXN_TOPIC)
        del admin  # no client may outlive the lab: it would go on connecting
        nemesis = Nemesis(cluster, TOPIC, config.partitions, rec, rng, disk)
        until(nemesis.settled, 30, "the topic's leaders and full ISRs")

        bootstrap = cluster.bootstrap
        prober = Prober(rec, cluster.brokers, TOPIC)
        consumers = [
            ConsumerClient(rec, bootstrap, TOPIC, config.partitions, n + 1)
            for n in range(config.consumers)
        ]
        producers = [
            ProducerClient(rec, bootstrap, TOPIC, config.partitions, n + 1, config.rate)
            for n in range(config.producers)
        ] + [
            ProducerClient(
                rec, bootstrap, TOPIC, config.partitions, config.producers + n + 1,
                config.rate / 2, idempotent=False,
            )
            for n in range(config.plain_producers)
        ]  # fmt: skip
        committed_readers = [
            ConsumerClient(rec, bootstrap, TXN_TOPIC, config.partitions, 11, committed=True)
            for _ in range(1 if config.txn_clients else 0)
        ]
        txn_clients = [
            TxnClient(rec, bootstrap, config.partitions, n + 1, config.seed)
            for n in range(config.txn_clients)
        ]
        clients = [prober, *consumers, *committed_readers, *producers, *txn_clients]
        for client in clients:
            client.start()
        stack.callback(lambda: [c.stop() for c in clients])  # type: ignore[func-returns-value]
        time.sleep(config.warmup)

        if config.phases:
            for kind, seconds in config.phases:
                rec.add(Fault(rec.now(), "phase", "start", kind))
                if kind == "none":
                    time.sleep(seconds)
                else:
                    nemesis.run([kind], rec.now() + seconds, config.quiet)
        else:
            nemesis.run(kinds, rec.now() + config.seconds, config.quiet)
        rec.add(Fault(rec.now(), "phase", "start", "healed"))
        nemesis.heal_all()
        if not nemesis.settle(90):
            notes.append("the cluster did not settle (full ISRs) within 90 s of healing")
        time.sleep(2)

        for writer in [*producers, *txn_clients]:
            writer.stop()
        for p in producers:
            p.join(90)
            if p.unfinished:
                notes.append(f"producer {p.number}: {p.unfinished} sends had no outcome")
        for txn_client in txn_clients:
            txn_client.join(90)
            if txn_client.is_alive():
                notes.append(f"{txn_client.name} did not end its last transaction within 90 s")
        run_end = rec.now()
        ends = _high_watermarks(bootstrap, config.partitions)
        caught_up = _wait(
            lambda: all(c.next_offset[p] >= ends[p] for c in consumers for p in ends), 60
        )
        if not caught_up:
            notes.append(f"consumers did not reach the high watermarks {ends} within 60 s")
        for client in (prober, *consumers, *committed_readers):
            client.stop()
        for client in (prober, *consumers, *committed_readers):
            client.join(30)
        for client in [*producers, *consumers, *committed_readers, *txn_clients]:
            if client.crashed:
                notes.append(f"{client.name} died: {client.crashed}")
        fatal = [p.name for p in producers if p.incarnation]
        if fatal:
            notes.append(f"fatal producer errors, replaced: {', '.join(fatal)}")

        records = read_all(bootstrap, TOPIC, config.partitions, timeout=60)
        t = rec.now()
        for p in range(config.partitions):
            rec.add(Drain(t, p, 0, ends[p]))
            rec.events += [Read(p, o, v.decode()) for o, v in records[p]]
        if txn_clients:
            # Every transaction ended or was left to the coordinator's timeout: wait for
            # that, then read what committed.
            notes += drain(rec, bootstrap, config.partitions, TRANSACTION_PATIENCE)

        # Every broker stopped cleanly (controlled shutdowns, one at a time), then what
        # each replica holds on disk.
        replicas = {
            (topic, p): set(isr)
            for topic in topics
            for p, (_l, _e, isr) in announced(nemesis.asker(), topic, 3).items()
        }
        for broker in cluster.brokers:
            code = broker.stop(60)
            if code != 0:
                notes.append(f"broker {broker.node_id} exited {code} on SIGTERM")
        for broker in cluster.brokers:
            hws = checkpointed_high_watermarks(broker.data_dir)
            for topic in topics:
                name = "" if topic == TOPIC else topic  # "" names the plain workload's
                for p in range(config.partitions):
                    if broker.node_id not in replicas[(topic, p)]:
                        continue
                    held = stored_records(broker.data_dir, topic, p)
                    log_end = held[-1].offset + 1 if held else 0
                    rec.add(Replica(broker.node_id, p, hws.get((topic, p), 0), log_end, name))
                    rec.events += [
                        Stored(
                            broker.node_id, p, s.offset,
                            s.value.decode(errors="backslashreplace"), s.leader_epoch,
                            s.producer_id, s.sequence, name,
                        )
                        for s in held
                    ]  # fmt: skip
        cluster.stop()

    events = rec.events
    violations = checker.check(events)
    report = checker.report(events, violations)
    windows = stats.fault_windows(events, run_end)
    if config.phases:
        rows = [
            stats.figures(events, name, start, end, windows)
            for name, start, end in stats.phases(events, run_end)
            if name != "healed"
        ]
    else:
        rows = [stats.figures(events, "+".join(kinds), config.warmup, run_end, windows)]
        for kind in kinds:
            mine = [w for w in windows if w.kind == kind]
            if mine:
                rows.append(_kind_row(events, kind, mine))
    transactions = {
        status: sum(c.ended[status] for c in txn_clients) for status in TxnClient.OUTCOMES
    }
    _write(out, events, violations, report, rows, notes, config, windows, transactions)
    if not violations and not config.keep_data:
        for path in base.glob("broker-*"):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(base / "etcd", ignore_errors=True)
    return RunResult(violations, report, rows, events, notes, transactions)


def _kind_row(events: list[history.Event], kind: str, windows: list[stats.Window]) -> stats.Figures:
    """Figures over the windows of one fault kind only."""
    acks = stats.ack_times(events)
    seconds = sum(w.end - w.start for w in windows)
    acked = sum(1 for ts in acks.values() for t in ts if any(w.start <= t < w.end for w in windows))
    lat = [d for t, d in stats.latencies(events) if any(w.start <= t < w.end for w in windows)]
    gaps = [stats.unavailability(acks, w.start, w.end) for w in windows]
    sent = {
        e.value
        for e in events
        if isinstance(e, history.Send) and any(w.start <= e.t < w.end for w in windows)
    }
    outcomes = [e for e in events if isinstance(e, history.Outcome) and e.value in sent]
    return stats.Figures(
        f"  {kind}",
        seconds,
        acked / seconds if seconds else 0.0,
        stats.percentile(lat, 0.5) * 1000,
        stats.percentile(lat, 0.99) * 1000,
        len(windows),
        sum(gaps) / len(gaps),
        max(gaps),
        sum(1 for e in outcomes if e.status == history.UNKNOWN),
        sum(1 for e in outcomes if e.status == history.FAILED),
    )


def _wait(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def _high_watermarks(bootstrap: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-ends"})
    try:
        return {p: watermarks(consumer, TopicPartition(TOPIC, p))[1] for p in range(partitions)}
    finally:
        consumer.close()


def _write(
    out: Path,
    events: list[history.Event],
    violations: list[checker.Violation],
    report: str,
    rows: list[stats.Figures],
    notes: list[str],
    config: RunConfig,
    windows: list[stats.Window],
    transactions: dict[str, int],
) -> None:
    history.write(out / "history.jsonl", events)
    with open(out / "faults.txt", "w") as f:
        for e in events:
            if isinstance(e, Fault):
                f.write(f"{e.t:9.3f}  {e.fault:<10} {e.phase:<8} {e.target:<14} {e.detail}\n")
    (out / "report.txt").write_text(report + "\n" + "".join(f"note: {n}\n" for n in notes))
    figures = stats.table(rows) + "\n"
    if transactions:
        figures += f"\ntransactions: {transactions_line(transactions)}\n"
    (out / "figures.md").write_text(figures)
    summary = {
        "seed": config.seed,
        "kinds": config.kinds,
        "phases": config.phases,
        "violations": len(violations),
        "by_rule": {r: sum(1 for v in violations if v.rule == r) for r in checker.RULES},
        "notes": notes,
        "figures": [asdict(r) for r in rows],
        "faults": len(windows),
        "transactions": transactions,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    try:
        from tests.chaos.plot import plot  # noqa: PLC0415

        plot(events, out / "chaos.png", f"seed {config.seed}")
    except ImportError as exc:  # matplotlib is a dev extra
        notes.append(f"no plot: {exc}")


def transactions_line(transactions: dict[str, int]) -> str:
    return ", ".join(f"{count} {status}" for status, count in transactions.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One chaos run against a local cluster.")
    parser.add_argument("--minutes", type=float, default=5.0, help="of faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("var/chaos/run"))
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"from {','.join(KINDS)}")
    parser.add_argument("--rate", type=float, default=120.0, help="per producer, values/s")
    parser.add_argument(
        "--phases",
        default="",
        help="KIND:SECONDS,... run each kind alone in turn ('none' for no faults)",
    )
    parser.add_argument(
        "--txn-clients", type=int, default=2, help="transactional ids writing beside (0: none)"
    )
    parser.add_argument(
        "--hosts",
        action="store_true",
        help="a broker and an etcd member (of three) on each host: adds the "
        f"{' and '.join(QUORUM_KINDS)} faults to the default kinds",
    )
    parser.add_argument("--keep-data", action="store_true")
    args = parser.parse_args(argv)
    if args.hosts and args.kinds == ",".join(KINDS):
        args.kinds = ",".join((*KINDS, *QUORUM_KINDS))
    phases = None
    if args.phases:
        phases = [(k, float(s)) for k, _, s in (p.partition(":") for p in args.phases.split(","))]
    config = RunConfig(
        args.out.resolve(),
        args.seed,
        args.minutes * 60,
        [k for k in args.kinds.split(",") if k],
        phases,
        rate=args.rate,
        keep_data=args.keep_data,
        txn_clients=args.txn_clients,
        hosts=args.hosts,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the lab on SIGTERM
    started = time.monotonic()
    result = run(config)
    print(result.report)
    for note in result.notes:
        print(f"note: {note}")
    print(stats.table(result.figures))
    if result.transactions:
        print(f"transactions: {transactions_line(result.transactions)}")
    print(f"{len(result.events)} events in {time.monotonic() - started:.0f} s; see {args.out}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
