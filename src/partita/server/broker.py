"""The broker's state and lifecycle: config, metadata store, logs, topics, producer ids.

Every broker is a cluster member (``cluster_node``): given ``metadata="etcd://..."`` its
metadata lives in etcd; alone, in a file-backed KV of its data directory, a cluster of
one with its own controller. Past this module only ``alone`` differs (no lease fencing,
no followers to fetch for). The network layer (``partita.server.network``) and
``runtime`` drive it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from partita.cluster.etcd_kv import EtcdKV, EtcdSecurity, parse_endpoints
from partita.cluster.file_kv import METADATA_KV_FILE, FileKV
from partita.cluster.image import Changes
from partita.cluster.kv import KV
from partita.cluster.model import BrokerInfo
from partita.cluster.store import MetadataStore
from partita.errors import InvalidConfigurationError
from partita.replication.fetcher import FetcherManager
from partita.replication.throttle import ByteRateLimit
from partita.server.authentication import inter_broker_security
from partita.server.authorization import Authorization, build_authorizer
from partita.server.cluster_node import ClusterNode
from partita.server.config import BrokerConfig, ListenerSpec
from partita.server.group_service import GroupService
from partita.server.metrics import BrokerMetrics
from partita.server.partition import always_trusted
from partita.server.quotas import QuotaManager
from partita.server.replica_manager import ReplicaManager
from partita.server.topic_admin import TopicAdmin
from partita.server.transaction_service import TransactionService
from partita.storage.dir_lock import DataDirLock
from partita.storage.log_manager import LogManager
from partita.storage.meta_properties import claim_data_dir

log = logging.getLogger(__name__)


def etcd_security(config: BrokerConfig) -> EtcdSecurity:
    """The etcd.* settings: files read now, a missing one a one-line error at start."""

    def read(key: str) -> bytes | None:
        path = config.get(key).strip()
        if not path:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise InvalidConfigurationError(f"{key}={path}: {exc.strerror or exc}") from None

    ca = read("etcd.ssl.ca.location")
    certificate, key = read("etcd.ssl.certificate.location"), read("etcd.ssl.key.location")
    if (certificate is None) != (key is None) or (certificate is not None and ca is None):
        raise InvalidConfigurationError(
            "etcd.ssl.certificate.location and etcd.ssl.key.location go together, "
            "with etcd.ssl.ca.location"
        )
    return EtcdSecurity(
        ca,
        certificate,
        key,
        config.get("etcd.ssl.server.name").strip() or None,
        config.get("etcd.username").strip() or None,
        config.get("etcd.password") or None,
    )


class Broker:
    """The composition root: builds each collaborator with what it needs, in order, and
    nothing is wired after construction."""

    def __init__(
        self,
        config: BrokerConfig,
        data_dir: Path,
        listeners: list[ListenerSpec],
        metadata: str | None = None,
    ) -> None:
        self.config = config
        self.data_dir = data_dir
        # Bound ports replace the configured ones (0: any) once the servers listen.
        self.listeners = list(listeners)
        self.inter_broker_listener = config.inter_broker_listener(self.listeners).name
        self.node_id = config.node_id
        # A broker alone runs the cluster's store, image and controller over a KV kept in
        # its data directory: a cluster of one, through the same code as etcd's.
        self.alone = metadata is None
        if metadata is None:
            kv_path = data_dir / METADATA_KV_FILE
            kv: KV = FileKV(kv_path)
            prefix, source, adopt_from = "partita", str(kv_path), data_dir
        else:
            endpoints, prefix = parse_endpoints(metadata)
            kv, source, adopt_from = EtcdKV(endpoints, etcd_security(config)), metadata, None
        self.cluster = ClusterNode(
            config,
            kv,
            prefix,
            source,
            lambda: self.info,
            self._unclean_leader_election,
            adopt_from=adopt_from,
        )
        self.store: MetadataStore = self.cluster.store
        self.authorization = Authorization(build_authorizer(config), self.store)
        self.quotas = QuotaManager(
            config.get_int("quota.window.size.seconds"), config.get_int("quota.window.num")
        )
        self.store.subscribe(self._quotas_changed)
        self.topic_admin = TopicAdmin(config, self.store)
        self.logs = LogManager(data_dir, self.topic_admin.log_config)
        self.metrics = BrokerMetrics(self.store)
        cluster = self.cluster
        self.replicas = ReplicaManager(
            self.node_id,
            self.store,
            self.logs,
            self.topic_admin.log_config,
            replica_lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
            # Alone, nobody else can take a partition over: its lease fences nothing.
            lease=always_trusted if self.alone else cluster.lease_state,
            fetchers=None
            if self.alone
            else FetcherManager(
                self.node_id,
                cluster.address_of,
                self._follower_throttle,
                inter_broker_security(config, config.inter_broker_listener(self.listeners)),
            ),
            isr_changed=self.metrics.isr_changed,
        )
        self.groups = GroupService(config, self.store, self.replicas, self.topic_admin)
        self.transactions = TransactionService(
            config,
            self.store,
            self.replicas,
            self.topic_admin,
            self.node_id,
            None if self.alone else cluster.address_of,
            # Alone, every partition's leader is this broker: no markers go elsewhere.
            None
            if self.alone
            else inter_broker_security(config, config.inter_broker_listener(self.listeners)),
        )
        self.metrics.track_state(self.replicas.partitions, self.groups.core.groups)
        # What this broker, as a leader, sends to replicas a reassignment is adding.
        self.reassignment_limit = ByteRateLimit(self._leader_throttle)
        self._dir_lock: DataDirLock | None = None

    def _quotas_changed(self, changes: Changes) -> None:
        if changes.quotas:
            self.quotas.load(self.store.client_quotas().items())

    def _unclean_leader_election(self, topic: str) -> bool:
        return self.topic_admin.log_config(topic).unclean_leader_election_enable

    @property
    def info(self) -> BrokerInfo:
        """What this broker registers: every listener's advertised address, and the
        inter-broker listener's as the one other brokers use."""
        rack = self.config.get("broker.rack") or None
        advertised = self.config.advertised(self.listeners)
        host, port = advertised[self.inter_broker_listener]
        endpoints = tuple((name, h, p) for name, (h, p) in advertised.items())
        return BrokerInfo(self.node_id, host, port, rack, endpoints)

    def _leader_throttle(self) -> int:
        dynamic = self.store.dynamic_broker_configs.get("leader.replication.throttled.rate")
        return int(dynamic or self.config.get_int("leader.replication.throttled.rate"))

    def _follower_throttle(self) -> int:
        """follower.replication.throttled.rate: set at run time (cluster-wide), else
        the broker's static setting."""
        dynamic = self.store.dynamic_broker_configs.get("follower.replication.throttled.rate")
        return int(dynamic or self.config.get_int("follower.replication.throttled.rate"))

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id

    def lock_data_dir(self) -> None:
        """Take the data directory's lock (storage/dir_lock.py): before anything in the
        directory is read or written, so that a second broker on it stops at once."""
        if self._dir_lock is None:
            self._dir_lock = DataDirLock.acquire(self.data_dir)

    def startup(self) -> None:
        """Claim the data directory and open the logs, after ``cluster.connect()`` has
        loaded the image (the directory is claimed for the store's cluster id)."""
        self.lock_data_dir()
        try:
            # Before a single log is opened: another node's or another cluster's logs must
            # not be adopted.
            claim_data_dir(
                self.data_dir,
                self.node_id,
                self.store.cluster_id,
                cluster_source=self.cluster.source,
            )
            self.logs.startup()
            self.replicas.load()  # also loads the groups of the offsets partitions led here
        except BaseException:
            self._release_data_dir()
            raise
        log.info(
            "broker started",
            extra={
                "node_id": self.node_id,
                "data_dir": str(self.data_dir),
                "topics": len(self.store.topics),
                "partitions": len(self.replicas.partitions),
                "offline_partitions": len(self.logs.offline),
            },
        )

    async def leave_cluster(self, timeout_s: float) -> None:
        """Controlled shutdown, then stop following, then give up the lease."""
        await self.cluster.leave(timeout_s)
        await self.replicas.stop_applying()
        if self.replicas.fetchers is not None:
            await self.replicas.fetchers.stop()
        await self.cluster.close()

    def shutdown(self) -> None:
        try:
            self.logs.shutdown()
        finally:
            self._release_data_dir()
        log.info("broker stopped cleanly", extra={"node_id": self.node_id})

    def _release_data_dir(self) -> None:
        if self._dir_lock is not None:
            self._dir_lock.release()
            self._dir_lock = None

    def run_maintenance(self) -> dict[str, int]:
        totals = self.logs.run_maintenance()
        try:
            self.logs.checkpoint()
        except Exception as exc:  # a checkpoint failure is logged, never fatal
            log.error("checkpoint failed", extra={"error": str(exc)})
        return totals
