"""Each rule ``Partition`` owns, on a real Partition and log, without sockets: the
handlers only translate requests into these calls (issue #27), so each rule is tested
here once.

- Leader-only requests are refused while the broker's lease cannot be trusted, and at a
  stale or future leader epoch (KIP-320).
- A consumer may read from an in-sync follower (KIP-392), never from one out of the ISR,
  and not while the broker is fenced.
- acks=all: refused up front below min.insync.replicas; once written, committed when the
  high watermark passes it, failed when leadership moves or the ISR shrinks below
  min.insync.replicas.
- Fetch: a consumer reads to the high watermark, a follower to the log end and moves its
  progress; a diverged follower is told where to truncate and gets nothing.
- ListOffsets and OffsetForLeaderEpoch answer from the log and its epochs.
- A dropped replica resigns its leadership and wakes what was parked on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from partita.cluster.cluster_store import LeaseState
from partita.cluster.model import PartitionState
from partita.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from partita.server.clocks import elapsed_ms
from partita.server.partition import (
    QUORUM_LOSS_FETCH_WINDOW_MS,
    Partition,
    wait_for_any,
)
from partita.storage.config import LogConfig
from partita.storage.log import EARLIEST_TIMESTAMP as EARLIEST
from partita.storage.log import LATEST_TIERED_TIMESTAMP
from partita.storage.log import LATEST_TIMESTAMP as LATEST
from partita.storage.log_manager import LogManager
from tests.conftest import BASE_TS, make_batch

OpenManager = Callable[..., LogManager]
ME, OTHER, THIRD = 1, 2, 3


def _partition(
    open_manager: OpenManager,
    *,
    leader: int = ME,
    isr: list[int] | None = None,
    min_isr: int = 1,
    lease: list[LeaseState] | None = None,
) -> Partition:
    log = open_manager(LogConfig(min_insync_replicas=min_isr)).get_or_create("t", 0)
    state = lease if lease is not None else [LeaseState.TRUSTED]
    partition = Partition("t", 0, log, ME, lease=lambda: state[0])
    partition.become(
        PartitionState(
            replicas=[ME, OTHER, THIRD],
            leader=leader,
            leader_epoch=3,
            isr=isr if isr is not None else [ME, OTHER, THIRD],
        )
    )
    return partition


def test_a_leader_refuses_while_fenced_and_at_another_epoch(open_manager: OpenManager) -> None:
    lease = [LeaseState.TRUSTED]
    partition = _partition(open_manager, lease=lease)
    partition.check_leader()
    partition.check_leader(3)
    with pytest.raises(FencedLeaderEpochError):
        partition.check_leader(2)
    with pytest.raises(UnknownLeaderEpochError):
        partition.check_leader(4)
    lease[0] = LeaseState.LAPSED
    with pytest.raises(NotLeaderOrFollowerError, match="lease"):
        partition.check_leader()


def test_while_etcd_has_lost_its_quorum_a_leader_serves_while_its_isr_fetches(
    open_manager: OpenManager,
) -> None:
    """#30: with no etcd quorum nobody can be elected in its place, and the ISR, which
    alone could take over, still follows it; a member that stops fetching (dead, or
    following a leader elected elsewhere) ends that, and a lapsed lease always does."""
    lease = [LeaseState.QUORUM_LOST]
    partition = _partition(open_manager, lease=lease)
    assert partition.progress is not None
    with pytest.raises(NotLeaderOrFollowerError, match="lease"):
        partition.check_leader()  # no fetch from OTHER and THIRD yet
    now = elapsed_ms()
    for replica in (OTHER, THIRD):
        partition.progress.record_fetch(replica, 0, 0, now)
    partition.check_leader()
    partition.check_leader(3)
    partition.progress.record_fetch(THIRD, 0, 0, now - QUORUM_LOSS_FETCH_WINDOW_MS - 1)
    with pytest.raises(NotLeaderOrFollowerError, match="lease"):
        partition.check_leader()  # THIRD went quiet
    partition.become(PartitionState([ME, OTHER, THIRD], ME, 3, [ME, OTHER]))
    partition.progress.record_fetch(OTHER, 0, 0, elapsed_ms())
    partition.check_leader()  # THIRD is out of the ISR: only OTHER matters
    partition.become(PartitionState([ME, OTHER, THIRD], ME, 3, [ME]))
    partition.check_leader()  # an ISR of us alone: no clean election can move it
    unclean = replace(partition.log.config, unclean_leader_election_enable=True)
    partition.log.update_config(unclean)
    with pytest.raises(NotLeaderOrFollowerError, match="lease"):
        partition.check_leader()  # an unclean one could pick THIRD, which went quiet
    lease[0] = LeaseState.LAPSED
    with pytest.raises(NotLeaderOrFollowerError, match="lease"):
        partition.check_leader()


def test_a_follower_serves_a_consumer_only_in_sync_unfenced_and_when_asked(
    open_manager: OpenManager,
) -> None:
    lease = [LeaseState.TRUSTED]
    follower = _partition(open_manager, leader=OTHER, lease=lease)
    with pytest.raises(NotLeaderOrFollowerError):
        follower.check_readable(3, from_follower=False)  # the client did not allow it
    follower.check_readable(3, from_follower=True)
    with pytest.raises(FencedLeaderEpochError):
        follower.check_readable(2, from_follower=True)
    for lapsed in (LeaseState.LAPSED, LeaseState.QUORUM_LOST):
        lease[0] = lapsed
        with pytest.raises(NotLeaderOrFollowerError, match="lease"):
            follower.check_readable(3, from_follower=True)
    lease[0] = LeaseState.TRUSTED
    follower.become(PartitionState([ME, OTHER, THIRD], OTHER, 3, [OTHER, THIRD]))
    with pytest.raises(NotLeaderOrFollowerError):
        follower.check_readable(3, from_follower=True)  # out of the ISR


def test_acks_all_is_refused_up_front_below_min_insync(open_manager: OpenManager) -> None:
    partition = _partition(open_manager, isr=[ME], min_isr=2)
    with pytest.raises(NotEnoughReplicasError):
        partition.check_enough_replicas()
    partition.become(PartitionState([ME, OTHER, THIRD], ME, 3, [ME, OTHER]))
    partition.check_enough_replicas()


def test_an_acks_all_append_commits_when_the_high_watermark_passes_it(
    open_manager: OpenManager,
) -> None:
    partition = _partition(open_manager, isr=[ME, OTHER], min_isr=2)
    info = partition.append(make_batch(3))
    required = info.last_offset + 1
    assert partition.replication_outcome(required, 3) is False  # the follower has nothing
    partition.fetch(0, 1 << 20, replica=OTHER, min_one_batch=True)
    assert partition.replication_outcome(required, 3) is False  # it asked from 0: has none
    partition.fetch(3, 1 << 20, replica=OTHER, min_one_batch=True)
    assert partition.high_watermark == 3
    assert partition.replication_outcome(required, 3) is True


def test_an_acks_all_append_fails_when_the_isr_shrinks_or_leadership_moves(
    open_manager: OpenManager,
) -> None:
    partition = _partition(open_manager, isr=[ME, OTHER], min_isr=2)
    info = partition.append(make_batch(3))
    partition.become(PartitionState([ME, OTHER, THIRD], ME, 3, [ME]))
    with pytest.raises(NotEnoughReplicasAfterAppendError):
        partition.replication_outcome(info.last_offset + 1, 3)
    partition.become(PartitionState([ME, OTHER, THIRD], OTHER, 4, [OTHER]))
    with pytest.raises(NotLeaderOrFollowerError, match="moved"):
        partition.replication_outcome(info.last_offset + 1, 3)


def test_a_consumer_reads_to_the_high_watermark_a_follower_to_the_log_end(
    open_manager: OpenManager,
) -> None:
    partition = _partition(open_manager, isr=[ME, OTHER], min_isr=1)
    partition.append(make_batch(3))
    partition.fetch(0, 1 << 20, replica=OTHER, min_one_batch=True)  # HW stays 0
    consumer = partition.fetch(0, 1 << 20, min_one_batch=True)
    assert (consumer.high_watermark, consumer.records) == (0, None)
    follower = partition.fetch(0, 1 << 20, replica=OTHER, min_one_batch=True)
    assert follower.records is not None and follower.records.length > 0
    partition.fetch(3, 1 << 20, replica=OTHER, min_one_batch=True)  # the follower has all
    consumer = partition.fetch(0, 1 << 20, min_one_batch=True)
    assert consumer.high_watermark == consumer.last_stable_offset == 3
    assert consumer.records is not None
    assert partition.fetch(0, 0, min_one_batch=False).records is None  # no room, no batch


def test_a_diverged_follower_is_told_where_to_truncate_and_gets_nothing(
    open_manager: OpenManager,
) -> None:
    partition = _partition(open_manager, isr=[ME, OTHER])
    partition.append(make_batch(3))  # epoch 3 starts at 0 here
    # The follower's last batch is of epoch 2, which this leader never had.
    read = partition.fetch(5, 1 << 20, replica=OTHER, last_fetched_epoch=2, min_one_batch=True)
    assert read.diverging_epoch == (2, 0)  # Kafka: an epoch before ours ends where ours starts
    assert read.records is None
    assert partition.progress is not None
    assert partition.progress.end_of(OTHER, 3) < 0  # its fetch moved nothing


def test_list_offsets_and_epoch_lookups(open_manager: OpenManager) -> None:
    partition = _partition(open_manager, isr=[ME])
    partition.append(make_batch(3, ts=BASE_TS))
    partition.become(PartitionState([ME, OTHER, THIRD], ME, 5, [ME]))
    partition.append(make_batch(2, ts=BASE_TS + 100))
    assert partition.offset_for(LATEST, for_client=True).offset == 5
    assert partition.offset_for(EARLIEST, for_client=True).offset == 0
    by_time = partition.offset_for(BASE_TS + 100, for_client=True)
    assert (by_time.offset, by_time.timestamp, by_time.leader_epoch) == (3, BASE_TS + 100, 5)
    assert partition.log.epochs.epoch_for(2) == 3
    assert partition.log.epochs.epoch_for(3) == 5
    assert partition.offset_for(LATEST_TIERED_TIMESTAMP, for_client=True).offset == -1
    assert partition.end_offset_for_epoch(3) == (3, 3)
    assert partition.end_offset_for_epoch(4) == (3, 3)  # the largest epoch at or below
    assert partition.end_offset_for_epoch(5) == (5, 5)


def test_a_dropped_leader_resigns_and_wakes_parked_requests(open_manager: OpenManager) -> None:
    partition = _partition(open_manager, isr=[ME, OTHER])

    async def park_then_drop() -> bool:
        waiting = asyncio.create_task(wait_for_any([partition], 30))
        await asyncio.sleep(0)
        was_leader = partition.resign()
        async with asyncio.timeout(1):
            await waiting
        return was_leader

    assert asyncio.run(park_then_drop()) is True
    assert not partition.is_leader
    with pytest.raises(NotLeaderOrFollowerError):
        partition.check_leader()
    assert partition.resign() is False


def test_only_a_follower_that_moved_recomputes_the_high_watermark(
    open_manager: OpenManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With 10,000 idle partitions, recomputing the HW over the ISR at every follower
    # fetch was a fifth of a leader's time; Kafka only tries when the follower moved.
    partition = _partition(open_manager)
    partition.append(make_batch(4))
    progress = partition.progress
    assert progress is not None
    computed: list[int] = []
    real = progress.high_watermark

    def counted(*args: Any) -> int:
        computed.append(1)
        return real(*args)

    monkeypatch.setattr(progress, "high_watermark", counted)
    for replica in (OTHER, THIRD):
        partition.record_follower_fetch(replica, 2)
    assert len(computed) == 2 and partition.log.high_watermark == 2
    for _ in range(3):
        partition.record_follower_fetch(OTHER, 2)  # nothing new: nothing to recompute
    assert len(computed) == 2
    partition.record_follower_fetch(OTHER, 4)
    partition.record_follower_fetch(THIRD, 4)
    assert len(computed) == 4 and partition.log.high_watermark == 4
