"""Crash recovery with real processes.

A writer process appends verifiable batches and prints each acknowledged offset; the
test SIGKILLs it after a random delay, recovers the data directory in-process and
checks that every acknowledged offset is there with its content, that offsets are
contiguous, that every batch passes its CRC and that the indexes point where they
should. Recovery must also be repeatable: append, "crash" again, recover again.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from partita.storage.config import LONG_MAX, LogConfig
from partita.storage.log_manager import CLEAN_SHUTDOWN_MARKER, LogManager
from tests.faults.helpers import (
    REPO_ROOT,
    TOPIC,
    Contents,
    check_contents,
    check_index_files,
    check_loaded_indexes,
    crash_close,
    fill,
    open_manager,
)

SEGMENT_BYTES = 256 * 1024
READY_TIMEOUT_S = 30.0


@dataclass
class CrashRun:
    ready_leo: int
    acked: list[int]


def run_writer_and_kill(
    data_dir: Path,
    seed: int,
    *,
    epoch: int,
    flush_messages: int,
    delay_s: float,
    after_acks: int | None = None,
) -> CrashRun:
    """Start the writer, wait until it is appending, and SIGKILL it ``delay_s`` later,
    or, with ``after_acks``, as soon as that many appends have been acknowledged (the
    writer is then in the middle of a burst of appends, so the kill lands close to a
    write: between a write and its acknowledgement, or inside a large writev)."""
    stderr_path = data_dir.parent / f"writer-{seed}-{epoch}.stderr"
    command = [
        sys.executable,
        "-m",
        "tests.faults.crash_writer",
        str(data_dir),
        str(seed),
        str(epoch),
        str(flush_messages),
        str(SEGMENT_BYTES),
    ]
    lines: queue.Queue[str | None] = queue.Queue()
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    assert proc.stdout is not None
    stdout = proc.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    received: list[str] = []
    try:
        first = lines.get(timeout=READY_TIMEOUT_S)
        assert first is not None and first.startswith("READY "), (
            f"writer did not start: {first!r}\n{stderr_path.read_text()}"
        )
        if after_acks is None:
            time.sleep(delay_s)
        else:
            while len(received) < after_acks:
                line = lines.get(timeout=READY_TIMEOUT_S)
                assert line is not None, f"writer died on its own:\n{stderr_path.read_text()}"
                received.append(line)
        assert proc.poll() is None, f"writer died on its own:\n{stderr_path.read_text()}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    while (line := lines.get()) is not None:
        received.append(line)
    # A line cut short by the kill was never acknowledged.
    acked = [int(line) for line in received if line.endswith("\n")]
    assert acked == sorted(acked), "the writer acknowledged offsets out of order"
    return CrashRun(int(first.split()[1]), acked)


def recover_and_check(
    data_dir: Path, config: LogConfig, acked: list[int]
) -> tuple[LogManager, Contents]:
    assert not (data_dir / CLEAN_SHUTDOWN_MARKER).exists()
    manager = open_manager(data_dir, config)
    assert not manager.loaded_cleanly
    assert manager.offline == {}
    partition_log = manager.get(TOPIC, 0)
    assert partition_log.log_start_offset == 0
    contents = check_contents(partition_log, acked)
    assert partition_log.epochs.entries == contents.epochs
    check_loaded_indexes(partition_log)
    return manager, contents


def crash_then_recover_twice(tmp_path: Path, seed: int, flush_messages: int) -> None:
    rng = random.Random(seed)
    data_dir = tmp_path / "data"
    config = LogConfig(segment_bytes=SEGMENT_BYTES, flush_messages=flush_messages)
    # Half the rounds kill after a random delay, half right after a random number of acks.
    run = run_writer_and_kill(
        data_dir,
        seed,
        epoch=0,
        flush_messages=flush_messages,
        delay_s=rng.uniform(0.05, 1.0),
        after_acks=rng.randint(1, 400) if seed % 2 else None,
    )
    assert run.ready_leo == 0

    manager, contents = recover_and_check(data_dir, config, run.acked)
    partition_log = manager.get(TOPIC, 0)
    next_epoch = contents.epochs[-1][0] + 1 if contents.epochs else 0
    more = fill(partition_log, 25, rng, epoch=next_epoch)
    assert more[0] >= contents.log_end_offset
    acked = run.acked + more
    check_contents(partition_log, acked)

    # Crash again (nothing flushed, no marker): recovery must be repeatable.
    crash_close(manager)
    manager, again = recover_and_check(data_dir, config, acked)
    assert again.log_end_offset == more[-1] + 1

    # A clean stop leaves consistent index files and a log that opens without recovery.
    manager.shutdown()
    assert check_index_files(data_dir / f"{TOPIC}-0") >= 1
    manager = open_manager(data_dir, config)
    assert manager.loaded_cleanly
    clean = check_contents(manager.get(TOPIC, 0), acked)
    assert clean.log_end_offset == again.log_end_offset
    manager.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_sigkill_loses_no_acknowledged_offset(tmp_path: Path, seed: int) -> None:
    crash_then_recover_twice(tmp_path, seed, LONG_MAX)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [100, 101, 102])
def test_sigkill_with_flush_every_message(tmp_path: Path, seed: int) -> None:
    crash_then_recover_twice(tmp_path, seed, 1)


@pytest.mark.slow
def test_repeated_sigkill_on_the_same_directory(tmp_path: Path) -> None:
    """Kill, recover, resume the writer from the recovered LEO, kill again, five times."""
    rng = random.Random(7)
    data_dir = tmp_path / "data"
    config = LogConfig(segment_bytes=SEGMENT_BYTES)
    acked: list[int] = []
    expected_leo = 0
    epoch = 0
    for round_number in range(5):
        run = run_writer_and_kill(
            data_dir,
            1000 + round_number,
            epoch=epoch,
            flush_messages=LONG_MAX,
            delay_s=rng.uniform(0.1, 0.8),
            after_acks=rng.randint(1, 300) if round_number % 2 else None,
        )
        assert run.ready_leo == expected_leo, (
            f"round {round_number}: the writer recovered to {run.ready_leo}, the previous "
            f"check recovered to {expected_leo}"
        )
        acked += run.acked
        manager, contents = recover_and_check(data_dir, config, acked)
        expected_leo = contents.log_end_offset
        epoch = contents.epochs[-1][0] + 1 if contents.epochs else epoch
        crash_close(manager)
    assert len(acked) > 0
