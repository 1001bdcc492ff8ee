"""Request handlers: one module per group of Kafka APIs, each a plain function
``handle(broker, header, request) -> response`` (async where it may wait)."""
