"""The main job's stage times (#31): local Spark against a standalone Spark cluster, and
partita against Apache Kafka as the broker, in one run.

    .venv/bin/python benchmarks/pipeline_bench.py [--limit N] [--rounds R] [--no-kafka]

Each configuration is one ``partita pipeline`` run on a broker started for it (a fresh
``partita broker``, or Kafka 4.4 as one KRaft node, tests/kafka/real_kafka.py), reached
with ``--bootstrap-server`` so that both brokers are used the same way:

- Spark ``local[2]``, the job's default;
- a Spark standalone cluster from the installed pyspark: a master and two workers of one
  core and 2 GiB each, every process on 127.0.0.1 (``--spark-master``; partita shipped
  with the job, as on a stock cluster).

It prints each stage's seconds (produce, start Spark, Spark batch, Spark streaming; the
job's own report line), the medians over the rounds, and partita's time as a ratio to
Kafka's for each Spark placement, with the broker's CPU per flight over the job (its
start-up not counted: the broker serves the produce, both Spark reads and the result
writes); every run must pass the job's exactly-once check and
give the same fingerprints.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.spark.spark_standalone import SparkStandalone

from client_bench import broker_cpu
from partita.pipeline.local_broker import LocalBroker

ALL_FLIGHTS = 336_776
STAGES = ("produce", "start Spark", "Spark batch", "Spark streaming")
console = Console(width=120)


@contextmanager
def partita_broker(work: Path) -> Iterator[tuple[str, int]]:
    with LocalBroker(work / "data", work / "broker.log", {}) as broker:
        yield broker.bootstrap, broker.pid


@contextmanager
def kafka_broker(work: Path) -> Iterator[tuple[str, int]]:
    from tests.kafka.real_kafka import KafkaCluster, ensure_jars  # noqa: PLC0415

    ensure_jars()
    kafka = KafkaCluster(work, 1)
    kafka.start()
    try:
        (node,) = kafka.nodes
        assert node.proc is not None
        yield kafka.bootstrap, node.proc.pid
    finally:
        kafka.stop()


def run_job(work: Path, bootstrap: str, limit: int | None, master: str | None) -> dict[str, float]:
    args = [sys.executable, "-m", "partita.cli.main", "pipeline", "--work-dir", str(work),
            "--bootstrap-server", bootstrap]  # fmt: skip
    if limit:
        args += ["--limit", str(limit)]
    if master:
        args += ["--spark-master", master, "--spark-conf", "spark.executor.memory=1g"]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=1800)
    report = " ".join(done.stdout.split())
    if done.returncode != 0 or "exactly once" not in report:
        said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        raise SystemExit(f"the job failed ({done.returncode}):\n{said}")
    times = dict(
        (name.strip(), float(secs))
        for name, secs in re.findall(r"([A-Za-z ]+?) (\d+\.\d)s", report.split("time: ")[1])
    )
    fingerprints = re.search(r"results: (.*?) \(sha256", report)
    times["fingerprints"] = hash(fingerprints.group(1) if fingerprints else "")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="flights (default: all)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-kafka", action="store_true")
    options = parser.parse_args()
    brokers = {"partita": partita_broker}
    if not options.no_kafka:
        brokers["Kafka"] = kafka_broker
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        root = Path(tmp)
        spark = SparkStandalone(root / "spark", workers=2)
        spark.start()
        try:
            for number in range(options.rounds):
                order = list(brokers.items())
                if number % 2:
                    order.reverse()
                placements = (("local[2]", None), ("standalone, 2 workers", spark.master))
                for placement, master in placements:
                    for name, start in order:
                        where = "local" if master is None else "standalone"
                        work = root / f"{name}-{number}-{where}"
                        with start(work / "broker") as (bootstrap, pid):
                            before = broker_cpu(pid)  # its start-up not counted
                            times = run_job(work / "job", bootstrap, options.limit, master)
                            times["broker CPU"] = broker_cpu(pid) - before
                        results.setdefault((placement, name), []).append(times)
                        console.print(
                            f"round {number + 1}: Spark {placement}, {name}: "
                            + ", ".join(f"{s} {times.get(s, 0):.1f}s" for s in STAGES)
                            + f"; broker CPU {times['broker CPU']:.1f}s"
                        )
        finally:
            spark.stop()
    prints = {t["fingerprints"] for runs in results.values() for t in runs}
    if len(prints) != 1:
        raise SystemExit("the configurations' results differ (fingerprints)")

    flights = options.limit or ALL_FLIGHTS
    table = Table(
        title=f"partita pipeline stage times, s (median of {options.rounds}; "
        f"{flights:,} flights; same results everywhere)"
    )
    table.add_column("Spark")
    table.add_column("broker")
    for stage in (*STAGES, "total", "broker CPU µs/flight"):
        table.add_column(stage, justify="right")
    medians: dict[tuple[str, str], dict[str, float]] = {}
    for (placement, name), runs in results.items():
        med = {s: statistics.median(r.get(s, 0.0) for r in runs) for s in STAGES}
        med["total"] = sum(med.values())
        med["cpu"] = statistics.median(r["broker CPU"] for r in runs) / flights * 1e6
        medians[(placement, name)] = med
        table.add_row(
            placement, name, *(f"{med[s]:.1f}" for s in (*STAGES, "total")), f"{med['cpu']:.0f}"
        )
    for placement in dict.fromkeys(p for p, _ in results):
        ours, theirs = medians.get((placement, "partita")), medians.get((placement, "Kafka"))
        if ours and theirs:
            table.add_row(
                placement, "partita / Kafka",
                *(f"{ours[s] / theirs[s]:.2f}x" if theirs[s] else "-"
                  for s in (*STAGES, "total", "cpu")),
            )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
