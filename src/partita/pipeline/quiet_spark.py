"""A local Spark session whose JVM starts without printing its usual five lines.

A JVM started by PySpark 4 says, before anything the job prints:

- ``WARNING: Using incubator modules: jdk.incubator.vector``: the JVM itself, at boot,
  because Spark's launcher always adds ``--add-modules=jdk.incubator.vector``; no JVM
  option or Spark setting turns it off;
- ``Using Spark's default log4j profile: ...``, ``Setting default log level to "WARN".``
  and ``To adjust logging level use sc.setLogLevel(newLevel)...``: Spark, when log4j2 has
  no configuration of its own;
- ``WARN NativeCodeLoader: Unable to load native-hadoop library...``: Hadoop, at every
  start on a machine without its native library (its Java code is used instead).

Spark allows the last four to be configured away: the driver's JVM gets a log4j2
configuration of ours (``-Dlog4j2.configurationFile``), with Spark's console format, the
root at WARN (so Spark has no level to announce) and Hadoop's native-library notice at
ERROR. The first can only be filtered: the JVM's stderr goes through ``jvm_stderr_filter``,
which drops that one line. Everything else the JVM or its Python workers print (warnings,
errors, tracebacks) still reaches stderr, as before.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

# The filters started, kept so that none is collected (and warned about) while it runs;
# each ends when its JVM does.
_STDERR_FILTERS: list[subprocess.Popen[bytes]] = []

LOG4J2_PROPERTIES = """\
# Spark's console logging (its log4j2-defaults.properties), less the startup notices.
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# Hadoop's Java code stands in for its native library; no need to say so at every start.
logger.hadoop_native.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop_native.level = error
"""


def quiet_session(conf: SparkConf) -> SparkSession:
    """The session for ``conf``, its JVM started without the startup lines above.

    PySpark starts one JVM per process: with one already running, this is
    ``SparkSession.builder.config(conf=conf).getOrCreate()``, and whatever that JVM
    printed when it started is past.
    """
    if SparkContext._gateway is not None:
        return SparkSession.builder.config(conf=conf).getOrCreate()
    options = conf.get("spark.driver.extraJavaOptions", "")
    configuration = _log4j2_configuration().as_uri()
    conf.set(
        "spark.driver.extraJavaOptions",
        f"{options} -Dlog4j2.configurationFile={configuration}".strip(),
    )
    filter_reads, jvm_writes = os.pipe()
    try:
        _STDERR_FILTERS.append(
            subprocess.Popen(
                [sys.executable, "-m", "partita.pipeline.jvm_stderr_filter"], stdin=filter_reads
            )
        )
        # launch_gateway's popen_kwargs are PySpark's way to capture the JVM's output.
        gateway = launch_gateway(conf, popen_kwargs={"stderr": jvm_writes})  # type: ignore[no-untyped-call]
    finally:
        # The filter and the JVM hold their ends now: the filter sees the end of its input
        # when the JVM exits.
        os.close(filter_reads)
        os.close(jvm_writes)
    SparkContext(conf=conf, gateway=gateway)
    return SparkSession.builder.getOrCreate()


def _log4j2_configuration() -> Path:
    """The configuration as a file for this process's JVM, removed when the process ends."""
    directory = Path(tempfile.mkdtemp(prefix="partita-spark-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / "log4j2.properties"
    path.write_text(LOG4J2_PROPERTIES)
    return path
