"""The leader's follower bookkeeping (HW, ISR) and the follower's truncation rule."""

from __future__ import annotations

from pathlib import Path

from partita.replication.progress import LeaderProgress
from partita.replication.truncation import truncation_for
from partita.storage.leader_epochs import LeaderEpochCache


def test_high_watermark_is_the_isr_minimum_and_never_moves_back() -> None:
    p = LeaderProgress(1, [1, 2, 3], now_ms=0)
    assert p.high_watermark([1, 2, 3], 100, 0, 2) == 0  # followers unknown yet
    p.record_fetch(2, 60, 100, 10)
    p.record_fetch(3, 40, 100, 10)
    assert p.high_watermark([1, 2, 3], 100, 0, 2) == 40
    assert p.high_watermark([1, 2], 100, 0, 2) == 60
    p.record_fetch(3, 20, 100, 20)  # a follower that went back (truncated)
    assert p.high_watermark([1, 2, 3], 100, 40, 2) == 40


def test_high_watermark_waits_while_the_isr_is_below_min_insync() -> None:
    p = LeaderProgress(1, [1, 2, 3], now_ms=0)
    assert p.high_watermark([1], 100, 7, 2) == 7
    # min.insync.replicas above the replica count: the replica count rules.
    single = LeaderProgress(1, [1], now_ms=0)
    assert single.high_watermark([1], 100, 7, 2) == 100


def test_caught_up_time_follows_kafkas_rule() -> None:
    p = LeaderProgress(1, [1, 2], now_ms=0)
    p.record_fetch(2, 50, 100, 1_000)  # behind: not caught up now
    assert p.followers[2].last_caught_up_ms == 0
    p.record_fetch(2, 100, 120, 2_000)  # reached what the leader had at its last fetch
    assert p.followers[2].last_caught_up_ms == 1_000
    p.record_fetch(2, 120, 120, 3_000)  # at the leader's end
    assert p.followers[2].last_caught_up_ms == 3_000


def test_lagging_followers_leave_and_caught_up_ones_may_join() -> None:
    p = LeaderProgress(1, [1, 2, 3], now_ms=0)
    p.record_fetch(2, 100, 100, 5_000)
    p.record_fetch(3, 10, 100, 5_000)
    assert p.out_of_sync([1, 2, 3], 100, 20_000, 30_000) == []
    assert p.out_of_sync([1, 2, 3], 100, 31_000, 30_000) == [3]
    # The log end moved on to 150 and follower 2 stopped fetching at 100 (at 5 s).
    assert p.out_of_sync([1, 2, 3], 150, 40_000, 30_000) == [2, 3]
    assert not p.may_join(3, 50, 0)
    p.record_fetch(3, 60, 100, 41_000)
    assert p.may_join(3, 50, 0)
    assert not p.may_join(3, 50, 80)  # not yet at the start of the leader's epoch


def test_a_follower_at_the_leader_end_never_lags() -> None:
    p = LeaderProgress(1, [1, 2], now_ms=0)
    p.record_fetch(2, 100, 100, 0)
    assert p.out_of_sync([1, 2], 100, 10**9, 30_000) == []


def _cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", entries)


def test_truncation_when_both_have_the_epoch(tmp_path: Path) -> None:
    epochs = _cache(tmp_path, [(0, 0), (2, 50)])
    # The leader's epoch 2 ended at 70; ours runs to our end (90): cut at 70.
    cut = truncation_for(epochs, 90, 2, 70)
    assert (cut.offset, cut.done) == (70, True)
    # The leader has more of epoch 2 than we do: keep all of ours.
    assert truncation_for(epochs, 60, 2, 80).offset == 60


def test_truncation_when_our_epoch_is_unknown_to_the_leader(tmp_path: Path) -> None:
    # We led epoch 3 alone (from 50) and were replaced; the leader's largest epoch <= 3
    # is 1, which ended at 60 in its log. We never had epoch 1: our epoch 0 ends at 50.
    epochs = _cache(tmp_path, [(0, 0), (3, 50)])
    cut = truncation_for(epochs, 80, 1, 60)
    assert (cut.offset, cut.done) == (50, False)  # ask again with epoch 0


def test_truncation_when_the_leader_knows_no_epoch(tmp_path: Path) -> None:
    epochs = _cache(tmp_path, [(4, 10)])
    assert truncation_for(epochs, 30, -1, -1, high_watermark=12).offset == 12  # Kafka's fallback
