"""partita's Spark connector: Spark's Kafka source and sink as a Python data source."""
