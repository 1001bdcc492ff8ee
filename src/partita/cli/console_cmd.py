"""``partita console``: the web console, served from the package (no network needed)."""

from __future__ import annotations

import typer

from partita.cli.common import bootstrap_option, client_settings, fail


def console(
    listen: str = typer.Option(
        "127.0.0.1:8080", "--listen", metavar="HOST:PORT", help="Where the console serves."
    ),
    read_only: bool = typer.Option(
        False, "--read-only", help="Show everything, change nothing: no reassignment, no advisor."
    ),
    interval: float = typer.Option(
        2.0, "--interval", help="Seconds between polls of the cluster (one poll for all pages)."
    ),
    bootstrap: str = bootstrap_option(),
) -> None:
    """Serve a web console for a cluster (partita or Apache Kafka).

    Cluster: brokers, who leads and follows what, leaders per broker. Topics: replicas,
    ISR, offsets, sizes, rates, skew and hot keys. Consumer groups: members and lag.
    Reassignment: a minimal-move plan, executed on confirmation. Sizing: the partition
    count a throughput needs, measured. Pages update live. The console connects with the
    security settings given to partita (--command-config), as that principal.

    Example: partita console -b broker1:9092 --listen 0.0.0.0:8080 --read-only
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise fail(f"--listen expects HOST:PORT, got {listen!r}")
    if interval < 0.2:
        raise fail("--interval is at least 0.2 s")
    import uvicorn  # noqa: PLC0415

    from partita.console.app import create_app  # noqa: PLC0415
    from partita.console.state import Settings  # noqa: PLC0415
    from partita.logs import configure  # noqa: PLC0415

    configure()
    # Served on one address, it answers to that name (and loopback's); on every address
    # (0.0.0.0), to any name: it is then reached by names this host cannot know.
    everywhere = host in ("", "0.0.0.0", "::", "[::]")
    names = None if everywhere else [host.strip("[]"), "127.0.0.1", "localhost", "::1"]
    app = create_app(Settings(bootstrap, client_settings(), read_only, interval, names))
    print(
        f"partita console on http://{host or '127.0.0.1'}:{port_text} for {bootstrap}", flush=True
    )
    try:
        uvicorn.run(app, host=host or "127.0.0.1", port=int(port_text), log_level="warning")
    except OSError as exc:
        raise fail(f"cannot serve on {listen}: {exc.strerror or exc}") from None
