"""A partition as the broker serves it: its log, its leadership, its replication
state, its producers, and the requests waiting for it to move.

This is the one owner of a partition's rules:

- Leadership: ``become`` takes the partition's state from the metadata image (leader,
  leader epoch, ISR, replicas); ``check_leader`` is the test every leader-only request
  passes, with Kafka's errors (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH; KIP-320), and refuses while the broker's cluster lease cannot be
  trusted (``lease``) -- unless etcd has lost its quorum and every other ISR member
  still fetches from this leader; ``check_readable`` adds a consumer's reads from an in-sync
  follower (KIP-392); ``resign`` ends the leadership of a replica this broker drops.
- Produce: ``check_enough_replicas`` refuses acks=all below ``min.insync.replicas``
  before anything is written, ``append`` applies the idempotence rules, and
  ``replication_outcome`` decides an acks=all append (committed, still waiting, or
  failed) -- the one place ``min.insync.replicas`` is read for acks.
- Reads: ``fetch`` is one partition of a Fetch (a follower's divergence check and
  progress, then the read to the high watermark or, for a follower, the log end);
  ``offset_for`` answers ListOffsets, ``end_offset_for_epoch`` OffsetForLeaderEpoch.
- Transactions (#29): a producer's transactional batches open its transaction here,
  ``write_marker`` (a coordinator's COMMIT/ABORT) ends it; the last stable offset is the
  earliest open transaction's first offset, else the high watermark; read_committed
  fetches and ListOffsets stop there, and fetches get the aborted transactions in what
  they read. Rebuilt from the log with the producer state, on a follower as on a leader.
- As leader: followers' fetches move their progress (``replication.progress``); the
  high watermark is the ISR's smallest log end, never moving back; ISR changes are
  proposed one at a time to the metadata store through ``isr_writer`` and take effect
  when the store's answer comes back through ``become``.
- As follower: batches copied from the leader keep their offsets and epochs; the high
  watermark follows the leader's, capped at our own log end; truncation rebuilds the
  idempotent-producer state, which a follower keeps as the leader does so that a new
  leader still deduplicates.

Waiters (long-polling fetches, acks=all produces) are woken whenever the log end, the
high watermark, the ISR or the leadership moves, and each re-checks what it waits for.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from partita.cluster.cluster_store import LeaseState
from partita.cluster.model import PartitionState
from partita.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRecordError,
    KafkaStorageError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
)
from partita.protocol.control_records import TxnMarker, marker_batch, read_marker
from partita.protocol.file_region import FileRegion
from partita.protocol.record_batch import (
    BATCH_LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAGIC_V2,
    PRODUCER_ID_POS,
    BatchHeader,
    iter_headers,
    read_header,
)
from partita.replication.progress import LeaderProgress
from partita.server.clocks import elapsed_ms, now_ms
from partita.server.partition_transactions import AbortedTxn, PartitionTransactions
from partita.server.producer_state import ProducerEntry, ProducerStateTable
from partita.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    AppendInfo,
    PartitionLog,
)
from partita.storage.producer_snapshot import ProducerSnapshotEntry

log = logging.getLogger(__name__)

# Kafka's smallest legal batch length: enough to reach the magic byte.
MIN_BATCH_LENGTH = 14
_PRODUCER_ID = struct.Struct(">q")
# A producer with an open transaction and no sequence state (never built by appends, only
# read): its snapshot entry says so with -1s.
_NO_PRODUCER = ProducerEntry(-1)

IsrWriter = Callable[["Partition", list[int]], None]
# Whether a replica's broker may be in an ISR now: registered and running, not starting or
# shutting down (Kafka's leader asks its metadata the same before proposing, KIP-841).
IsrEligible = Callable[[int], bool]
# The state of this broker's cluster lease: lapsed, it leads nothing meanwhile.
LeaseView = Callable[[], LeaseState]
# While etcd has lost its quorum, a leader goes on only if each other ISR member fetched
# from it this recently: a follower long-polls for 500 ms, then fetches again at once.
QUORUM_LOSS_FETCH_WINDOW_MS = 1500


# ListOffsets specials answered without looking for a record (no tiered storage: the
# latest tiered offset is -1 and means nothing is missing).
_NO_RECORD_NEEDED = frozenset(
    {LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP}
)


def _no_isr_writer(_partition: Partition, _isr: list[int]) -> None:
    return None


def _any_replica(_replica: int) -> bool:
    return True


def always_trusted() -> LeaseState:
    """A broker alone: nobody else can take a partition over, so no lease fences it."""
    return LeaseState.TRUSTED


@dataclass(slots=True)
class PartitionRead:
    """One partition's part of a Fetch answer, as ``Partition.fetch`` read it."""

    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileRegion | None = None
    # KIP-595: (epoch, end offset) a follower must truncate to before it fetches again.
    diverging_epoch: tuple[int, int] | None = None
    # read_committed: the aborted transactions in the offsets read (None: not asked).
    aborted: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class ListedOffset:
    """ListOffsets' answer for one partition."""

    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(slots=True)
class Partition:
    topic: str
    index: int
    log: PartitionLog
    node_id: int
    leader: int = -1
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    # Open transactions (the last stable offset) and the aborted ones (what read_committed
    # fetches report), rebuilt from the log with the producers.
    transactions: PartitionTransactions = field(default_factory=PartitionTransactions)
    # Parked requests, by what can end their wait: follower fetches wait for the log end
    # to move, consumer fetches and acks=all produces for the high watermark. Changes of
    # leadership, ISR or log start wake both. (Waking everything on every change cost
    # every parked fetch a pass per acknowledged batch.)
    log_end_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    high_watermark_waiters: set[asyncio.Future[None]] = field(default_factory=set)
    progress: LeaderProgress | None = None  # set while this broker leads
    pending_isr: list[int] | None = None  # an ISR change sent to the store, not yet seen
    isr_writer: IsrWriter = _no_isr_writer
    isr_eligible: IsrEligible = _any_replica
    lease: LeaseView = always_trusted
    served_as_follower: bool = False  # logged once: a consumer read from this follower
    adding: list[int] = field(default_factory=list)  # replicas a reassignment is adding

    def __post_init__(self) -> None:
        # The cleaner stops before the earliest open transaction: it must know each
        # transactional batch's outcome.
        self.log.first_unstable_offset = self._first_unstable_offset
        # The log snapshots the producer state when it rolls a segment and at a close.
        self.log.producer_state = self._producer_snapshot

    def _first_unstable_offset(self) -> int | None:
        return self.transactions.first_unstable_offset()

    def _producer_snapshot(self) -> list[ProducerSnapshotEntry]:
        producers, open_txns = self.producers.producers, self.transactions.open
        return [
            producers.get(pid, _NO_PRODUCER).snapshot_entry(pid, open_txns.get(pid, -1))
            for pid in sorted(producers.keys() | open_txns.keys())
        ]

    @property
    def throttled(self) -> bool:
        """Copying as a replica being added: the replication throttle applies."""
        return self.node_id in self.adding

    @property
    def is_leader(self) -> bool:
        return self.leader == self.node_id

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def become(self, state: PartitionState) -> None:
        """Take the partition's state from the metadata image. Leader epochs only grow:
        an older state (a stale image) is ignored."""
        if state.leader_epoch < self.leader_epoch:
            return
        was_leader, old_epoch = self.is_leader, self.leader_epoch
        old_isr = self.isr
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = list(state.isr)
        self.replicas = list(state.replicas)
        self.adding = list(state.adding)
        if self.pending_isr is not None and (
            sorted(self.isr) == sorted(self.pending_isr) or old_epoch != self.leader_epoch
        ):
            self.pending_isr = None  # our change landed, or we were replaced meanwhile
        if self.is_leader:
            if not was_leader or old_epoch != self.leader_epoch or self.progress is None:
                self.progress = LeaderProgress(self.node_id, self.replicas, elapsed_ms())
                self.pending_isr = None
                if self.log.epochs.latest_epoch < self.leader_epoch or not self.log.epochs.entries:
                    # Recorded at election, as Kafka does, so the new epoch starts at our
                    # log end and the first produce need not write the checkpoint.
                    self.log.epochs.assign(self.leader_epoch, self.log.log_end_offset)
                    self.log.epochs.flush()
            else:
                self.progress.set_replicas(self.replicas, elapsed_ms())
            self.maybe_advance_high_watermark()
        else:
            self.progress = None
            self.pending_isr = None
        if was_leader != self.is_leader or old_epoch != self.leader_epoch or old_isr != self.isr:
            # Parked fetches and acks answer now, with the new state's outcome.
            self.wake_waiters()

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Refuse a leader-only request unless we lead this partition at the client's
        epoch (-1: the client does not say) and our cluster lease can be trusted."""
        self._check_not_fenced()
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} does not lead {self.name} "
                f"(leader {self.leader}, epoch {self.leader_epoch})"
            )
        self.check_leader_epoch(current_leader_epoch)

    def _check_not_fenced(self) -> None:
        state = self.lease()
        if state is LeaseState.TRUSTED:
            return
        if state is LeaseState.QUORUM_LOST and self.is_leader and self._electable_still_fetch():
            # etcd can elect nobody meanwhile, and every replica that could take over
            # still follows us: acks=all waits for the ISR as always.
            return
        raise NotLeaderOrFollowerError(
            f"broker {self.node_id} cannot renew its cluster lease; it acts as leader "
            f"of nothing until it can"
        )

    def _electable_still_fetch(self) -> bool:
        """Every other replica that an election could make leader fetched from this
        leader, at its epoch, within ``QUORUM_LOSS_FETCH_WINDOW_MS``: the ISR (with a
        member being added), or every replica where unclean elections may pick one out
        of sync. An ISR of this leader alone passes: no clean election can move it."""
        if self.progress is None:
            return False
        unclean = self.log.config.unclean_leader_election_enable
        electable = self.replicas if unclean else self._maximal_isr()
        now = elapsed_ms()
        for replica in electable:
            if replica == self.node_id:
                continue
            follower = self.progress.followers.get(replica)
            if follower is None or now - follower.last_fetch_ms > QUORUM_LOSS_FETCH_WINDOW_MS:
                return False
        return True

    def check_readable(self, current_leader_epoch: int, *, from_follower: bool) -> None:
        """Refuse a consumer's fetch unless we lead the partition or, when the client
        allows it (KIP-392, Fetch v11+), we are an in-sync follower: a follower serves up
        to its own high watermark."""
        if from_follower and not self.is_leader and self.node_id in self.isr:
            self._check_not_fenced()
            self.check_leader_epoch(current_leader_epoch)
            if not self.served_as_follower:
                self.served_as_follower = True
                log.info(
                    "serving a consumer from a follower replica (KIP-392)",
                    extra={"partition": self.name, "leader": self.leader},
                )
            return
        self.check_leader(current_leader_epoch)

    def resign(self) -> bool:
        """This broker drops its replica (deleted, or reassigned away): it leads nothing
        any more, and parked requests answer now. True if it was the leader."""
        was_leader = self.is_leader
        if was_leader:
            self.leader = -1
            self.progress = None
            self.pending_isr = None
        self.wake_waiters()
        return was_leader

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )

    # -- leader: followers, the high watermark and the ISR -----------------------------

    @property
    def min_insync_replicas(self) -> int:
        return self.log.config.min_insync_replicas

    def _maximal_isr(self) -> list[int]:
        """The ISR plus members being added: the high watermark waits for them too, so it
        never gets ahead of what an ISR about to include them holds."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    def diverging(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """KIP-595: (epoch, end offset) to send a follower whose log cannot be a prefix of
        ours -- the epoch of its last batch ends earlier here than its fetch offset, or we
        never had that epoch -- or None when it may go on fetching."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.epochs.end_offset_for(last_fetched_epoch, self.log.log_end_offset)
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def record_follower_fetch(self, replica: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset``: it holds everything below it."""
        if self.progress is None or replica not in self.progress.followers:
            raise NotLeaderOrFollowerError(
                f"broker {replica} is not a follower of {self.name} (replicas {self.replicas})"
            )
        leader_end = self.log.log_end_offset
        if fetch_offset > leader_end or fetch_offset < 0:
            raise OffsetOutOfRangeError(
                f"{self.name}: follower {replica} fetched from {fetch_offset}, "
                f"outside [0, {leader_end}]"
            )
        moved = self.progress.record_fetch(replica, fetch_offset, leader_end, elapsed_ms())
        self.maybe_expand_isr(replica)
        # Only a follower that moved can move the high watermark (Kafka's rule too): an
        # idle partition's fetches otherwise recomputed it over the ISR every time, a
        # fifth of a leader's time with 10,000 partitions.
        if moved:
            self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        if self.progress is None:
            return False
        current = self.log.high_watermark
        wanted = self.progress.high_watermark(
            self._maximal_isr(), self.log.log_end_offset, current, self.min_insync_replicas
        )
        if wanted > current:
            self.log.update_high_watermark(wanted)
            self.wake_waiters(log_end=False)
            return True
        return False

    @property
    def epoch_start_offset(self) -> int:
        """Where the current leader epoch began in our log (our log end at election)."""
        return next(
            (start for epoch, start in self.log.epochs.entries if epoch == self.leader_epoch),
            self.log.log_end_offset,
        )

    def check_offsets_known(self) -> None:
        """Refuse to tell a client where the partition ends while we are a new leader
        whose high watermark is still below the start of our epoch: the records before it
        were committed under the last leader, and answering our lagging high watermark
        would send a consumer backwards (Kafka's OFFSET_NOT_AVAILABLE; it clears as soon
        as the followers' first fetches move the high watermark)."""
        if self.is_leader and self.epoch_start_offset > self.log.high_watermark:
            raise OffsetNotAvailableError(
                f"{self.name}: the high watermark ({self.log.high_watermark}) of leader "
                f"epoch {self.leader_epoch} is still below the epoch's start offset "
                f"({self.epoch_start_offset})"
            )

    def maybe_expand_isr(self, replica: int) -> None:
        if self.progress is None or self.pending_isr is not None or replica in self.isr:
            return
        if not self.isr_eligible(replica):
            # Its broker is still starting (or going away): the controller would take it
            # straight out again, and the two would trade writes until it runs.
            return
        if self.progress.may_join(replica, self.log.high_watermark, self.epoch_start_offset):
            self._propose_isr([*self.isr, replica], f"follower {replica} caught up")

    def maybe_shrink_isr(self, max_lag_ms: int) -> None:
        if self.progress is None or self.pending_isr is not None:
            return
        lagging = self.progress.out_of_sync(
            self.isr, self.log.log_end_offset, elapsed_ms(), max_lag_ms
        )
        if lagging:
            kept = [r for r in self.isr if r not in lagging]
            self._propose_isr(kept, f"followers {lagging} fell behind for over {max_lag_ms} ms")

    def _propose_isr(self, isr: list[int], reason: str) -> None:
        self.pending_isr = isr
        log.info(
            "proposing an ISR change",
            extra={"partition": self.name, "isr": self.isr, "new_isr": isr, "reason": reason},
        )
        self.isr_writer(self, isr)

    def isr_change_failed(self) -> None:
        """The store refused our change (the state moved): the next fetch may retry."""
        self.pending_isr = None

    # -- reads and the committed point ---------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the first offset of the earliest open
        transaction, else the high watermark."""
        return self.transactions.last_stable_offset(self.log.high_watermark)

    def fetch_bounds(self) -> PartitionRead:
        """What a Fetch answer says of the partition, records or not: high watermark,
        last stable offset, log start."""
        return PartitionRead(
            self.log.high_watermark, self.last_stable_offset, self.log.log_start_offset
        )

    def fetch(
        self,
        offset: int,
        max_bytes: int,
        *,
        replica: int = -1,
        last_fetched_epoch: int = -1,
        min_one_batch: bool,
        read_committed: bool = False,
    ) -> PartitionRead:
        """One partition of a Fetch, after ``check_leader``/``check_readable``. A follower
        (``replica`` >= 0) whose log diverged from ours is told where to truncate and gets
        no records; otherwise its fetch offset is its log end, which moves its progress
        (and maybe the ISR and the high watermark), and it reads to our log end. A
        consumer reads to the high watermark. Nothing is read when ``max_bytes`` is 0
        unless ``min_one_batch`` (the first partition of a response with data gets one
        batch whatever its size, as in Kafka)."""
        # The bounds are taken before the follower's progress moves them, as Kafka does.
        result = self.fetch_bounds()
        if replica >= 0:
            result.diverging_epoch = self.diverging(last_fetched_epoch, offset)
            if result.diverging_epoch is not None:
                return result
            self.record_follower_fetch(replica, offset)
        if max_bytes > 0 or min_one_batch:
            result.records = self.read(
                offset,
                max(max_bytes, 0),
                for_follower=replica >= 0,
                min_one_batch=min_one_batch,
                read_committed=read_committed,
            )
        if read_committed and replica < 0:
            # Kafka bounds the search by the fetch's end; the LSO bounds what was read.
            result.aborted = self.log.aborted_between(offset, result.last_stable_offset)
        return result

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        for_follower: bool,
        min_one_batch: bool,
        read_committed: bool = False,
    ) -> FileRegion | None:
        """Consumers never see past the high watermark, and read_committed ones not past
        the last stable offset; a follower reads to the log end, which it must copy
        before the high watermark can move."""
        if for_follower:
            upper = self.log.log_end_offset
        elif read_committed:
            upper = self.last_stable_offset
        else:
            upper = self.log.high_watermark
        return self.log.read(offset, max_bytes, max_offset=upper, min_one_batch=min_one_batch)

    def replication_outcome(self, required_high_watermark: int, leader_epoch: int) -> bool:
        """Whether an acks=all append written at ``leader_epoch`` is committed (the high
        watermark reached ``required_high_watermark``, its last offset + 1): True when it
        is, False while it still waits; raises when it never will be here -- leadership
        moved (NOT_LEADER_OR_FOLLOWER) or the ISR shrank below min.insync.replicas
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"leadership of {self.name} moved before the batch was committed"
            )
        if self.log.high_watermark >= required_high_watermark:
            return True
        required = self.min_insync_replicas
        if len(self.isr) < required:
            raise NotEnoughReplicasAfterAppendError(
                f"{self.name}: the ISR {self.isr} shrank below "
                f"min.insync.replicas={required} after the append"
            )
        return False

    # -- offsets by time and by epoch ---------------------------------------------------

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: the largest epoch we know at or below ``leader_epoch``
        and where it ends in our log."""
        return self.log.epochs.end_offset_for(leader_epoch, self.log.log_end_offset)

    def offset_for(
        self, timestamp: int, *, for_client: bool, read_committed: bool = False
    ) -> ListedOffset:
        """ListOffsets (the log answers the timestamp, special ones too). A client -- not a
        follower asking for our log start -- is refused while a new leader's end is
        unknown (``check_offsets_known``): for the latest offset, and when nothing below
        a new leader's lagging high watermark qualifies (Kafka answers the same). For a
        read_committed client the latest offset is the last stable offset, and a record
        found at or past it is not one it may read yet."""
        if for_client and timestamp == LATEST_TIMESTAMP:
            self.check_offsets_known()
        offset, found = self.log.list_offset(timestamp)
        if read_committed and offset >= 0:
            stable = self.last_stable_offset
            if timestamp == LATEST_TIMESTAMP:
                offset = stable
            elif offset >= stable and timestamp not in _NO_RECORD_NEEDED:
                offset, found = -1, -1
        if for_client and offset < 0 and timestamp not in _NO_RECORD_NEEDED:
            self.check_offsets_known()
        epoch = self.log.epochs.epoch_for(offset) if offset >= 0 else -1
        return ListedOffset(offset, found, epoch)

    def check_enough_replicas(self) -> None:
        """acks=all is refused before anything is written while the ISR is smaller than
        min.insync.replicas (NOT_ENOUGH_REPLICAS)."""
        required = self.min_insync_replicas
        if len(self.isr) < required:
            raise NotEnoughReplicasError(
                f"{self.name} has {len(self.isr)} in-sync replicas, min.insync.replicas={required}"
            )

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: the log start moves up to ``offset`` (-1: the high watermark),
        never past the high watermark; followers follow it from their fetches."""
        low = self.log.delete_records(offset)
        self.wake_waiters()
        return low

    # -- follower ------------------------------------------------------------------------

    def follow_log_start(self, leader_log_start: int) -> None:
        """The leader moved its log start (DeleteRecords, retention): so do we, as far as
        what we hold is committed."""
        target = min(leader_log_start, self.log.high_watermark)
        if target > self.log.log_start_offset:
            self.log.delete_records(target)

    def append_as_follower(self, records: bytes | memoryview) -> AppendInfo:
        try:
            info = self.log.append_as_follower(records)
        except KafkaStorageError as exc:
            # A follower's disk failed (or filled up): this replica stops replicating and
            # drops out of the ISR by lag; the broker and its other partitions go on, as
            # Kafka takes a failed log directory offline. A restart brings it back.
            if self.log.offline_reason is None:
                self.log.offline_reason = f"a replicated append failed: {exc.message}"
            raise
        view = memoryview(records)
        for pos, h in iter_headers(view):
            self._observe(h, partial(_batch_at, view, pos, h.size))
        if info.batches:
            self.wake_waiters(high_watermark=False)
        return info

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        wanted = min(leader_high_watermark, self.log.log_end_offset)
        if wanted > self.log.high_watermark:
            self.log.update_high_watermark(wanted)
            self.wake_waiters(log_end=False)

    def truncate_to(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a follower that diverged from its leader)."""
        cuts_records = offset < self.log.log_end_offset
        removed = self.log.truncate_to(offset)  # also drops an empty epoch at the log end
        if not cuts_records:
            return removed
        self.rebuild_producer_state()
        log.warning(
            "truncated a diverged log",
            extra={"partition": self.name, "offset": offset, "bytes": removed},
        )
        return removed

    def start_over_at(self, offset: int) -> None:
        """Drop the whole log and start it empty at ``offset`` (a follower whose log
        ends below its leader's log start): the producer state goes with it."""
        self.log.truncate_fully_and_start_at(offset)
        self.rebuild_producer_state()

    # -- appends -------------------------------------------------------------------------

    def rebuild_producer_state(self) -> None:
        """Idempotent producers' sequences and open transactions, from the newest
        producer snapshot and the batch headers after it (only a marker's one record is
        decoded); the aborts those batches hold are checked against the ``.txnindex``
        files. Without a usable snapshot (none, or a ``.txnindex`` before it unreadable)
        the whole log is replayed."""
        self.producers = ProducerStateTable()
        self.transactions = PartitionTransactions()
        start = self.log.segments[0].base_offset
        snapshot = self.log.producer_snapshot()
        if snapshot is not None and self.log.txn_indexes_readable(below=snapshot[0]):
            start = snapshot[0]
            self._load_snapshot(snapshot[1])
        aborted: list[AbortedTxn] = []
        for segment, pos, header in self.log.iter_headers(start):
            batch = partial(segment.read_batch, pos, header.size)
            self._observe(header, batch, replayed_aborts=aborted)
        fixed = self.log.reconcile_txn_indexes(aborted, from_offset=start)
        if fixed:
            log.info(".txnindex files rewritten", extra={"partition": self.name, "files": fixed})

    def _load_snapshot(self, entries: list[ProducerSnapshotEntry]) -> None:
        """A snapshot's producers, less those whose last batch is below the log start
        (deleted since, as Kafka forgets them); an open transaction always stays, as
        its marker is still to come."""
        log_start = self.log.log_start_offset
        for entry in entries:
            if entry.current_txn_first_offset >= 0:
                self.transactions.open[entry.producer_id] = entry.current_txn_first_offset
            elif entry.last_offset < log_start:
                continue
            self.producers.producers[entry.producer_id] = ProducerEntry.from_snapshot(entry)

    def _observe(
        self,
        header: BatchHeader,
        batch: Callable[[], bytes | memoryview],
        replayed_aborts: list[AbortedTxn] | None = None,
    ) -> None:
        """What one batch, appended or replayed, tells the producer and transaction state;
        ``batch`` gives its bytes, needed only for a transaction marker. An abort goes
        into its segment's ``.txnindex``, or, replaying, into ``replayed_aborts`` (to be
        checked against the files)."""
        if header.producer_id < 0:
            return
        if header.is_control:
            if header.is_transactional:
                marker = read_marker(batch())
                self.producers.on_marker(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    header.max_timestamp,
                )
                aborted = self.transactions.on_marker(marker, header.base_offset)
                if aborted is not None and replayed_aborts is not None:
                    replayed_aborts.append(aborted)
                elif aborted is not None:
                    self.log.index_aborted_txn(aborted)
            return
        if header.base_sequence >= 0:
            self.producers.record(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.base_sequence + header.last_offset_delta,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        self.transactions.on_data(header.producer_id, header.base_offset, header.is_transactional)

    def append(self, records: bytes | memoryview) -> AppendInfo:
        """Append a producer's batches as leader, applying the idempotence rules first."""
        view = memoryview(records)
        _check_produce_records(view)
        # Only the producer id is needed here; the log validates the whole header once.
        (producer_id,) = _PRODUCER_ID.unpack_from(view, PRODUCER_ID_POS)
        if producer_id < 0:
            _check_no_producer_batch_after_the_first(view)
        try:
            if producer_id < 0:
                info = self.log.append_as_leader(view, self.leader_epoch)
            else:
                info = self._append_idempotent(view)
        except KafkaStorageError as exc:
            self._leader_append_failed(exc)
            raise
        self.wake_waiters(high_watermark=False)  # followers long-poll for the new log end
        self.maybe_advance_high_watermark()
        return info

    def _leader_append_failed(self, exc: KafkaStorageError) -> None:
        """Kafka takes a log directory offline at its first failed write (a full disk
        too), and the controller gives its partitions to in-sync followers. So does a
        leader here when an in-sync follower can take over: its replica goes offline, the
        broker reports it, the controller elects the follower, and the producer's retry
        lands there. A leader with nobody in sync (a broker alone, RF 1) keeps its replica
        online: reads go on, and writes resume once there is space again."""
        if self.log.offline_reason is not None or not any(r != self.node_id for r in self.isr):
            return
        self.log.offline_reason = f"a leader append failed: {exc.message}"
        log.error(
            "replica offline: an append as leader failed; an in-sync follower takes over",
            extra={"partition": self.name, "isr": self.isr, "error": exc.message},
        )

    def _append_idempotent(self, view: memoryview) -> AppendInfo:
        headers = [h for _pos, h in iter_headers(view)]
        if len(headers) != 1:
            # Kafka's producers send one batch per partition; more is not idempotent-safe.
            raise InvalidRecordError("an idempotent produce must carry exactly one batch")
        h = headers[0]
        last_seq = h.base_sequence + h.last_offset_delta
        duplicate = self.producers.check(h.producer_id, h.producer_epoch, h.base_sequence, last_seq)
        if duplicate is not None:
            return AppendInfo(
                duplicate.first_offset,
                duplicate.last_offset,
                -1,
                -1,
                0,
                0,
                self.log.log_start_offset,
            )
        info = self.log.append_as_leader(view, self.leader_epoch)
        stored = h._replace(base_offset=info.first_offset)
        self._observe(stored, partial(_batch_at, view, 0, h.size))
        return info

    def append_from_coordinator(self, batch: bytes) -> AppendInfo:
        """A coordinator's own batch as leader (a transaction's offsets, written with the
        producer's id and epoch and no sequence): an epoch older than the producer's is
        refused (a fenced instance), and its transaction here ends with the marker."""
        header = read_header(batch)
        self.producers.check_epoch(header.producer_id, header.producer_epoch)
        return self._append_own(batch, header)

    def write_marker(self, marker: TxnMarker) -> AppendInfo:
        """Append a transaction coordinator's COMMIT or ABORT marker as leader (after
        ``check_leader``): the producer's transaction here ends, an abort is remembered
        for read_committed fetches, and a newer epoch fences the producer's older one."""
        self.producers.check_marker(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch
        )
        batch = marker_batch(marker, now_ms())
        return self._append_own(batch, read_header(batch))

    def _append_own(self, batch: bytes, header: BatchHeader) -> AppendInfo:
        """The broker's own batch appended as leader, and what it tells the state."""
        try:
            info = self.log.append_as_leader(batch, self.leader_epoch, from_coordinator=True)
        except KafkaStorageError as exc:
            self._leader_append_failed(exc)
            raise
        self._observe(header._replace(base_offset=info.first_offset), lambda: batch)
        self.wake_waiters(high_watermark=False)
        self.maybe_advance_high_watermark()
        return info

    def describe_producers(self) -> list[tuple[int, int, int, int, int]]:
        """DescribeProducers: (producer id, epoch, last sequence, coordinator epoch,
        first offset of its open transaction or -1), for every producer with state here
        (one whose only batches are a transaction's offsets too)."""
        producers = self.producers.producers
        described = []
        for pid in sorted(producers.keys() | self.transactions.open.keys()):
            entry = producers.get(pid)
            described.append(
                (
                    pid,
                    entry.epoch if entry else -1,
                    entry.last_seq if entry else -1,
                    entry.coordinator_epoch if entry else -1,
                    self.transactions.open.get(pid, -1),
                )
            )
        return described

    def wake_waiters(self, log_end: bool = True, high_watermark: bool = True) -> None:
        if log_end:
            _wake(self.log_end_waiters)
        if high_watermark:
            _wake(self.high_watermark_waiters)


def _wake(waiters: set[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
    waiters.clear()


async def wait_for_any(
    partitions: Sequence[Partition], timeout: float, *, log_end: bool = False
) -> None:
    """Until one of ``partitions`` moves its high watermark (or, with ``log_end``, as a
    follower's fetch wants, its log end), changes leadership, ISR or log start, or
    ``timeout`` seconds pass: the one mechanism long-polling fetches and acks=all
    produces share."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    for partition in partitions:
        (partition.log_end_waiters if log_end else partition.high_watermark_waiters).add(waiter)
    try:
        async with asyncio.timeout(max(timeout, 0)):
            await waiter
    except TimeoutError:
        pass
    finally:
        for partition in partitions:
            partition.log_end_waiters.discard(waiter)
            partition.high_watermark_waiters.discard(waiter)


async def until_replicated(
    partition: Partition, appended: AppendInfo, leader_epoch: int, timeout: float
) -> None:
    """Wait until the ISR holds what was appended at ``leader_epoch`` (acks=all), for the
    broker's own writes (transaction state, markers, a transaction's offsets). Raises as
    ``replication_outcome`` does when it never will be, REQUEST_TIMED_OUT past
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not partition.replication_outcome(appended.last_offset + 1, leader_epoch):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimedOutError(f"{partition.name}: the ISR did not take the write")
        await wait_for_any([partition], remaining)


def _batch_at(view: memoryview, pos: int, size: int) -> memoryview:
    return view[pos : pos + size]


def _check_no_producer_batch_after_the_first(view: memoryview) -> None:
    """An idempotent or transactional batch must be its partition's only batch (Kafka
    refuses more than one batch per partition outright); one hiding behind a plain first
    batch would escape the sequence and transaction rules, which read the first header."""
    (batch_length,) = struct.unpack_from(">i", view, BATCH_LENGTH_POS)
    if len(view) <= LOG_OVERHEAD + batch_length:
        return  # the usual case: one batch
    for _pos, header in iter_headers(view):
        if header.producer_id >= 0:
            raise InvalidRecordError(
                "an idempotent or transactional batch must be the only batch of its partition"
            )


def _check_produce_records(view: memoryview) -> None:
    """Kafka's first checks on a produce request's records, with Kafka's error codes:
    INVALID_RECORD when there is no complete batch or the format is older than v2 (the
    producer must not retry), CORRUPT_MESSAGE when the header itself is damaged."""
    if len(view) < LOG_OVERHEAD:
        raise InvalidRecordError("produce request carries no record batch")
    (batch_length,) = struct.unpack_from(">i", view, BATCH_LENGTH_POS)
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {batch_length} is below the minimum")
    if LOG_OVERHEAD + batch_length > len(view):
        raise InvalidRecordError("produce request carries no complete record batch")
    magic = view[MAGIC_POS]
    if magic > MAGIC_V2:
        raise CorruptRecordError(f"unknown record batch magic {magic}")
    if magic != MAGIC_V2:
        raise InvalidRecordError(
            f"message format v{magic} is not accepted: produce needs record batches (v2)"
        )
