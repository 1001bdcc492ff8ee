"""The main job, end to end on a slice of the dataset: broker, produce, Spark batch and
streaming, Parquet and topic outputs, and the report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq


def test_pipeline_runs_end_to_end_over_an_earlier_runs_files(tmp_path: Path) -> None:
    work = tmp_path / "pipeline"
    command = [
        sys.executable,
        "-m",
        "partita.cli.main",
        "pipeline",
        "--work-dir",
        str(work),
        "--limit",
        "20000",
        "--max-offsets-per-trigger",
        "8000",
    ]
    # Leftovers of an earlier run (a checkpoint that would skip everything, stale output)
    # must not change the result: the job starts from a clean work dir.
    stale_checkpoint = work / "checkpoints" / "hourly" / "offsets"
    stale_checkpoint.mkdir(parents=True)
    (stale_checkpoint / "0").write_text('v1\n{}\n{"flights":{"0":999999}}\n')
    (work / "output" / "carrier_on_time.parquet").mkdir(parents=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    assert "produced to 'flights'" in report and "20,000" in report
    assert "Spark stream read (3 micro-batches)" in report
    assert "skew: the biggest partition holds" in report
    out = work / "output"
    carriers = pq.read_table(out / "carrier_on_time.parquet").to_pylist()
    assert sum(row["flights"] for row in carriers) == 20_000
    hourly = pq.read_table(out / "hourly_departures.parquet")
    assert hourly.num_rows > 0
    assert 0 < sum(hourly.column("departures").to_pylist()) <= 20_000


JVM_STARTUP_CHATTER = (
    "WARNING: Using incubator modules",
    "Using Spark's default log4j profile",
    "Setting default log level",
    "To adjust logging level",
    "NativeCodeLoader",
)


def test_the_pipelines_spark_session_starts_without_jvm_chatter() -> None:
    # The JVM's stderr still reaches ours: what it says after the start, and what it says
    # last, as the job's interpreter exits.
    script = """if True:
        from partita.pipeline.spark_job import spark_session
        session = spark_session()
        assert session.range(5).count() == 5
        session.sparkContext._jvm.System.err.println("the JVM can still speak")
        session.stop()
        session.sparkContext._jvm.System.err.println("even last")
    """
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for chatter in JVM_STARTUP_CHATTER:
        assert chatter not in done.stdout + done.stderr
    assert "the JVM can still speak\n" in done.stderr
    assert "even last\n" in done.stderr
