"""A real Spark standalone cluster from the installed pyspark: a master and workers, each
its own JVM (``spark-class ...Master`` / ``...Worker``), all on 127.0.0.1; and a "stock"
worker Python: one with partita's dependencies but not partita, as a Spark cluster's
workers have before anyone installs partita there."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from partita.local.cluster import free_port

SPARK_HOME = Path(pyspark.__file__).parent


class SparkStandalone:
    def __init__(self, workdir: Path, workers: int = 2, worker_memory: str = "2g") -> None:
        self.workdir = workdir
        self.workers = workers
        self.worker_memory = worker_memory
        self.port = free_port()
        self.ui_port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.workdir),
        }
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        self.processes.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        )

    def state(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            state: dict[str, object] = json.load(r)
            return state

    def start(self, timeout: float = 90.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for number in range(1, self.workers + 1):
            self._start(
                f"worker-{number}", "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", "1", "--memory", self.worker_memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.workdir / f"w{number}"),
                self.master,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            try:
                workers = self.state().get("workers", [])
                assert isinstance(workers, list)
                if sum(w.get("state") == "ALIVE" for w in workers) == self.workers:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in self.workdir.glob("*.log"))
                raise RuntimeError(f"Spark standalone not up after {timeout}s:\n{logs}")
            time.sleep(0.5)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def stock_worker_python(directory: Path) -> Path:
    """A virtualenv whose site-packages reach this one's by a plain path line: every
    dependency of partita importable, partita itself not (its editable install is a .pth
    file in this environment, and .pth files of a path added that way are not read)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True)
    ours = next(p for p in sys.path if p.endswith("site-packages") and sys.prefix in p)
    theirs = next((directory / "lib").glob("python3*/site-packages"))
    (theirs / "partita-dependencies.pth").write_text(ours + "\n")
    python = directory / "bin" / "python"
    found = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('partita'))"],
        capture_output=True, text=True, check=True, cwd=directory,
    )  # fmt: skip
    assert found.stdout.strip() == "None", found.stdout  # the point of this Python
    return python
