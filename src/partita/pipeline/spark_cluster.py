"""Where the job's Spark stages run: a local session, or a Spark cluster the user has.

On a cluster the executors, not this process, read the topic, so they must import
partita. The job ships partita's own code (pure Python) as a zip with the job, as
``spark-submit --py-files`` would; what it imports (crc32c, cramjam, aiokafka, numba,
pyarrow...) must be on the workers' Python, which installing partita's wheel there gives
(``pip wheel .`` in a checkout builds it). A master that cannot be reached, a cluster with
no worker to run the job and a worker that lacks a module are each told in one line, with
the fix, not a JVM's stack.
"""

from __future__ import annotations

import re
import socket
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import partita

if TYPE_CHECKING:
    from pyspark import SparkContext

LOCAL_MASTER = "local[2]"
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}


class SparkClusterError(Exception):
    """Why the job cannot run its Spark stages where it was asked to: one line."""


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def standalone_masters(master: str) -> list[tuple[str, int]]:
    """The HOST:PORT of each master in a ``spark://H1:P1[,H2:P2]`` URL (several with
    ZooKeeper standby masters); none for YARN, Kubernetes or local."""
    if not master.startswith("spark://"):
        return []
    addresses = []
    for entry in master.removeprefix("spark://").split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not colon or not host or not port.isdigit():
            raise SparkClusterError(
                f"--spark-master {master!r}: expected spark://HOST:PORT[,HOST:PORT...]"
            )
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def check_master(master: str, timeout: float = 5.0) -> None:
    """Refuse, within seconds, a standalone master nobody answers at: Spark itself would
    retry registering for a minute before saying 'All masters are unresponsive'."""
    if not (is_local(master) or master.startswith(("spark://", "yarn", "k8s://"))):
        raise SparkClusterError(
            f"--spark-master {master!r}: expected local[N], spark://HOST:PORT, yarn or k8s://..."
        )
    errors = []
    for host, port in (addresses := standalone_masters(master)):
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if addresses:
        raise SparkClusterError(f"cannot reach the Spark master at {master}: {'; '.join(errors)}")


def on_this_host(master: str) -> bool:
    """Whether a standalone master is on loopback: then its workers are on this machine
    too, and the driver listens on loopback for them (as everything local here does)."""
    addresses = standalone_masters(master)
    return bool(addresses) and all(
        host in LOOPBACK_HOSTS or host.startswith("127.") for host, _ in addresses
    )


def package_zip(directory: Path) -> Path:
    """partita's code as a zip the executors put on their path (spark-submit --py-files)."""
    root = Path(partita.__file__).parent
    target = directory / "partita.zip"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                archive.write(path, Path("partita") / path.relative_to(root))
    return target


def executors(context: SparkContext) -> int:
    """Executors registered with the driver (the driver's own block manager not counted)."""
    status = context._jsc.sc().getExecutorMemoryStatus()
    return int(status.size()) - 1


def wait_for_executors(context: SparkContext, master: str, timeout: float) -> int:
    """Wait until an executor has joined: a cluster whose workers are missing, full or
    too small would otherwise leave the first job waiting forever, warning only in the
    driver's log that it 'has not accepted any resources'."""
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while (count := executors(context)) < 1:
        if time.monotonic() > deadline:
            raise SparkClusterError(
                f"no executor started on {master} within {timeout:.0f} s: the master has no "
                "worker with free cores and memory for the job (its web UI lists the "
                "workers; spark.executor.memory and spark.cores.max size what the job asks; "
                f"{WAIT_SETTING} how long it waits)"
            )
        time.sleep(0.2)
    return count


# Spark's own setting for how long to wait for executors to register before scheduling;
# the job waits for the first one that long (Spark's default is 30 s; ours is longer, as
# a cluster may have to start an executor JVM per worker).
WAIT_SETTING = "spark.scheduler.maxRegisteredResourcesWaitingTime"
DEFAULT_WAIT_SECONDS = 60.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, None: 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def executor_wait_seconds(settings: dict[str, str]) -> float:
    """The wait for an executor: spark.scheduler.maxRegisteredResourcesWaitingTime, in
    Spark's notation (30s, 500ms, 2min; a bare number is milliseconds), else 60 s."""
    value = settings.get(WAIT_SETTING)
    if value is None:
        return DEFAULT_WAIT_SECONDS
    found = _DURATION.match(value)
    if found is None:
        raise SparkClusterError(f"{WAIT_SETTING}={value!r}: expected a duration such as 30s")
    return float(found.group(1)) * _UNIT_SECONDS[found.group(2)]


MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def explain_failure(error: BaseException, worker_python: str) -> str | None:
    """One line for a Spark failure whose cause is a worker's Python lacking a module,
    with the fix; None for any other failure (its traceback says more than a line)."""
    found = MISSING_MODULE.search(str(error))
    if found is None:
        return None
    module = found.group(1)
    if module.split(".")[0] == "partita":
        return (
            "the Spark executors cannot import partita (ModuleNotFoundError: "
            f"{module}): let the job ship it (drop --no-ship-package) or install it on every "
            f"worker: {worker_python} -m pip install PARTITA_WHEEL (pip wheel . in a checkout "
            "builds one)"
        )
    return (
        f"the Spark executors' Python ({worker_python}) lacks {module!r}, which partita "
        f"needs: install partita's dependencies on every worker ({worker_python} -m pip "
        "install PARTITA_WHEEL brings them), or point --worker-python at a Python that has "
        "them"
    )
