"""The broker: asyncio listener, connections, request handlers, lifecycle, config."""
