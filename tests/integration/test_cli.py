"""The ``partita`` command as a user runs it: a real process, real files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from partita.protocol.records import Record, build_batch
from partita.storage.log_manager import LogManager

PARTITA = [sys.executable, "-m", "partita.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARTITA, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_help_teaches() -> None:
    result = run("--help")
    assert result.returncode == 0
    assert "log" in result.stdout and "demo" in result.stdout
    assert "dump" in run("log", "--help").stdout


def test_log_dump_and_describe(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "data")
    manager.startup()
    log = manager.get_or_create("orders", 0)
    log.append_as_leader(build_batch([Record(0, 1000, b"k", b"hello")]), 2)
    log.append_as_leader(build_batch([Record(0, 2000, b"k2", b"world")] * 1), 2)
    log.update_high_watermark(2)
    manager.shutdown()
    segment = tmp_path / "data" / "orders-0" / "00000000000000000000.log"
    result = run("log", "dump", str(segment), "--records")
    assert result.returncode == 0, result.stderr
    assert "2 batches" in result.stdout and "hello" in result.stdout
    result = run("log", "describe", str(tmp_path / "data"))
    assert result.returncode == 0, result.stderr
    assert "orders-0" in result.stdout


def test_dump_of_damaged_segment_fails_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(build_batch([Record(0, 1, b"k", b"v")]) + b"\x00" * 30)
    result = run("log", "dump", str(bad))
    assert result.returncode == 1
    assert "trailing bytes" in result.stdout + result.stderr
    missing = run("log", "dump", str(tmp_path / "nope.log"))
    assert missing.returncode == 1
    assert "not a segment file" in missing.stderr + missing.stdout
    assert "Traceback" not in missing.stderr


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    result = run("demo", "--data-dir", str(tmp_path / "demo"), "--records", "5000")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 5,000 records back" in result.stdout
