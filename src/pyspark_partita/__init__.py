"""Lets Spark find ``format("partita")`` with no registration call.

PySpark looks for top-level modules named ``pyspark_*`` that expose ``DefaultSource``.
"""

from partita.spark.source import PartitaDataSource as DefaultSource

__all__ = ["DefaultSource"]
