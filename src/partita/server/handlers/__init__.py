"""Request handlers: one module per group of Kafka APIs, each a plain function
``(broker, context, request) -> response`` (async where it may wait); see ``dispatch``."""
