"""Keep PySpark's per-task garbage collection from walking our modules' objects.

A reused PySpark Python worker (one forked by ``pyspark.daemon``) runs a full
``gc.collect()`` after every task. A full collection walks every object the process
tracks, and the connector's tasks load numba, llvmlite, pyarrow and kafka-python: about
180,000 objects, so that collection took 50-62 ms a task here, against 7.5 ms in a worker
that loaded only pyspark. The workers that plan a query and commit a write pay it too
(~36 ms with the sink's modules). In a 2M-row write that was more than half of the
Python workers' CPU (0.81 CPU s a pass before, 0.35 after). Those objects are module
state that lives as long as the process, so each entry point that runs in such a worker
first moves everything alive out of the collector's sight with ``gc.freeze()`` (what
prefork servers do before forking), if modules were loaded since the last time: later
collections cost what they cost before any of it was loaded.

An entry point runs right after the daemon's collection, so what it freezes is the
process's long-lived state plus the task's own few input objects (its pickled reader or
writer), never a task's garbage. Nothing happens outside such a worker: a driver or a
test process keeps its collector as it was.
"""

from __future__ import annotations

import gc
import sys


def in_reused_pyspark_worker() -> bool:
    """True in a worker forked by ``pyspark.daemon``, the one that collects per task."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "pyspark.daemon"


class _Freezer:
    def __init__(self) -> None:
        self.modules_when_frozen = 0

    def __call__(self) -> None:
        """Freeze everything alive if modules were loaded since the last freeze (or ever)."""
        loaded = len(sys.modules)
        if loaded != self.modules_when_frozen and in_reused_pyspark_worker():
            gc.freeze()
            self.modules_when_frozen = loaded


freeze_loaded_modules = _Freezer()
