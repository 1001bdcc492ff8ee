"""Bootstrap server lists (``HOST:PORT[,HOST:PORT…]``), checked before anything connects.

Kept apart from ``cluster`` so that a command line can check its ``-b`` without loading
the client's protocol classes.
"""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"


def parse_bootstrap(servers: str | list[str]) -> list[tuple[str, int]]:
    """``[(host, port), …]``; ValueError naming the entry that is not ``HOST:PORT``.

    An empty host means 127.0.0.1 (``:9092``); ``[::1]:9092`` is an IPv6 address."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        entry = item.strip()
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {entry!r} is not HOST:PORT (e.g. 127.0.0.1:9092)")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        out.append((host or DEFAULT_HOST, int(port)))
    return out
