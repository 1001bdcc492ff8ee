"""``partita pipeline``: the main job, end to end on a local cluster.

1. start a partita broker (data under ``--work-dir``, wiped first so runs repeat);
2. create ``flights`` and produce all 336,776 NYC 2013 flights, keyed by carrier;
3. PySpark batch: on-time performance per carrier and per route, joined with the
   airlines and airports tables, to Parquet and to the ``flights-report`` topic;
4. PySpark Structured Streaming: departures per airport per hour with a watermark, to
   Parquet and to the ``flights-hourly`` topic;
5. a report: rows in and out, partition sizes and skew, time taken.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from partita.pipeline.local_broker import LocalBroker

if TYPE_CHECKING:
    from partita.pipeline.spark_job import JobResult

console = Console()


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
) -> None:
    """Run the main job: NYC flights 2013 through partita into a PySpark pipeline."""
    timings: dict[str, float] = {}
    if work_dir.exists():
        shutil.rmtree(work_dir)
    work_dir.mkdir(parents=True)
    # Imported here, not at the top: pandas, the flights data and PySpark take seconds to
    # load, and every other partita command (the broker too) imports this module.
    from partita.pipeline.flights_events import (  # noqa: PLC0415
        create_topic,
        load_flight_events,
        produce_events,
    )
    from partita.pipeline.spark_job import (  # noqa: PLC0415
        JobResult,
        run_batch,
        run_streaming,
        spark_session,
    )

    out_dir = work_dir / "output"
    result = JobResult()

    with LocalBroker(work_dir / "broker", work_dir / "broker.log") as broker:
        console.print(f"broker up at {broker.bootstrap} (log: {work_dir / 'broker.log'})")
        started = time.perf_counter()
        events = load_flight_events(limit)
        timings["load dataset"] = time.perf_counter() - started

        started = time.perf_counter()
        asyncio.run(create_topic(broker.bootstrap, "flights", partitions))
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("producing flights", total=len(events))
            asyncio.run(
                produce_events(
                    broker.bootstrap,
                    "flights",
                    events,
                    lambda done: progress.update(task, completed=done),
                )
            )
        timings["produce"] = time.perf_counter() - started

        started = time.perf_counter()
        spark = spark_session()
        timings["start Spark"] = time.perf_counter() - started
        try:
            started = time.perf_counter()
            with console.status("Spark batch: on-time performance per carrier and route"):
                run_batch(spark, broker.bootstrap, "flights", out_dir, result)
            timings["Spark batch"] = time.perf_counter() - started
            started = time.perf_counter()
            with console.status("Spark streaming: hourly departures with a watermark"):
                run_streaming(
                    spark,
                    broker.bootstrap,
                    "flights",
                    out_dir,
                    work_dir / "checkpoints" / "hourly",
                    result,
                    max_offsets_per_trigger,
                )
            timings["Spark streaming"] = time.perf_counter() - started
        finally:
            spark.stop()

    _report(len(events), partitions, result, timings, out_dir)
    if result.rows_read != len(events) or result.stream_rows_in != len(events):
        console.print(
            f"[red]rows lost: produced {len(events):,}, batch read {result.rows_read:,}, "
            f"stream read {result.stream_rows_in:,}[/red]"
        )
        raise typer.Exit(1)


def _report(
    produced_total: int,
    partition_count: int,
    result: JobResult,
    timings: dict[str, float],
    out_dir: Path,
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
    console.print(
        "time: "
        + ", ".join(f"{name} {secs:.1f}s" for name, secs in timings.items())
        + f"; total {sum(timings.values()):.1f}s. Output: {out_dir}"
    )
