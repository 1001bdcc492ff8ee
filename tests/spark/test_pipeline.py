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
