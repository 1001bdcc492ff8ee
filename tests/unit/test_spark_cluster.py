"""Where the main job's Spark stages run (pipeline/spark_cluster.py): master URLs, the
executor wait, the zip shipped to executors, and the one-line explanations."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from partita.pipeline.spark_cluster import (
    SparkClusterError,
    check_master,
    executor_wait_seconds,
    explain_failure,
    is_local,
    on_this_host,
    package_zip,
    standalone_masters,
)


def test_master_urls() -> None:
    assert is_local("local[2]") and is_local("local") and not is_local("spark://h:7077")
    assert standalone_masters("spark://a:7077,b:7078") == [("a", 7077), ("b", 7078)]
    assert standalone_masters("yarn") == []
    assert on_this_host("spark://127.0.0.1:7077") and not on_this_host("spark://10.0.0.5:7077")
    with pytest.raises(SparkClusterError, match="expected spark://HOST:PORT"):
        standalone_masters("spark://nohost")
    with pytest.raises(SparkClusterError, match="expected local"):
        check_master("mesos://x:5050")


def test_the_executor_wait_reads_sparks_own_setting() -> None:
    assert executor_wait_seconds({}) == 60.0
    key = "spark.scheduler.maxRegisteredResourcesWaitingTime"
    assert executor_wait_seconds({key: "3s"}) == 3.0
    assert executor_wait_seconds({key: "1500"}) == 1.5  # a bare number is ms, as in Spark
    assert executor_wait_seconds({key: "2min"}) == 120.0
    with pytest.raises(SparkClusterError, match="expected a duration"):
        executor_wait_seconds({key: "soon"})


def test_the_shipped_zip_holds_partitas_code_and_no_bytecode(tmp_path: Path) -> None:
    names = zipfile.ZipFile(package_zip(tmp_path)).namelist()
    assert "partita/__init__.py" in names and "partita/spark/source.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_a_missing_module_on_a_worker_is_explained_with_the_fix() -> None:
    error = RuntimeError("...\nModuleNotFoundError: No module named 'partita.spark'\n...")
    line = explain_failure(error, "/opt/py/bin/python")
    assert line and "cannot import partita" in line and "--no-ship-package" in line
    line = explain_failure(RuntimeError("ModuleNotFoundError: No module named 'crc32c'"), "py")
    assert line and "lacks 'crc32c'" in line and "py -m pip install" in line
    assert explain_failure(RuntimeError("division by zero"), "py") is None
