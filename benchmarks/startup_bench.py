"""Start-up benchmark: how long a fresh process takes to read its first record, with
partita's consumer, aiokafka, kafka-python and confluent-kafka, and how long the
``partita`` command takes for --help and for reading three records (kcat beside it).

    .venv/bin/python benchmarks/startup_bench.py [--rounds R] [--dir DIR]

One partita broker (default settings, data in a fresh work dir under var/bench) holds a
one-partition topic of 1,000 records of 100 B. Each measurement is a fresh process; the
rounds interleave the clients and the figures are medians, with min - max:

- client start-up: a worker process (``startup_bench.py --worker CLIENT``) imports the
  client library, connects, assigns partition 0 from offset 0 and polls until a record
  arrives, with each library's defaults otherwise. "import" is the library's import;
  "import to first record" runs from the first import to the first record (the
  start-up every short-lived consumer pays: a script, a CLI call, a test, a Spark task);
  "process" is spawn to exit, interpreter start and the client's close included.
- commands: ``partita --help``, ``partita consume TOPIC -n 3`` and ``kcat -C -c 3 -e``,
  spawn to exit.

Wall times: on a machine busy with other work they grow, so the load average is printed
beside them. ``client_bench.py`` prints the client lines too, against its own broker.
"""

from __future__ import annotations

# Only what the worker needs is imported at the top: the worker measures the client's
# imports, and must not have loaded anything of them before.
import json
import sys
import time
from typing import Any

CLIENTS = ("partita", "aiokafka", "kafka-python", "confluent")
RESULT_PREFIX = "STARTUP_BENCH_RESULT "
POLL_TIMEOUT_S = 30.0


# -- the worker: one client, one first record, in its own process ----------------------


async def _partita_first(bootstrap: str, topic: str, marks: dict[str, float]) -> None:
    from partita.client.consumer import AsyncConsumer  # noqa: PLC0415

    marks["imported"] = time.monotonic()
    async with AsyncConsumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while not await consumer.getmany(timeout_ms=1000):
            if time.monotonic() > deadline:
                raise TimeoutError("no record")
        marks["first_record"] = time.monotonic()


async def _aiokafka_first(bootstrap: str, topic: str, marks: dict[str, float]) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    marks["imported"] = time.monotonic()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while not await consumer.getmany(timeout_ms=1000):
            if time.monotonic() > deadline:
                raise TimeoutError("no record")
        marks["first_record"] = time.monotonic()
    finally:
        await consumer.stop()


def _kafka_python_first(bootstrap: str, topic: str, marks: dict[str, float]) -> None:
    from kafka import KafkaConsumer, TopicPartition  # noqa: PLC0415

    marks["imported"] = time.monotonic()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while not consumer.poll(timeout_ms=1000):
            if time.monotonic() > deadline:
                raise TimeoutError("no record")
        marks["first_record"] = time.monotonic()
    finally:
        consumer.close()


def _confluent_first(bootstrap: str, topic: str, marks: dict[str, float]) -> None:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    marks["imported"] = time.monotonic()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "startup-bench",  # required; assign() never joins it
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while True:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("no record")
        marks["first_record"] = time.monotonic()
    finally:
        consumer.close()


def worker_main(client: str, bootstrap: str, topic: str) -> int:
    marks = {"started": time.monotonic()}
    if client == "partita":
        import asyncio  # noqa: PLC0415 - asyncio is part of these clients' cost

        asyncio.run(_partita_first(bootstrap, topic, marks))
    elif client == "aiokafka":
        import asyncio  # noqa: PLC0415

        asyncio.run(_aiokafka_first(bootstrap, topic, marks))
    elif client == "kafka-python":
        _kafka_python_first(bootstrap, topic, marks)
    else:
        _confluent_first(bootstrap, topic, marks)
    print(RESULT_PREFIX + json.dumps(marks), flush=True)
    return 0


# -- the parent ------------------------------------------------------------------------


def client_startup(bootstrap: str, topic: str, client: str) -> dict[str, float]:
    """One worker's figures, in seconds: import, import to first record, process."""
    import subprocess  # noqa: PLC0415

    spawned = time.monotonic()
    done = subprocess.run(
        [sys.executable, __file__, "--worker", client, bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    ended = time.monotonic()
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{client} worker failed ({done.returncode}): {done.stderr[-2000:]}")
    marks = json.loads(lines[-1][len(RESULT_PREFIX) :])
    return {
        "import": marks["imported"] - marks["started"],
        "first record": marks["first_record"] - marks["started"],
        "process": ended - spawned,
    }


def command_seconds(args: list[str]) -> float:
    """Spawn to exit of one command, its output thrown away."""
    import subprocess  # noqa: PLC0415

    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, timeout=120, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def commands(bootstrap: str, topic: str) -> dict[str, list[str]]:
    import shutil  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    partita = str(Path(sys.executable).with_name("partita"))
    found = {
        "partita --help": [partita, "--help"],
        "partita consume -n 3": [partita, "consume", topic, "-n", "3", "-b", bootstrap],
    }
    kcat = shutil.which("kcat")
    if kcat is not None:
        found["kcat -C -c 3 -e"] = [kcat, "-C", "-b", bootstrap, "-t", topic, "-c", "3", "-e"]
    return found


def measure(bootstrap: str, topic: str, rounds: int, with_commands: bool) -> dict[str, Any]:
    """Figures per client (and command), one list entry per round; clients interleaved,
    one unscored warm-up each (the page cache, numba's or Python's compiled files)."""
    clients: dict[str, list[dict[str, float]]] = {c: [] for c in CLIENTS}
    shell = commands(bootstrap, topic) if with_commands else {}
    timed: dict[str, list[float]] = {name: [] for name in shell}
    for client in CLIENTS:
        client_startup(bootstrap, topic, client)
    for args in shell.values():
        command_seconds(args)
    for round_no in range(rounds):
        order = CLIENTS[round_no % len(CLIENTS) :] + CLIENTS[: round_no % len(CLIENTS)]
        for client in order:
            clients[client].append(client_startup(bootstrap, topic, client))
        for name, args in shell.items():
            timed[name].append(command_seconds(args))
    return {"clients": clients, "commands": timed}


def _span(values: list[float]) -> str:
    import statistics  # noqa: PLC0415

    if not values:
        return "-"
    return f"{statistics.median(values):.3f} ({min(values):.3f} - {max(values):.3f})"


def startup_tables(figures: dict[str, Any], rounds: int) -> list[Any]:
    from rich.table import Table  # noqa: PLC0415

    clients = Table(
        title=f"Client start-up, fresh process each, median (min - max) of {rounds} round(s), s"
    )
    for column in ("client", "import", "import to first record", "process (spawn to exit)"):
        clients.add_column(column, justify="left" if column == "client" else "right")
    for client, runs in figures["clients"].items():
        clients.add_row(
            client,
            _span([r["import"] for r in runs]),
            _span([r["first record"] for r in runs]),
            _span([r["process"] for r in runs]),
        )
    tables = [clients]
    if figures["commands"]:
        shell = Table(title="Commands, spawn to exit, median (min - max), s")
        shell.add_column("command")
        shell.add_column("wall", justify="right")
        for name, values in figures["commands"].items():
            shell.add_row(name, _span(values))
        tables.append(shell)
    return tables


def prepare_topic(broker: Any, topic: str) -> None:
    """A one-partition topic of 1,000 records of 100 B on ``broker``."""
    from confluent_kafka import Producer  # noqa: PLC0415

    from broker_bench import create_topic  # noqa: PLC0415

    create_topic(broker, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(1000):
        producer.produce(topic, b"%0100d" % i)
    if producer.flush(30):
        raise RuntimeError(f"records for {topic} not acknowledged")


def main() -> int:
    import argparse  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from rich.console import Console  # noqa: PLC0415

    from broker_bench import load_average, start_partita  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--dir", type=Path, default=Path(__file__).resolve().parent.parent / "var" / "bench"
    )
    args = parser.parse_args()
    console = Console(width=None if sys.stdout.isatty() else 140, log_path=False)
    args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="startup-bench-", dir=args.dir.resolve()))
    broker = start_partita(workdir, [])
    try:
        topic = "startup"
        prepare_topic(broker, topic)
        console.print(f"[bold]start-up benchmark[/]: broker {broker.bootstrap}, {load_average()}")
        figures = measure(broker.bootstrap, topic, args.rounds, with_commands=True)
        for table in startup_tables(figures, args.rounds):
            console.print(table)
        console.print(f"[bold]Machine:[/] {load_average()} at the end")
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        sys.exit(worker_main(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit(main())
