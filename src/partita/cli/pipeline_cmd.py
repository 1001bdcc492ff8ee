"""``partita pipeline``: the main job, end to end on a local broker or cluster.

1. start a partita broker (data under ``--work-dir``, wiped first so runs repeat), or
   with ``--brokers N`` etcd and N brokers, and print who leads and follows what;
2. create ``flights`` and produce all 336,776 NYC 2013 flights, keyed by carrier
   (idempotent, acks=all); on a cluster, kill -9 the broker leading the most partitions
   halfway, follow the failover, restart it and give its leaderships back;
3. PySpark batch: on-time performance per carrier and per route, joined with the
   airlines and airports tables, to Parquet and to the ``flights-report`` topic;
4. PySpark Structured Streaming: departures per airport per hour with a watermark, to
   Parquet and to the ``flights-hourly`` topic;
5. a report: rows in and out, partition sizes and skew, whether every flight was read
   exactly once, the results' fingerprints, time taken (and what the failover cost).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from partita.cli.common import check_bootstrap, client_settings, fail
from partita.errors import KafkaError
from partita.pipeline.local_broker import LocalBroker
from partita.pipeline.spark_cluster import LOCAL_MASTER

if TYPE_CHECKING:
    from partita.local.cluster import LocalCluster
    from partita.pipeline.exactly_once import Verdict
    from partita.pipeline.failover import FailoverReport
    from partita.pipeline.flights_events import FlightEvents
    from partita.pipeline.spark_job import JobResult

console = Console()
TOPIC = "flights"


def run(
    work_dir: Path = typer.Option(
        Path("var/pipeline"),
        help="Broker data, Spark checkpoints and Parquet output go here (wiped at start).",
    ),
    partitions: int = typer.Option(6, min=1, help="Partitions of the 'flights' topic."),
    limit: int | None = typer.Option(
        None, min=1, help="Produce only the first N flights (quick runs); default: all."
    ),
    max_offsets_per_trigger: int = typer.Option(
        60_000, min=1, help="Streaming rate limit: records per micro-batch."
    ),
    brokers: int = typer.Option(
        0,
        "--brokers",
        min=0,
        max=9,
        help="Run on a local cluster of this many brokers on etcd (at least 3; "
        "replication factor 3, min ISR 2) and kill -9 one halfway through producing; "
        "default: one embedded broker.",
        show_default=False,
    ),
    secure: bool = typer.Option(
        False,
        "--secure",
        help="Brokers with TLS and SASL only (SASL_SSL) and ACLs on, as cluster up --secure "
        "makes them; the producer, Spark and the checks connect as the admin user.",
    ),
    bootstrap_server: str | None = typer.Option(
        None,
        "--bootstrap-server",
        metavar="HOST:PORT[,…]",
        help="Run on a cluster that is already running, partita's or Apache Kafka's, "
        "instead of starting one: the job creates its topics there (and refuses topics "
        "that exist), never deletes anything. A secured one: partita --command-config "
        "FILE pipeline ...",
        show_default=False,
    ),
    replication_factor: int | None = typer.Option(
        None,
        "--replication-factor",
        min=1,
        help="With --bootstrap-server: replicas of the job's topics; default: as many as "
        "the cluster has brokers, up to 3.",
        show_default=False,
    ),
    reuse_topics: bool = typer.Option(
        False,
        "--reuse-topics",
        help="With --bootstrap-server: write into the job's topics if they exist (an "
        "earlier run's) and read only the offsets this run wrote; the input topic keeps "
        "its partition count.",
    ),
    spark_master: str = typer.Option(
        LOCAL_MASTER,
        "--spark-master",
        metavar="URL",
        help="Where the Spark stages run: local[N], or a Spark cluster's master "
        "(spark://HOST:PORT standalone, yarn, k8s://...). On a cluster the output and "
        "checkpoints under --work-dir must be a path every worker sees.",
    ),
    spark_conf: list[str] = typer.Option(
        [],
        "--spark-conf",
        metavar="KEY=VALUE",
        help="A Spark setting, as spark-submit --conf (repeat it): e.g. "
        "spark.executor.memory=2g, spark.cores.max=4, spark.driver.host=10.0.0.5.",
        show_default=False,
    ),
    worker_python: str | None = typer.Option(
        None,
        "--worker-python",
        metavar="PATH",
        help="The Python the Spark executors run (PYSPARK_PYTHON): it needs partita's "
        "dependencies. Default: this one, which a worker on this machine has.",
        show_default=False,
    ),
    ship_package: bool | None = typer.Option(
        None,
        "--ship-package/--no-ship-package",
        help="Ship partita's code to the executors with the job (spark-submit --py-files), "
        "so workers need only its dependencies. Default: on a cluster, yes; local, no.",
        show_default=False,
    ),
) -> None:
    """Run the main job: NYC flights 2013 through partita into a PySpark pipeline."""
    from partita.pipeline.failover import REPLICATION  # noqa: PLC0415

    if 0 < brokers < REPLICATION:
        raise fail(f"--brokers needs at least {REPLICATION} brokers (replication factor 3)")
    if bootstrap_server is not None and (brokers or secure):
        raise fail(
            "--bootstrap-server runs on a cluster already running: not with --brokers or --secure"
        )
    if replication_factor is not None and bootstrap_server is None:
        raise fail("--replication-factor goes with --bootstrap-server")
    if reuse_topics and bootstrap_server is None:
        raise fail("--reuse-topics goes with --bootstrap-server: the job's own brokers start empty")
    if bootstrap_server is not None:
        check_bootstrap(bootstrap_server)
    from partita.pipeline.spark_cluster import (  # noqa: PLC0415
        SparkClusterError,
        check_master,
        is_local,
    )

    try:
        check_master(spark_master)
    except SparkClusterError as exc:
        raise fail(str(exc)) from None
    spark_plan = SparkPlan(
        master=spark_master,
        settings=_spark_settings(spark_conf),
        worker_python=worker_python,
        ship=not is_local(spark_master) if ship_package is None else ship_package,
    )
    timings: dict[str, float] = {}
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    # Imported here, not at the top: pandas, the flights data and PySpark take seconds to
    # load, and every other partita command (the broker too) imports this module.
    from partita.pipeline.exactly_once import Produced, check  # noqa: PLC0415
    from partita.pipeline.flights_events import (  # noqa: PLC0415
        create_topic,
        load_flight_events,
        produce_events,
    )
    from partita.pipeline.spark_job import JobResult, kafka_options  # noqa: PLC0415

    out_dir = work_dir / "output"
    result = JobResult()
    failover: FailoverReport | None = None
    # Where this run's records start and end in each partition of the input topic, when
    # it reused a topic holding an earlier run's; None: the whole topic is this run's.
    window: tuple[dict[int, int], dict[int, int]] | None = None
    broker_settings: dict[str, str] = {}
    security: dict[str, str] = {}
    if secure:
        from partita.local.secure import make_secure_setup  # noqa: PLC0415

        setup = make_secure_setup(work_dir / "security")
        broker_settings, security = setup.broker_settings, setup.client_settings
        console.print(
            f"secured: SASL_SSL only, ACLs on; client settings in {setup.client_properties}"
        )

    if bootstrap_server is not None:
        from partita.pipeline.external import (  # noqa: PLC0415
            ExternalClusterError,
            end_offsets,
            prepare,
        )
        from partita.pipeline.spark_job import HOURLY_TOPIC, REPORT_TOPIC  # noqa: PLC0415

        security = client_settings()
        started = time.perf_counter()
        topics = {TOPIC: partitions, REPORT_TOPIC: -1, HOURLY_TOPIC: -1}
        try:
            prepared = asyncio.run(
                prepare(bootstrap_server, topics, replication_factor, security, reuse_topics)
            )
        except ExternalClusterError as exc:
            raise fail(str(exc)) from None
        created = [t for t in topics if t not in prepared.reused]
        console.print(
            f"cluster at {bootstrap_server}: {prepared.brokers} broker"
            f"{'s' if prepared.brokers != 1 else ''}"
            + (
                f"; topics {', '.join(created)} created with replication factor "
                f"{prepared.replication}"
                if created
                else ""
            )
            + (f"; reusing {', '.join(prepared.reused)}" if prepared.reused else "")
        )
        partitions = prepared.partitions
        events = load_flight_events(limit)
        timings["load dataset"] = time.perf_counter() - started
        started = time.perf_counter()
        try:
            with _progress() as progress:
                task = progress.add_task("producing flights", total=len(events))
                per_partition = asyncio.run(
                    produce_events(
                        bootstrap_server,
                        TOPIC,
                        events,
                        lambda done: progress.update(task, completed=done),
                        security=security,
                    )
                )
        except (KafkaError, OSError) as exc:
            # What was acknowledged stays: a rerun with --reuse-topics reads past it.
            raise fail(
                f"producing to {TOPIC!r} on {bootstrap_server} failed: {exc} (a rerun needs "
                "--reuse-topics, or the topics deleted)"
            ) from None
        timings["produce"] = time.perf_counter() - started
        if TOPIC in prepared.reused:
            try:
                ended = asyncio.run(end_offsets(bootstrap_server, TOPIC, partitions, security))
            except ExternalClusterError as exc:
                raise fail(str(exc)) from None
            window = (prepared.start, ended)
            console.print(
                f"this run's flights: offsets {_spans(prepared.start, ended)} of '{TOPIC}'"
            )
        _spark_stages(
            kafka_options(bootstrap_server, security),
            work_dir,
            out_dir,
            result,
            timings,
            max_offsets_per_trigger,
            spark_plan,
            window,
        )
    elif brokers:
        from partita.pipeline.failover import all_brokers, local_cluster  # noqa: PLC0415

        started = time.perf_counter()
        try:
            with local_cluster(work_dir / "cluster", brokers, broker_settings, security) as cluster:
                timings["start cluster"] = time.perf_counter() - started
                console.print(
                    f"cluster up: {brokers} brokers at {all_brokers(cluster)}, metadata in "
                    f"{cluster.metadata} (logs: {work_dir / 'cluster'})"
                )
                started = time.perf_counter()
                events = load_flight_events(limit)
                timings["load dataset"] = time.perf_counter() - started
                per_partition, failover = _produce_through_failover(
                    cluster, events, partitions, timings
                )
                _spark_stages(
                    kafka_options(all_brokers(cluster), security),
                    work_dir,
                    out_dir,
                    result,
                    timings,
                    max_offsets_per_trigger,
                    spark_plan,
                )
        except RuntimeError as exc:  # a broker that did not start, a failover that stalled
            raise fail(f"{str(exc).splitlines()[0]} (logs: {work_dir / 'cluster'})") from None
    else:
        with LocalBroker(work_dir / "broker", work_dir / "broker.log", broker_settings) as broker:
            console.print(f"broker up at {broker.bootstrap} (log: {work_dir / 'broker.log'})")
            started = time.perf_counter()
            events = load_flight_events(limit)
            timings["load dataset"] = time.perf_counter() - started

            started = time.perf_counter()
            asyncio.run(create_topic(broker.bootstrap, TOPIC, partitions, security=security))
            with _progress() as progress:
                task = progress.add_task("producing flights", total=len(events))
                per_partition = asyncio.run(
                    produce_events(
                        broker.bootstrap,
                        TOPIC,
                        events,
                        lambda done: progress.update(task, completed=done),
                        security=security,
                    )
                )
            timings["produce"] = time.perf_counter() - started
            _spark_stages(
                kafka_options(broker.bootstrap, security),
                work_dir,
                out_dir,
                result,
                timings,
                max_offsets_per_trigger,
                spark_plan,
            )

    base = window[0] if window is not None else None
    verdict = check(Produced.of(events.values, per_partition), result, base)
    _report(len(events), partitions, result, timings, out_dir, verdict, failover)
    if not verdict.ok:
        for problem in verdict.problems:
            console.print(f"[red]{problem}[/red]")
        raise typer.Exit(1)


def _spans(start: dict[int, int], end: dict[int, int]) -> str:
    return ", ".join(f"P{p} {start[p]}..{end[p] - 1}" for p in sorted(end) if end[p] > start[p])


def _progress() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


def _produce_through_failover(
    cluster: LocalCluster, events: FlightEvents, partitions: int, timings: dict[str, float]
) -> tuple[dict[int, int], FailoverReport]:
    """Create the topics (RF 3, min ISR 2), print the layout, produce every flight while
    a broker is killed and restored; the time until the last acknowledgement is the
    produce stage, what the restore took after it is a stage of its own."""
    from partita.pipeline.failover import (  # noqa: PLC0415
        MIN_ISR,
        REPLICATION,
        Failover,
        describe,
        layout,
    )
    from partita.pipeline.flights_events import create_topic, produce_events  # noqa: PLC0415
    from partita.pipeline.spark_job import HOURLY_TOPIC, REPORT_TOPIC  # noqa: PLC0415

    async def go() -> tuple[dict[int, int], FailoverReport, float]:
        started = time.perf_counter()
        security = cluster.client_settings
        await create_topic(
            cluster.bootstrap,
            TOPIC,
            partitions,
            REPLICATION,
            {"min.insync.replicas": str(MIN_ISR)},
            security,
        )
        # Spark's writers would have the brokers create these on first use, but two tasks
        # asking two brokers at once can get TOPIC_ALREADY_EXISTS from the one that lost
        # the race (a cluster-mode bug of auto-creation), which fails the write.
        for output in (REPORT_TOPIC, HOURLY_TOPIC):
            await create_topic(
                cluster.bootstrap,
                output,
                -1,
                REPLICATION,
                {"min.insync.replicas": str(MIN_ISR)},
                security,
            )
        before = await describe(cluster, TOPIC)
        console.print(
            f"topic '{TOPIC}': {partitions} partitions, replication factor {REPLICATION}, "
            f"min ISR {MIN_ISR}"
        )
        for line in layout(cluster, TOPIC, before):
            console.print(line, soft_wrap=True)
        with _progress() as progress:
            # Acknowledged, not sent: sending runs ahead, and the failover shows in acks.
            task = progress.add_task("flights acknowledged", total=len(events))
            failover = Failover(
                cluster,
                TOPIC,
                before,
                len(events),
                lambda line: progress.console.print(line, soft_wrap=True),
            )

            def acknowledged(partition: int) -> None:
                failover.ack(partition)
                done = failover.clock.acked
                if done % 1000 == 0 or done == len(events):
                    progress.update(task, completed=done)

            following = asyncio.create_task(failover.follow())
            try:
                per_partition = await produce_events(
                    cluster.bootstrap, TOPIC, events, lambda _sent: None, acknowledged, security
                )
            except BaseException:
                following.cancel()
                raise
            produced = time.perf_counter()
            timings["produce"] = produced - started
            report = await following
        report.pauses = failover.clock.pauses()
        report.silence_s = failover.clock.longest_any
        return per_partition, report, time.perf_counter() - produced

    per_partition, report, restore = asyncio.run(go())
    timings[f"restore broker {report.victim}"] = restore
    return per_partition, report


@dataclass(frozen=True)
class SparkPlan:
    """Where and how the Spark stages run (--spark-master and the options with it)."""

    master: str
    settings: dict[str, str]
    worker_python: str | None
    ship: bool


def _spark_settings(entries: list[str]) -> dict[str, str]:
    from partita.errors import InvalidConfigurationError  # noqa: PLC0415
    from partita.server.config import parse_assignments  # noqa: PLC0415

    try:
        return parse_assignments(entries, "--spark-conf")
    except InvalidConfigurationError as exc:
        raise fail(exc.message) from None


def _spark_stages(
    kafka: dict[str, str],
    work_dir: Path,
    out_dir: Path,
    result: JobResult,
    timings: dict[str, float],
    max_offsets_per_trigger: int,
    plan: SparkPlan,
    window: tuple[dict[int, int], dict[int, int]] | None = None,
) -> None:
    from partita.pipeline.spark_cluster import (  # noqa: PLC0415
        SparkClusterError,
        executor_wait_seconds,
        executors,
        explain_failure,
        is_local,
        wait_for_executors,
    )
    from partita.pipeline.spark_job import (  # noqa: PLC0415
        run_batch,
        run_streaming,
        spark_session,
    )

    started = time.perf_counter()
    spark = spark_session(
        master=plan.master,
        settings=plan.settings,
        worker_python=plan.worker_python,
        ship_to=work_dir / "ship" if plan.ship else None,
    )
    try:
        if not is_local(plan.master):
            wait = executor_wait_seconds(plan.settings)
            wait_for_executors(spark.sparkContext, plan.master, wait)
        timings["start Spark"] = time.perf_counter() - started
        started = time.perf_counter()
        with console.status("Spark batch: on-time performance per carrier and route"):
            run_batch(spark, kafka, TOPIC, out_dir, result, window)
        timings["Spark batch"] = time.perf_counter() - started
        started = time.perf_counter()
        with console.status("Spark streaming: hourly departures with a watermark"):
            run_streaming(
                spark,
                kafka,
                TOPIC,
                out_dir,
                work_dir / "checkpoints" / "hourly",
                result,
                max_offsets_per_trigger,
                window[0] if window is not None else None,
            )
        timings["Spark streaming"] = time.perf_counter() - started
        if not is_local(plan.master):
            # Counted after the stages, not when the first executor joined: the others
            # register while the job runs (one JVM per worker), and this says who ran it.
            count = executors(spark.sparkContext)
            console.print(
                f"Spark on {plan.master}: {count} executor{'s' if count != 1 else ''}"
                + (", partita shipped with the job" if plan.ship else "")
            )
    except SparkClusterError as exc:
        raise fail(str(exc)) from None
    except Exception as exc:
        explained = explain_failure(exc, spark.sparkContext.pythonExec)
        if explained is None:
            raise
        raise fail(explained) from None
    finally:
        spark.stop()


def _report(
    produced_total: int,
    partition_count: int,
    result: JobResult,
    timings: dict[str, float],
    out_dir: Path,
    verdict: Verdict,
    failover: FailoverReport | None,
) -> None:
    layout = Table(title="topic 'flights': records per partition (key = carrier, murmur2)")
    for column in ("partition", "records", "share", "carriers"):
        layout.add_column(column, justify="left" if column == "carriers" else "right")
    for partition in range(partition_count):
        rows = result.partition_rows.get(partition, 0)
        layout.add_row(
            str(partition),
            f"{rows:,}",
            f"{rows / max(1, result.rows_read):.1%}",
            " ".join(result.carriers_per_partition.get(partition, [])) or "-",
        )
    console.print(layout)
    sizes = [result.partition_rows.get(p, 0) for p in range(partition_count)]
    mean = sum(sizes) / max(1, len(sizes))
    empty = [str(p) for p, rows in enumerate(sizes) if rows == 0]
    console.print(
        f"skew: the biggest partition holds {max(sizes) / mean:.2f}x the mean"
        + (f"; partition {', '.join(empty)} got no carrier at all" if empty else "")
        + f". {len(result.carriers)} carriers of very different sizes hash onto "
        f"{len(sizes)} partitions, and Spark's per-partition tasks are as uneven as the topic "
        "(maxRecordsPerPartition or minPartitions would split the big ones)."
    )

    carriers = Table(title="on-time arrival by carrier (arr_delay < 15 min)")
    for column in ("carrier", "airline", "flights", "cancelled", "on time", "avg arr delay"):
        carriers.add_column(column, justify="left" if column == "airline" else "right")
    for row in result.carriers:
        carriers.add_row(
            row["carrier"],
            row.get("name") or "",
            f"{row['flights']:,}",
            f"{row['cancelled']:,}",
            f"{row['on_time_pct']}%",
            f"{row['avg_arr_delay']} min",
        )
    console.print(carriers)

    routes = Table(title="busiest routes")
    for column in ("route", "destination", "flights", "miles", "on time", "avg arr delay"):
        routes.add_column(column, justify="left" if column == "destination" else "right")
    for row in result.routes:
        routes.add_row(
            f"{row['origin']}-{row['dest']}",
            row.get("dest_name") or "",
            f"{row['flights']:,}",
            f"{row['distance']:,}",
            f"{row['on_time_pct']}%",
            f"{row['avg_arr_delay']} min",
        )
    console.print(routes)

    summary = Table(title="rows in and out")
    summary.add_column("stage")
    summary.add_column("rows", justify="right")
    summary.add_row("produced to 'flights'", f"{produced_total:,}")
    summary.add_row(f"Spark batch read ({result.spark_tasks} tasks)", f"{result.rows_read:,}")
    summary.add_row(
        f"Spark stream read ({result.stream_batches} micro-batches)",
        f"{result.stream_rows_in:,}",
    )
    for name, rows in result.rows_out.items():
        summary.add_row(f"written: {name} (Parquet + topic)", f"{rows:,}")
    console.print(summary)
    if result.busiest_hours:
        top = result.busiest_hours[0]
        console.print(
            f"busiest hour: {top['departures']} departures from {top['origin']} at "
            f"{top['hour_start']:%Y-%m-%d %H:00} UTC (windows still open at the end of the "
            "stream wait for a later watermark, as append mode requires)"
        )
    if verdict.ok:
        console.print(verdict.summary)
    console.print(
        "results: "
        + ", ".join(f"{name} {digest[:12]}" for name, digest in result.fingerprints.items())
        + " (sha256 of each table's sorted rows: the same results, the same fingerprints)"
    )
    if failover is not None:
        _report_failover(failover, timings)
    console.print(
        "time: "
        + ", ".join(f"{name} {secs:.1f}s" for name, secs in timings.items())
        + f"; total {sum(timings.values()):.1f}s. Output: {out_dir}"
    )


def _report_failover(report: FailoverReport, timings: dict[str, float]) -> None:
    moved = [p for p in report.partitions if p.leader_before == report.victim]
    pauses = ", ".join(f"P{p} {s:.1f}" for p, s in report.pauses.items())
    console.print(
        f"failover: broker {report.victim} (leader of "
        f"{', '.join(f'P{p}' for p in report.led)}) killed -9 with "
        f"{report.acked_at_kill:,} flights acknowledged; "
        + ", ".join(f"P{p.partition} led by {p.leader_after}" for p in moved)
        + f" and every ISR without broker {report.victim} after {report.failover_s:.1f} s "
        "(its etcd session, broker.session.timeout.ms, had to lapse first). The producer "
        f"waited {report.silence_s:.1f} s with no flight acknowledged (longest pause per "
        f"partition, s: {pauses or '-'}). Broker {report.victim} was restarted "
        f"{report.restarted_after_s:.1f} s after the kill and back in every ISR "
        f"{report.rejoined_s:.1f} s later; ElectLeaders gave "
        f"{', '.join(f'P{p}' for p in report.elected) or 'nothing'} back to it in "
        f"{report.preferred_s:.1f} s (the controller's own rebalance looks only every "
        "leader.imbalance.check.interval.seconds, 300 s)."
    )
    restore = timings.get(f"restore broker {report.victim}", 0.0)
    console.print(
        f"failover cost: produce {timings['produce']:.1f}s, {report.silence_s:.1f}s of it "
        f"waiting with nothing acknowledged; restore broker {report.victim} "
        f"{restore:.1f}s (what was left of restarting it, its catch-up and the election "
        "once the last flight was acknowledged); Spark batch and streaming: none (they "
        "read the restored cluster)."
    )
