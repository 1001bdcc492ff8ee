"""All partition logs of one data directory, with the directory-wide checkpoints.

    <data-dir>/
      orders-0/  orders-1/ ...               one directory per partition
      recovery-point-offset-checkpoint       flushed-up-to offset per partition
      log-start-offset-checkpoint
      replication-offset-checkpoint          high watermarks
      cleaner-offset-checkpoint              compaction progress
      .kafka_cleanshutdown                   present only between a clean stop and a start

A partition that cannot be loaded or written is marked offline with its reason; the
others keep working.
"""

from __future__ import annotations

import collections
import logging
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from partita.errors import KafkaStorageError, UnknownTopicOrPartitionError
from partita.storage.checkpoint import CheckpointCorruptError, read_offsets, write_offsets
from partita.storage.cleaner import clean_if_needed
from partita.storage.config import LogConfig
from partita.storage.loader import open_partition_log
from partita.storage.log import Clock, PartitionLog, wall_clock_ms
from partita.storage.open_files import OPEN_SEGMENT_FILES
from partita.storage.partition_metadata import (
    PARTITION_METADATA,
    kafka_uuid_text,
    read_topic_id,
    sync_topic_id,
    write_topic_id,
)

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"  # Kafka's name for a directory of a topic that is gone

TopicPartition = tuple[str, int]
ConfigLookup = Callable[[str], LogConfig]


def parse_partition_dir(name: str) -> TopicPartition | None:
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        config_for: ConfigLookup | None = None,
        *,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.data_dir = data_dir
        self.config_for: ConfigLookup = config_for or (lambda _topic: LogConfig())
        self.clock = clock
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.offline: dict[TopicPartition, str] = {}
        # Checkpointed offsets of offline partitions, written back unchanged so that a
        # partition that comes back keeps its log start offset and high watermark.
        self._offline_offsets: dict[str, dict[TopicPartition, int]] = {}
        self.loaded_cleanly = True
        # Directories whose partition.metadata is written but not yet fsynced: a new
        # partition records its topic id at once and makes it durable at the next
        # checkpoint (in the maintenance thread), as Kafka flushes the file
        # asynchronously; two fsyncs each would double the cost of creating thousands.
        # A deque: appended on the event loop, drained from the checkpoint's thread.
        self._unsynced_ids: collections.deque[Path] = collections.deque()

    # -- start and stop ----------------------------------------------------------

    def startup(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        self.loaded_cleanly = clean
        recovery = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        starts = self._read_checkpoint(LOG_START_CHECKPOINT)
        hws = self._read_checkpoint(HIGH_WATERMARK_CHECKPOINT)
        dirty = self._read_checkpoint(CLEANER_CHECKPOINT)
        saved = {
            RECOVERY_POINT_CHECKPOINT: recovery,
            LOG_START_CHECKPOINT: starts,
            HIGH_WATERMARK_CHECKPOINT: hws,
            CLEANER_CHECKPOINT: dirty,
        }
        for stale in self.data_dir.glob("*.tmp"):
            stale.unlink(missing_ok=True)  # a checkpoint write cut short by a crash
        for path in sorted(self.data_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith((DELETE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
                shutil.rmtree(path, ignore_errors=True)
                continue
            tp = parse_partition_dir(path.name)
            if tp is None:
                continue
            try:
                partition_log = open_partition_log(
                    path,
                    tp[0],
                    tp[1],
                    self.config_for(tp[0]),
                    clean_shutdown=clean,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    high_watermark=hws.get(tp, 0),
                    clock=self.clock,
                )
            except Exception as exc:  # one bad partition must not stop the broker
                self.offline[tp] = f"{type(exc).__name__}: {exc}"
                for name, offsets in saved.items():
                    if tp in offsets:
                        self._offline_offsets.setdefault(name, {})[tp] = offsets[tp]
                log.error(
                    "partition could not be loaded and is offline",
                    extra={"partition": path.name, "error": str(exc)},
                )
                continue
            partition_log.first_dirty_offset = max(
                partition_log.log_start_offset, dirty.get(tp, partition_log.log_start_offset)
            )
            self.logs[tp] = partition_log
        marker.unlink(missing_ok=True)
        log.info(
            "log manager started",
            extra={
                "partitions": len(self.logs),
                "offline": len(self.offline),
                "clean_shutdown": clean,
            },
        )

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return read_offsets(self.data_dir / name)
        except (CheckpointCorruptError, OSError) as exc:
            log.warning(
                "ignoring an unreadable checkpoint; partitions will be fully recovered",
                extra={"checkpoint": name, "error": str(exc)},
            )
            return {}

    def shutdown(self) -> None:
        """Flush everything, write the checkpoints and the clean-shutdown marker.

        Every partition is closed even if flushing or checkpointing fails (a full disk);
        the marker is written only if all of it succeeded, so the next start recovers.
        """
        all_flushed = True
        for tp, partition_log in self.logs.items():
            try:
                if partition_log.offline_reason is None:
                    partition_log.flush()
            except KafkaStorageError as exc:
                all_flushed = False
                log.error(
                    "flush at shutdown failed",
                    extra={"partition": f"{tp[0]}-{tp[1]}", "error": str(exc)},
                )
        try:
            self.checkpoint()
        except KafkaStorageError as exc:
            all_flushed = False
            log.error("checkpoint at shutdown failed", extra={"error": str(exc)})
        for partition_log in self.logs.values():
            try:
                partition_log.close()
            except KafkaStorageError as exc:
                all_flushed = False
                log.error("close at shutdown failed", extra={"error": str(exc)})
        if all_flushed and not self.offline:
            try:
                (self.data_dir / CLEAN_SHUTDOWN_MARKER).touch()
            except OSError as exc:
                log.error(
                    "cannot write the clean-shutdown marker; the next start will recover",
                    extra={"error": str(exc)},
                )

    def checkpoint(self) -> None:
        """Persist new partitions' topic ids, recovery points, log start offsets, high
        watermarks and cleaner progress."""
        logs = list(self.logs.items())
        current = {
            RECOVERY_POINT_CHECKPOINT: {tp: lg.recovery_point for tp, lg in logs},
            LOG_START_CHECKPOINT: {tp: lg.log_start_offset for tp, lg in logs},
            HIGH_WATERMARK_CHECKPOINT: {tp: lg.high_watermark for tp, lg in logs},
            CLEANER_CHECKPOINT: {tp: lg.first_dirty_offset for tp, lg in logs if lg.config.compact},
        }
        # After reading the recovery points, before writing them: every epoch file
        # that describes data below a recovery point read here was written before that
        # data was flushed, so syncing them now makes the checkpoint safe to trust.
        unsynced, epoch_failures = self._sync_epoch_checkpoints(logs)
        for tp in unsynced:  # recovered from its start rather than trusted past its file
            del current[RECOVERY_POINT_CHECKPOINT][tp]
        failures = self._sync_topic_ids() + epoch_failures
        for name, offsets in current.items():
            merged = {**self._offline_offsets.get(name, {}), **offsets}
            try:
                write_offsets(self.data_dir / name, merged)
            except OSError as exc:
                failures.append(f"{name}: {exc}")
                (self.data_dir / f"{name}.tmp").unlink(missing_ok=True)
        if failures:
            raise KafkaStorageError("cannot write checkpoints: " + "; ".join(failures))

    # -- partitions --------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog:
        tp = (topic, partition)
        if tp in self.offline:
            raise KafkaStorageError(f"partition {topic}-{partition} is offline: {self.offline[tp]}")
        try:
            return self.logs[tp]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no partition {topic}-{partition}") from None

    def get_or_create(
        self, topic: str, partition: int, topic_id: uuid.UUID | None = None
    ) -> PartitionLog:
        """The partition's log, created if need be. With ``topic_id``, a directory left
        by an earlier topic of the same name (deleted while this broker was away) is
        stray: it is removed and the partition starts empty, as Kafka does; a directory
        with no id recorded yet is adopted and given this one."""
        tp = (topic, partition)
        recorded = None if topic_id is None else self._recorded_or_stray(topic, partition, topic_id)
        partition_log = self.logs.get(tp)
        if partition_log is None:
            if tp in self.offline:
                raise KafkaStorageError(
                    f"partition {topic}-{partition} is offline: {self.offline[tp]}"
                )
            try:
                partition_log = open_partition_log(
                    self.data_dir / f"{topic}-{partition}",
                    topic,
                    partition,
                    self.config_for(topic),
                    clean_shutdown=True,
                    clock=self.clock,
                )
            except OSError as exc:
                raise KafkaStorageError(
                    f"cannot create partition {topic}-{partition}: {exc}"
                ) from exc
            self.logs[tp] = partition_log
        if topic_id is not None and recorded is None:
            self._record_topic_id(partition_log.directory, topic_id)
        return partition_log

    def _recorded_or_stray(
        self, topic: str, partition: int, topic_id: uuid.UUID
    ) -> uuid.UUID | None:
        """The topic id the partition's directory records (``topic_id`` or None); a
        directory recording another one is deleted first, and None returned."""
        directory = self.data_dir / f"{topic}-{partition}"
        recorded = read_topic_id(directory)
        if recorded is None or recorded == topic_id:
            return recorded
        log.warning(
            "partition directory belongs to an earlier topic of this name; deleting it",
            extra={
                "partition": directory.name,
                "recorded_topic_id": kafka_uuid_text(recorded),
                "topic_id": kafka_uuid_text(topic_id),
            },
        )
        self.delete_partition(topic, partition, suffix=STRAY_DIR_SUFFIX)
        return None

    def _record_topic_id(self, directory: Path, topic_id: uuid.UUID) -> None:
        try:
            write_topic_id(directory, topic_id)
        except OSError as exc:
            raise KafkaStorageError(f"cannot record the topic id in {directory}: {exc}") from exc
        self._unsynced_ids.append(directory)

    @staticmethod
    def _sync_epoch_checkpoints(
        logs: list[tuple[TopicPartition, PartitionLog]],
    ) -> tuple[list[TopicPartition], list[str]]:
        """fsync the leader-epoch checkpoints written since the last time; the partitions
        whose file could not be, and why."""
        unsynced, failures = [], []
        for tp, partition_log in logs:
            try:
                partition_log.epochs.sync()
            except OSError as exc:
                unsynced.append(tp)
                failures.append(f"{tp[0]}-{tp[1]}/leader-epoch-checkpoint: {exc}")
        return unsynced, failures

    def _sync_topic_ids(self) -> list[str]:
        """fsync the topic ids recorded since the last checkpoint; the failures."""
        failures = []
        while self._unsynced_ids:
            directory = self._unsynced_ids.popleft()
            try:
                sync_topic_id(directory)
            except FileNotFoundError:
                continue  # deleted meanwhile
            except OSError as exc:
                self._unsynced_ids.appendleft(directory)  # tried again next time
                failures.append(f"{directory.name}/{PARTITION_METADATA}: {exc}")
                break
        return failures

    def delete_partition(
        self, topic: str, partition: int, *, suffix: str = DELETE_DIR_SUFFIX
    ) -> None:
        """Remove a partition: rename its directory aside at once, then delete it."""
        tp = (topic, partition)
        partition_log = self.logs.pop(tp, None)
        self.offline.pop(tp, None)
        for offsets in self._offline_offsets.values():
            offsets.pop(tp, None)
        directory = self.data_dir / f"{topic}-{partition}"
        if partition_log is not None:
            partition_log.close()
        if directory.exists():
            doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{suffix}")
            directory.rename(doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    def __iter__(self) -> Iterator[PartitionLog]:
        return iter(list(self.logs.values()))

    # -- background work ---------------------------------------------------------

    def run_maintenance(self) -> dict[str, int]:
        """One pass of retention, compaction, flush.ms and delayed deletes; segment
        files unused since the previous pass are closed (open_files.py)."""
        totals = {"segments_deleted": 0, "logs_cleaned": 0, "flushed": 0, "purged": 0}
        for partition_log in self:
            if partition_log.offline_reason is not None:
                continue
            try:
                totals["segments_deleted"] += partition_log.enforce_retention()
                if partition_log.config.compact and clean_if_needed(partition_log) is not None:
                    totals["logs_cleaned"] += 1
                totals["flushed"] += int(partition_log.maybe_flush())
                totals["purged"] += partition_log.purge_deleted_segments()
            except KafkaStorageError as exc:
                log.error(
                    "maintenance failed for a partition",
                    extra={"partition": partition_log.name, "error": str(exc)},
                )
        totals["idle_files_closed"] = OPEN_SEGMENT_FILES.close_idle()
        return totals
