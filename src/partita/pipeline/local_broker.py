"""A partita broker in a child process, for jobs that bring their own cluster."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from partita.local.cluster import write_private_properties


class LocalBroker:
    """``partita broker`` on 127.0.0.1 with an ephemeral port; stopped cleanly on exit."""

    def __init__(
        self, data_dir: Path, log_path: Path, settings: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.settings = dict(settings or {})
        self.bootstrap = ""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        """The broker process's id (benchmarks read its CPU time)."""
        assert self._process is not None, "the broker is not started"
        return self._process.pid

    def __enter__(self) -> LocalBroker:
        ready = self.data_dir.parent / "broker.ready"
        ready.unlink(missing_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "partita.cli.main",
            "broker",
            "--data-dir",
            str(self.data_dir),
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ]
        if self.settings:
            # A file only its owner reads, not argv (settings may hold passwords).
            config = self.data_dir.parent / "broker.properties"
            write_private_properties(config, self.settings)
            command += ["--config", str(config)]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            if self._process.poll() is not None:
                raise RuntimeError(f"the broker exited early; see {self.log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the broker did not start in 60 s; see {self.log_path}")
            time.sleep(0.05)
        self.bootstrap = ready.read_text().splitlines()[0].strip()  # the first listener
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _error: BaseException | None,
        _trace: TracebackType | None,
    ) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(10)
