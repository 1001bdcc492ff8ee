"""Where a follower's log must be cut so that it is a prefix of its leader's (sans-IO).

The follower tells the leader the epoch of the last batch it holds (Fetch v12's
LastFetchedEpoch); when that epoch ends in the leader's log before the follower's fetch
offset, or the leader never had it, the leader answers with a DivergingEpoch: the largest
epoch it has that is not newer, and that epoch's end in its log (KIP-595; before it,
followers asked the same question with OffsetForLeaderEpoch). Kafka's rule
(``AbstractFetcherThread``, KIP-101 and KIP-279), never "truncate to the high watermark"
while the epochs can say better:

- The leader knows no epoch that old: nothing can be proven in common; fall back to our
  high watermark, as Kafka does.
- We have the leader's epoch: both logs agree up to where that epoch ends in the
  shorter of the two; cut there. Done.
- We do not have the leader's epoch (ours jumped over it): cut to where our largest
  epoch below it ends, or the leader's end if smaller, and ask again with that epoch,
  until the epochs meet.
"""

from __future__ import annotations

from dataclasses import dataclass

from partita.storage.leader_epochs import LeaderEpochCache

UNDEFINED = -1


@dataclass(frozen=True, slots=True)
class Truncation:
    offset: int  # cut the log here (never above its end)
    done: bool  # False: ask the leader again with the epoch now latest


def truncation_for(
    epochs: LeaderEpochCache,
    log_end: int,
    leader_epoch: int,
    leader_end: int,
    high_watermark: int = 0,
) -> Truncation:
    if leader_end == UNDEFINED:
        # The leader has no record of an epoch this old (or of any): only what was
        # committed is known to be shared.
        return Truncation(min(high_watermark, log_end), True)
    if leader_epoch == UNDEFINED:
        return Truncation(min(leader_end, log_end), True)
    our_epoch, our_end = epochs.end_offset_for(leader_epoch, log_end)
    if our_epoch == leader_epoch:
        return Truncation(min(leader_end, our_end), True)
    if our_epoch == UNDEFINED:
        return Truncation(min(leader_end, log_end), True)
    return Truncation(min(leader_end, our_end), False)
