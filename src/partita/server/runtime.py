"""Running a broker process: start, serve, background maintenance, clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from dataclasses import replace
from pathlib import Path

from partita.errors import KafkaError
from partita.server.authentication import ListenerSecurity
from partita.server.broker import Broker
from partita.server.config import BrokerConfig
from partita.server.metrics import serve_metrics
from partita.server.network import BrokerServer

log = logging.getLogger(__name__)

_TICK_SECONDS = 1.0


async def _maintenance(broker: Broker, stop: asyncio.Event) -> None:
    """flush.ms and delayed deletes every second; retention, compaction and checkpoints
    on Kafka's intervals. Disk-heavy work runs in a thread, never on the event loop."""
    retention_every = broker.config.get_int("log.retention.check.interval.ms") / 1000
    checkpoint_every = broker.config.get_int("log.flush.offset.checkpoint.interval.ms") / 1000
    next_retention = time.monotonic() + retention_every
    next_checkpoint = time.monotonic() + checkpoint_every
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_TICK_SECONDS):
                await stop.wait()
        if stop.is_set():
            return
        now = time.monotonic()
        try:
            # On the loop: ISR changes go through the metadata store's client.
            broker.replicas.shrink_lagging_isrs()
            broker.replicas.report_offline_replicas()
            if now >= next_retention:
                next_retention = now + retention_every
                totals = await asyncio.to_thread(broker.run_maintenance)
                if any(totals.values()):
                    log.info("maintenance", extra=totals)
            else:
                await asyncio.to_thread(_quick_maintenance, broker)
            if now >= next_checkpoint:
                next_checkpoint = now + checkpoint_every
                await asyncio.to_thread(broker.logs.checkpoint)
        except Exception:
            log.exception("maintenance pass failed; will retry")


def _quick_maintenance(broker: Broker) -> None:
    for partition_log in broker.logs:
        if partition_log.offline_reason is None:
            partition_log.maybe_flush()
            partition_log.purge_deleted_segments()


async def serve(
    config: BrokerConfig,
    data_dir: Path,
    host: str,
    port: int,
    ready_file: Path | None = None,
    metrics_listen: tuple[str, int] | None = None,
    metadata: str | None = None,
) -> int:
    listeners = config.listeners(host, port)
    broker = Broker(config, data_dir, listeners, metadata)
    securities = [
        ListenerSecurity.from_config(config, spec.name, spec.protocol, broker.store)
        for spec in listeners
    ]
    broker.lock_data_dir()  # first: a second broker on the directory must open nothing
    metrics_server = None
    if metrics_listen is not None:
        # Before startup, so that a taken port stops the broker before it opens any log.
        try:
            metrics_server = await serve_metrics(broker.metrics, *metrics_listen)
        except OSError as exc:
            where = "{}:{}".format(*metrics_listen)
            raise KafkaError(f"cannot serve metrics on {where}: {exc.strerror or exc}") from exc
        bound = metrics_server.sockets[0].getsockname()
        log.info(
            "metrics listening", extra={"host": bound[0], "port": bound[1], "path": "/metrics"}
        )
    started = time.monotonic()
    await broker.cluster.connect()  # the image first: it says which partitions are ours
    broker.startup()
    # Everything loaded so far (modules, kafka-python's classes, the logs' indexes) lives
    # as long as the broker: kept out of the collector's full passes, which otherwise
    # walk it all again on every one of them, on the event loop.
    gc.collect()
    gc.freeze()
    servers: list[BrokerServer] = []
    for index, (spec, security) in enumerate(zip(listeners, securities, strict=True)):
        server = BrokerServer(broker, security)
        try:
            bound = await server.start(spec.host, spec.port)
        except OSError as exc:
            for started_server in servers:
                await started_server.stop()
            raise KafkaError(
                f"cannot listen on {spec.name}://{spec.host}:{spec.port}: {exc.strerror or exc}"
            ) from exc
        servers.append(server)
        broker.listeners[index] = replace(spec, port=bound)
    await broker.cluster.join()  # electable from here on
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    for spec in broker.listeners:
        log.info(
            "listening",
            extra={
                "listener": spec.name,
                "security_protocol": spec.protocol,
                "host": spec.host,
                "port": spec.port,
                "inter_broker": spec.name == broker.inter_broker_listener,
                "startup_seconds": round(time.monotonic() - started, 3),
            },
        )
    if ready_file is not None:
        # The first listener's address, then every listener by name.
        first = broker.listeners[0]
        lines = [f"{first.host}:{first.port}"]
        lines += [f"{spec.name} {spec.host}:{spec.port}" for spec in broker.listeners]
        # Whole or not at all: whoever waits for the file reads it once it exists.
        partial = ready_file.with_name(ready_file.name + ".tmp")
        partial.write_text("\n".join(lines) + "\n")
        partial.replace(ready_file)
    maintenance = asyncio.create_task(_maintenance(broker, stop))
    broker.groups.start()
    broker.transactions.start()
    await stop.wait()
    log.info("stopping", extra={"requests_served": sum(s.requests_served for s in servers)})
    # Hand leaderships over while clients can still reach us and learn the new leaders.
    await broker.leave_cluster(config.get_int("controlled.shutdown.timeout.ms") / 1000)
    for server in servers:
        await server.stop()
    if metrics_server is not None:
        metrics_server.close()
        await metrics_server.wait_closed()
    await broker.groups.stop()
    await broker.transactions.stop()
    await maintenance
    broker.shutdown()
    return 0
