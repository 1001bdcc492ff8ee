"""partita console: a web UI over any Kafka-compatible cluster (partita console)."""
