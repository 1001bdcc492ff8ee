"""A leader's rules on a real Partition and log, without sockets.

- A leader just elected does not know where the committed records end until its
  followers' first fetches move its high watermark past the start of its epoch; until
  then it answers ListOffsets latest with OFFSET_NOT_AVAILABLE, as Kafka does (KIP-207),
  instead of an end offset behind what consumers were already told.
- A caught-up follower joins the ISR only once its broker runs: the controller takes
  starting and stopping brokers out of ISRs, and the two would otherwise trade writes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from partita.cluster.model import PartitionState
from partita.errors import OffsetNotAvailableError
from partita.server.partition import Partition
from partita.storage.log_manager import LogManager
from tests.conftest import make_batch

OpenManager = Callable[..., LogManager]
NEW_LEADER, FOLLOWER = 1, 2


def test_a_new_leaders_end_is_unknown_until_its_high_watermark_reaches_its_epoch(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    for _ in range(3):
        log.append_as_leader(make_batch(2), leader_epoch=0)  # what it copied as a follower
    log.update_high_watermark(2)  # the old leader's high watermark, as last heard
    partition = Partition("t", 0, log, NEW_LEADER)
    partition.become(
        PartitionState(
            replicas=[NEW_LEADER, FOLLOWER],
            leader=NEW_LEADER,
            leader_epoch=1,
            isr=[NEW_LEADER, FOLLOWER],
        )
    )
    assert partition.epoch_start_offset == 6
    with pytest.raises(OffsetNotAvailableError):
        partition.check_offsets_known()
    partition.record_follower_fetch(FOLLOWER, 4)
    assert log.high_watermark == 4
    with pytest.raises(OffsetNotAvailableError):
        partition.check_offsets_known()
    partition.record_follower_fetch(FOLLOWER, 6)
    assert log.high_watermark == 6
    partition.check_offsets_known()  # known now


def test_a_leader_alone_in_its_isr_knows_its_end_at_once(open_manager: OpenManager) -> None:
    log = open_manager().get_or_create("t", 0)
    log.append_as_leader(make_batch(3), leader_epoch=0)
    partition = Partition("t", 0, log, NEW_LEADER)
    partition.become(
        PartitionState(replicas=[NEW_LEADER], leader=NEW_LEADER, leader_epoch=1, isr=[NEW_LEADER])
    )
    partition.check_offsets_known()
    assert log.high_watermark == 3


def test_a_caught_up_follower_joins_the_isr_only_once_its_broker_runs(
    open_manager: OpenManager,
) -> None:
    log = open_manager().get_or_create("t", 0)
    partition = Partition("t", 0, log, NEW_LEADER)
    proposed: list[list[int]] = []
    running: set[int] = set()
    partition.isr_writer = lambda _p, isr: proposed.append(isr)
    partition.isr_eligible = running.__contains__
    partition.become(
        PartitionState(
            replicas=[NEW_LEADER, FOLLOWER], leader=NEW_LEADER, leader_epoch=1, isr=[NEW_LEADER]
        )
    )
    partition.append(make_batch(2))
    partition.record_follower_fetch(FOLLOWER, 2)  # caught up, but its broker is starting
    assert proposed == []
    running.add(FOLLOWER)
    partition.record_follower_fetch(FOLLOWER, 2)
    assert proposed == [[NEW_LEADER, FOLLOWER]]
