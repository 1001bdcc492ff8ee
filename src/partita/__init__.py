"""partita: a Kafka-compatible, partitioned, replicated commit log written in Python."""

__version__ = "0.1.0"
