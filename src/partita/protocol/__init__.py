"""Sans-IO pieces of Kafka's wire and on-disk formats."""
