"""Keep PySpark's per-task garbage collection from walking our modules' objects.

A reused PySpark Python worker runs a full ``gc.collect()`` after every task
(``pyspark/daemon.py``). A full collection walks every object the process tracks, and
the connector's tasks load numba, llvmlite, pyarrow and kafka-python: about 180,000
objects, so that collection took 50-62 ms a task here, against 7.5 ms in a worker that
loaded only pyspark. Four tasks a pass made it about a quarter of the Python workers' CPU
in a 2M-row write. Those objects are module state that lives as long as the process,
so a task that finds modules loaded since the last time moves everything alive out of the
collector's sight with ``gc.freeze()`` (what prefork servers do before forking): later
collections cost what they cost before any of it was loaded.

It runs at the start of a task, right after the daemon's collection, so what it freezes
is the process's long-lived state plus the task's own few input objects (its pickled
reader or writer), never a task's garbage. A worker freezes after its first read and
its first write (each loads its own compiled code), then stops.
"""

from __future__ import annotations

import gc
import sys


class _Freezer:
    def __init__(self) -> None:
        self.modules_when_frozen = 0

    def __call__(self) -> None:
        """Freeze everything alive if modules were loaded since the last freeze (or ever)."""
        loaded = len(sys.modules)
        if loaded != self.modules_when_frozen and "numba" in sys.modules:
            gc.freeze()
            self.modules_when_frozen = loaded


freeze_loaded_modules = _Freezer()
