"""A real broker process on an ephemeral 127.0.0.1 port, for tests with real clients."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class BrokerProcess:
    """``partita broker`` in a subprocess; restartable on the same data dir and port."""

    def __init__(
        self,
        data_dir: Path,
        settings: dict[str, str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings or {})
        self.extra_args = list(extra_args or [])
        self.port = 0
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        # RLIMIT_NOFILE for the broker alone (None: inherited). Set in the child, never
        # in the test process, which holds many descriptors of its own by then.
        self.descriptor_limit: int | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        ready = self.data_dir.parent / f"{self.data_dir.name}.ready"
        ready.unlink(missing_ok=True)
        args = [
            sys.executable,
            "-m",
            "partita.cli.main",
            "broker",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--ready-file",
            str(ready),
        ]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        args += self.extra_args
        if self.descriptor_limit is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            args = ["prlimit", f"--nofile={self.descriptor_limit}:{hard}", "--", *args]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while not ready.exists() or not ready.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker not ready after {timeout}s:\n{self.logs()}")
            time.sleep(0.05)
        first, *named = ready.read_text().splitlines()
        self.port = int(first.rpartition(":")[2])
        # Every listener's port by name (the first line is the first listener's address).
        self.ports = {
            name: int(address.rpartition(":")[2])
            for name, _, address in (line.partition(" ") for line in named)
        }

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data")
    process.start()
    yield process
    process.close()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    made: list[BrokerProcess] = []

    class Factory(BrokerProcess):
        def __init__(
            self,
            settings: dict[str, str] | None = None,
            name: str = "data",
            extra_args: list[str] | None = None,
        ) -> None:
            super().__init__(tmp_path / name, settings, extra_args)
            made.append(self)

    yield Factory
    for process in made:
        process.close()
