"""Consumer group partition assignors, speaking Kafka's standard consumer protocol."""
