"""The README's Spark example, as written, run the way a user runs it: a venv's interpreter
that is not activated, no PYSPARK_PYTHON, against a real broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as KafkaProducer

from tests.integration.conftest import BrokerProcess
from tests.spark.test_connector import create_topic, read

README = Path(__file__).resolve().parents[2] / "README.md"
README_BOOTSTRAP = "127.0.0.1:9092"


def readme_spark_example() -> str:
    """The first Python block of the README's "### Spark" section."""
    section = README.read_text().split("\n### Spark\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None, "no Python block in the README's Spark section"
    return found.group(1)


def user_environment() -> dict[str, str]:
    """A shell's environment with nothing of this venv in it: no activation, no PYSPARK_*."""
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p != venv_bin]
    env = {"PATH": os.pathsep.join(path)}
    for name in ("HOME", "LANG", "JAVA_HOME", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def test_the_readme_spark_example_runs_with_the_venvs_python_alone(
    spark: Any, spark_broker: BrokerProcess, tmp_path: Path
) -> None:
    assert sys.prefix != sys.base_prefix, "run the tests with the venv's interpreter"
    example = readme_spark_example()
    # The one change: the test broker's address for the README's.
    assert README_BOOTSTRAP in example
    script = tmp_path / "readme_example.py"
    script.write_text(example.replace(README_BOOTSTRAP, spark_broker.bootstrap))

    create_topic(spark_broker, "flights", 2)
    create_topic(spark_broker, "out", 2)
    producer = KafkaProducer({"bootstrap.servers": spark_broker.bootstrap})
    for n in range(50):
        producer.produce("flights", key=f"k{n}", value=f"flight-{n}", partition=n % 2)
    assert producer.flush(30) == 0

    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=user_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # The error's name, not the end of a Java stack trace.
    errors = [line for line in done.stderr.splitlines() if "Error" in line or "Exception" in line]
    assert done.returncode == 0, "\n".join(errors[:20]) or done.stderr[-4000:]
    rows = read(spark, spark_broker, subscribe="out").collect()
    assert sorted(r.value for r in rows) == sorted(f"FLIGHT-{n}".encode() for n in range(50))
    assert {r.key for r in rows} == {f"k{n}".encode() for n in range(50)}
