"""A leader's view of its followers, and Kafka's rules for the high watermark and the
ISR (``Partition.scala``, read for its semantics). Sans-IO: times are passed in.

- A follower's log end offset is the offset it last fetched from: it has everything
  below it.
- It is *caught up* when it fetched the leader's log end offset; its last caught-up time
  is when it last was (or, if it fetched at least what the leader had at its previous
  fetch, the time of that previous fetch: it caught up to that point then).
- The high watermark is the smallest log end offset in the ISR, the leader's own
  included, and never moves back; it does not move at all while the ISR is smaller than
  ``min(min.insync.replicas, replicas)``, so that nothing is called committed that
  fewer replicas hold than the topic demands.
- A follower leaves the ISR when it is not at the leader's log end and has not caught up
  within ``replica.lag.time.max.ms``; it may join when its log end offset reaches the
  high watermark and the start of the leader's current epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

UNKNOWN = -1


@dataclass(slots=True)
class FollowerProgress:
    log_end_offset: int = UNKNOWN
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN


class LeaderProgress:
    def __init__(self, leader: int, replicas: Iterable[int], now_ms: int) -> None:
        self.leader = leader
        # A new leader knows nothing of its followers' logs yet, and gives those in the
        # ISR a full lag window to show up (Kafka resets their caught-up time too).
        self.followers = {
            r: FollowerProgress(last_caught_up_ms=now_ms) for r in replicas if r != leader
        }

    def set_replicas(self, replicas: Iterable[int], now_ms: int) -> None:
        wanted = {r for r in replicas if r != self.leader}
        for gone in set(self.followers) - wanted:
            del self.followers[gone]
        for new in wanted - set(self.followers):
            self.followers[new] = FollowerProgress(last_caught_up_ms=now_ms)

    def record_fetch(self, replica: int, fetch_offset: int, leader_end: int, now_ms: int) -> bool:
        """Whether the follower's log end moved: only then can the high watermark."""
        follower = self.followers[replica]
        moved = fetch_offset != follower.log_end_offset
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_leader_end = leader_end
        follower.last_fetch_ms = now_ms
        return moved

    def end_of(self, replica: int, leader_end: int) -> int:
        if replica == self.leader:
            return leader_end
        follower = self.followers.get(replica)
        return follower.log_end_offset if follower else UNKNOWN

    def high_watermark(
        self, isr: Iterable[int], leader_end: int, current: int, min_insync: int
    ) -> int:
        """The high watermark the ISR allows now (``current`` if it may not move)."""
        members = list(isr)
        required = min(min_insync, len(self.followers) + 1)
        if len(members) < required:
            return current
        candidate = min(self.end_of(r, leader_end) for r in members)
        return max(current, candidate)

    def out_of_sync(
        self, isr: Iterable[int], leader_end: int, now_ms: int, max_lag_ms: int
    ) -> list[int]:
        """ISR followers that have not caught up within ``max_lag_ms``."""
        lagging = []
        for replica in isr:
            follower = self.followers.get(replica)
            if follower is None:
                continue  # the leader itself
            if follower.log_end_offset == leader_end:
                continue
            if now_ms - follower.last_caught_up_ms > max_lag_ms:
                lagging.append(replica)
        return lagging

    def may_join(self, replica: int, high_watermark: int, epoch_start: int) -> bool:
        """Whether a follower outside the ISR has caught up enough to join it."""
        follower = self.followers.get(replica)
        if follower is None or follower.log_end_offset == UNKNOWN:
            return False
        return follower.log_end_offset >= max(high_watermark, epoch_start)
