"""The Spark connector moves long-lived module state out of the collector's sight in the
reused PySpark workers that collect after every task, and nowhere else.

Each case runs in a fresh interpreter: freezing is process-wide and for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# What a worker forked by pyspark.daemon looks like to the check: its __main__ is that
# module (pyspark's daemon forks without exec).
AS_A_DAEMON_WORKER = """
import importlib.machinery, sys
sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec("pyspark.daemon", None)
"""


def run_in_fresh_python(code: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.split()


LOAD_AND_FREEZE_TWICE = """
import gc
import pyarrow as pa
from partita.protocol.bulk_records import encode_record_sets
from partita.spark.worker_gc import freeze_loaded_modules
encode_record_sets(pa.array([b"v"] * 3), None)  # loads the numba encoder
gc.collect()
freeze_loaded_modules()
first = gc.get_freeze_count()
task_objects = [[i] for i in range(1000)]  # a task's own allocations
freeze_loaded_modules()  # nothing new loaded: nothing more frozen
second = gc.get_freeze_count()
import http.cookiejar  # something new
freeze_loaded_modules()
print(first, second, gc.get_freeze_count(), len(gc.get_objects()) < 5000)
"""


def test_a_daemon_worker_freezes_what_is_loaded_once_and_again_after_new_modules() -> None:
    first, second, third, few_left = run_in_fresh_python(AS_A_DAEMON_WORKER + LOAD_AND_FREEZE_TWICE)
    assert int(first) > 50_000  # numba, llvmlite, pyarrow: what a collection walked
    assert second == first
    assert int(third) > int(first)
    assert few_left == "True"  # what a full collection still walks


def test_any_other_process_keeps_its_collector_as_it_was() -> None:
    first, second, third, _ = run_in_fresh_python(LOAD_AND_FREEZE_TWICE)
    assert (first, second, third) == ("0", "0", "0")
