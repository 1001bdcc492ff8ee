"""Spark's Python workers run the interpreter that started the session, unless told otherwise.

Spark starts every Python worker with ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``,
as the JVM found them in the environment it inherited when the session started. Finding
``format("partita")`` is itself such a worker's job (it scans for ``pyspark_*`` modules),
so a script run by a virtualenv's interpreter that is not activated (``.venv/bin/python
job.py``) had the system Python look, which has no partita, and Spark answered
DATA_SOURCE_NOT_FOUND. The driver's own interpreter finds partita wherever the driver does.
"""

from __future__ import annotations

import os
import sys


def default_workers_to_this_interpreter() -> None:
    """Make sessions started from now on run their Python workers on ``sys.executable``.

    An explicit ``PYSPARK_PYTHON`` wins; a session already running keeps what it has
    (its JVM read the environment when it started).
    """
    if sys.executable:  # empty in an embedded interpreter, which Spark cannot start anyway
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
