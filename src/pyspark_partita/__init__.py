"""Lets Spark find ``format("partita")`` with no registration call.

PySpark looks for top-level modules named ``pyspark_*`` that expose ``DefaultSource``. It
looks from a Python worker, which must be an interpreter that has partita: imported in the
driver before the session starts, this module makes the workers run the driver's
interpreter when ``PYSPARK_PYTHON`` does not name one (see ``partita.spark.worker_python``).
"""

from partita.spark.source import PartitaDataSource as DefaultSource
from partita.spark.worker_python import default_workers_to_this_interpreter

default_workers_to_this_interpreter()

__all__ = ["DefaultSource"]
