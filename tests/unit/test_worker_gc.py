"""The Spark connector moves long-lived module state out of the collector's sight once
its compiled code is loaded, so PySpark's per-task gc.collect() stops walking it.

Each case runs in a fresh interpreter: freezing is process-wide and for good.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_in_fresh_python(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return result.stdout.strip()


def test_nothing_is_frozen_before_the_compiled_code_is_loaded() -> None:
    out = run_in_fresh_python(
        """
        import gc
        from partita.spark.worker_gc import freeze_loaded_modules
        freeze_loaded_modules()
        print(gc.get_freeze_count())
        """
    )
    assert out == "0"


def test_a_task_after_the_encoder_loaded_freezes_the_module_state_once() -> None:
    out = run_in_fresh_python(
        """
        import gc
        import pyarrow as pa
        from partita.protocol.bulk_records import encode_record_sets
        from partita.spark.worker_gc import freeze_loaded_modules
        encode_record_sets(pa.array([b"v"] * 3), None)  # loads the numba encoder
        gc.collect()
        freeze_loaded_modules()
        frozen = gc.get_freeze_count()
        task_objects = [[i] for i in range(1000)]  # a task's own allocations
        freeze_loaded_modules()  # nothing new loaded: nothing more frozen
        print(frozen, gc.get_freeze_count(), len(gc.get_objects()) < 5000)
        """
    )
    frozen, again, few_left = out.split()
    assert int(frozen) > 50_000  # numba, llvmlite, pyarrow: what a collection walked
    assert again == frozen
    assert few_left == "True"  # what a full collection still walks
