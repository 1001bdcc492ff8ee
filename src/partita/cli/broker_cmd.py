"""``partita broker``: run one broker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from partita.cli.common import fail


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise typer.BadParameter(f"expected HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def run(
    data_dir: Path | None = typer.Option(
        None,
        "--data-dir",
        help="Where partition logs and metadata live (default: log.dirs, or log.dir, of "
        "--config: one directory).",
    ),
    listen: str = typer.Option(
        "127.0.0.1:9092", "--listen", help="HOST:PORT to accept Kafka clients on (port 0: any)."
    ),
    node_id: int | None = typer.Option(
        None, "--node-id", help="This broker's id (node.id, default 0)."
    ),
    config_file: Path | None = typer.Option(
        None, "--config", help="A Kafka server.properties file (key=value lines)."
    ),
    settings: list[str] = typer.Option(
        [], "--set", help="A Kafka broker setting, e.g. --set log.retention.hours=24 (repeatable)."
    ),
    ready_file: Path | None = typer.Option(
        None,
        "--ready-file",
        help="Once clients can connect, write here HOST:PORT of the first listener, then "
        "one line per listener: NAME HOST:PORT.",
    ),
    metrics_listen: str | None = typer.Option(
        None,
        "--metrics-listen",
        help="HOST:PORT to serve Prometheus metrics on, at /metrics (port 0: any; the log "
        "says which). Off unless given.",
    ),
    metadata: str | None = typer.Option(
        None,
        "--metadata",
        help="etcd://HOST:PORT[,HOST:PORT...][/PREFIX] (or metadata.url in --config): "
        "join the cluster whose metadata "
        "lives in etcd under PREFIX (default partita). Without it the broker runs alone, "
        "its metadata in the data directory.",
    ),
) -> None:
    """Run a Kafka-compatible broker on a local data directory.

    Clients connect with their usual settings (bootstrap.servers=HOST:PORT). Settings use
    Kafka's names and defaults; --set wins over --config. SIGTERM or Ctrl-C stops the
    broker cleanly: data flushed, files closed, exit code 0.

    Example: partita broker --data-dir ./data --listen 127.0.0.1:9092 --set num.partitions=6

    With --metrics-listen 127.0.0.1:9404, Prometheus scrapes http://127.0.0.1:9404/metrics:
    requests and their latency by API, records and bytes in and out by topic, refused
    produces by error, and each partition's size and offsets.

    A cluster: start each broker with its own --node-id and data directory and the same
    --metadata etcd://127.0.0.1:2379, e.g. --node-id 1 --set broker.rack=a; or let
    `partita cluster up --brokers 3` start etcd and the brokers for you.

    On a host of its own a server.properties is enough (docs/deployment.md): node.id,
    log.dirs, listeners, advertised.listeners and metadata.url=etcd://h1:2379,h2:2379,
    h3:2379/partita; then: partita broker --config /etc/partita/server.properties
    """
    # Loaded here, not above: `partita broker --help` should not wait for the broker.
    from partita.errors import KafkaError  # noqa: PLC0415
    from partita.server.config import (  # noqa: PLC0415
        BrokerConfig,
        parse_assignments,
        read_properties,
    )
    from partita.server.runtime import serve  # noqa: PLC0415

    host, port = _parse_listen(listen)
    metrics = _parse_listen(metrics_listen) if metrics_listen is not None else None
    try:
        sources = []
        if config_file is not None:
            sources.append(read_properties(config_file))
        sources.append(parse_assignments(settings))
        if node_id is not None:
            sources.append({"node.id": str(node_id)})
        config = BrokerConfig.from_sources(*sources)
        data_dir = data_dir or _data_dir_of(config.values)
        metadata = metadata or config.values.get(METADATA_KEY) or None
        if metadata is not None:
            _check_metadata_url(metadata)
        code = asyncio.run(
            serve(config, data_dir, host, port, ready_file, metrics, metadata=metadata)
        )
    except KafkaError as exc:
        raise fail(exc.message) from None
    except OSError as exc:
        raise fail(f"{exc.strerror or exc}: {listen}") from None
    raise typer.Exit(code)


# The --metadata of a broker started with --config alone (Kafka has no such setting).
METADATA_KEY = "metadata.url"


def _data_dir_of(values: dict[str, str]) -> Path:
    """The data directory server.properties names: Kafka's log.dirs (else log.dir)."""
    listed = values.get("log.dirs") or values.get("log.dir") or ""
    dirs = [d.strip() for d in listed.split(",") if d.strip()]
    if not dirs:
        raise typer.BadParameter(
            "give --data-dir, or log.dirs in the --config file", param_hint="--data-dir"
        )
    if len(dirs) > 1:
        raise typer.BadParameter(
            f"log.dirs names {len(dirs)} directories; a partita broker keeps one "
            "(use RAID or one broker per disk)",
            param_hint="--config",
        )
    return Path(dirs[0])


def _check_metadata_url(url: str) -> None:
    if not url.startswith("etcd://"):
        raise typer.BadParameter(
            f"expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX], got {url!r}",
            param_hint="--metadata",
        )
    from partita.cluster.etcd_kv import parse_endpoints  # noqa: PLC0415

    try:
        parse_endpoints(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--metadata") from None
