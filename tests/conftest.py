"""Shared fixtures: temp data dirs, a controllable clock, batch builders."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from partita.protocol.compression import Compression
from partita.protocol.records import Record, build_batch
from partita.storage.config import LogConfig
from partita.storage.log_manager import LogManager

BASE_TS = 1_700_000_000_000


class FakeClock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, now: int = BASE_TS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_batch(
    n: int = 3,
    *,
    ts: int = BASE_TS,
    key: bytes | None = b"k",
    value_size: int = 10,
    compression: Compression = Compression.NONE,
    tag: int = 0,
) -> bytes:
    records = [
        Record(i, ts + i, key, f"{tag}:{i}:".encode().ljust(value_size, b"x"), [("h", b"v")])
        for i in range(n)
    ]
    return build_batch(records, compression=compression)


@pytest.fixture
def open_manager(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., LogManager]]:
    managers: list[LogManager] = []

    def _open(config: LogConfig | None = None, data_dir: Path | None = None) -> LogManager:
        cfg = config or LogConfig()
        manager = LogManager(data_dir or tmp_path / "data", lambda _t: cfg, clock=clock)
        manager.startup()
        managers.append(manager)
        return manager

    yield _open
    for manager in managers:
        for partition_log in manager:
            partition_log.close()
